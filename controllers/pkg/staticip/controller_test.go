package staticip

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	"github.com/staticip/staticip/apis/generated/informers/externalversions"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/apis/podip"
	"github.com/staticip/staticip/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestAnnotateOnlyThePodItChecked: the controller tells the CNI which IP a native
// StatefulSet's pod gets by patching the pod it found in its cache, after checking that the
// pod's workload is the record's. Between that check and the patch, the pod can be replaced
// by a same-name pod of another workload (here: OpenKruise's StatefulSet web replacing apps'
// StatefulSet web's web-0). The patch is bound to the checked pod (uid and resourceVersion),
// so the newcomer never gets the retained IP from this trusted identity. The window is made
// exact: the controller's cache (never started) holds the old pod; the API server the new one.
func TestAnnotateOnlyThePodItChecked(t *testing.T) {
	env := testenv.Get(t)
	ctx := testenv.Context(t, 2*time.Minute)
	kube := kubernetes.NewForConfigOrDie(env.Config)
	client := versioned.NewForConfigOrDie(env.Config)
	ns := "sip-" + rand.String(6)
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kf := informers.NewSharedInformerFactory(kube, 0)
	sf := externalversions.NewSharedInformerFactory(client, 0)
	c, err := NewController(kube, client, sf.Jke().V1().StaticIPs(), kf.Core().V1().Pods(),
		sf.Jke().V1alpha1().EnhancedStatefulSets(), kf.Apps().V1().StatefulSets(), sf.Jke().V1().IPRanges(), nil, record.NewFakeRecorder(100))
	if err != nil {
		t.Fatal(err)
	}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	sts, err := kube.AppsV1().StatefulSets(ns).Create(ctx, &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "web",
		Annotations: map[string]string{jkev1.AnnotationEnable: "true"}},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1), Selector: sel, ServiceName: "web",
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: sel.MatchLabels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sip, err := client.JkeV1().StaticIPs(ns).Create(ctx, &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Name: "web-0"},
		Spec: jkev1.StaticIPSpec{Pod: "web-0", APIGroup: "apps", Kind: "StatefulSet", Ref: "web", IP: "10.96.7.7", Node: "node-a"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := func(apiVersion, kind string, uid string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: ns, Labels: sel.MatchLabels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: "web", UID: types.UID(uid), Controller: ptr.To(true)}}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}
	}
	// What the cache saw: apps' web-0 (created, checked, then deleted on the API server).
	checked, err := kube.CoreV1().Pods(ns).Create(ctx, pod("apps/v1", "StatefulSet", string(sts.UID)), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := kube.CoreV1().Pods(ns).Delete(ctx, "web-0", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	// What the API server holds now: OpenKruise's web-0.
	if _, err := kube.CoreV1().Pods(ns).Create(ctx, pod("apps.kruise.io/v1beta1", "StatefulSet", "0f0e0d0c-0000-0000-0000-000000000009"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := kf.Apps().V1().StatefulSets().Informer().GetIndexer().Add(sts); err != nil {
		t.Fatal(err)
	}
	if err := sf.Jke().V1().StaticIPs().Informer().GetIndexer().Add(sip); err != nil {
		t.Fatal(err)
	}
	if err := kf.Core().V1().Pods().Informer().GetIndexer().Add(checked); err != nil {
		t.Fatal(err)
	}
	if err := c.sync(ctx, ns+"/web-0"); err != nil {
		t.Errorf("sync: %v (a precondition conflict is a retry, not an error)", err)
	}
	if c.queue.Len() != 1 {
		t.Errorf("the record was not queued again for the newer pod (queue length %d)", c.queue.Len())
	}
	got, err := kube.CoreV1().Pods(ns).Get(ctx, "web-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ip, ok := got.Annotations[podip.AnnotationIPAddress]; ok {
		t.Fatalf("pod web-0 of %s got %s=%s, the IP StaticIP web-0 keeps for apps' StatefulSet web", metav1.GetControllerOf(got).APIVersion, podip.AnnotationIPAddress, ip)
	}
}
