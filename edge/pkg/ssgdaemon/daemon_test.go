package ssgdaemon

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	superedgev1 "github.com/staticip/staticip/apis/superedge/v1"
	"github.com/staticip/staticip/edge/pkg/gridhosts"
)

func TestValidate(t *testing.T) {
	for _, tt := range []struct {
		name   string
		change func(*Options)
		err    string
	}{
		{"defaults with a node", func(o *Options) {}, ""},
		{"no node", func(o *Options) { o.NodeName = "" }, "--node-name"},
		{"file with a path", func(o *Options) { o.HostsFile = "a/hosts" }, "plain file name"},
		{"bad domain", func(o *Options) { o.ClusterDomain = "Cluster_Local" }, "--cluster-domain"},
		{"domain with a trailing dot", func(o *Options) { o.ClusterDomain = "cluster.local." }, ""},
		{"bad metrics address", func(o *Options) { o.Serving.MetricsBindAddress = "localhost" }, "--metrics-bind-address"},
		{"metrics off", func(o *Options) { o.Serving.MetricsBindAddress = "0" }, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := NewOptions()
			o.NodeName = "n1"
			tt.change(o)
			err := o.Validate()
			if (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
				t.Fatalf("Validate() = %v, want %q", err, tt.err)
			}
		})
	}
}

// The informers' transforms keep everything gridhosts.Compute reads: the records from
// trimmed objects are the records from the full ones.
func TestTrimKeepsWhatComputeReads(t *testing.T) {
	g := &superedgev1.StatefulSetGrid{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db", UID: "g1"},
		Spec: superedgev1.StatefulSetGridSpec{GridUniqKey: "zone"}}
	set := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db-a", UID: "s1", Labels: map[string]string{superedgev1.LabelGridUnit: "a"},
			Annotations:     map[string]string{"big": strings.Repeat("x", 1000)},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(g, superedgev1.SchemeGroupVersion.WithKind("StatefulSetGrid"))}},
		Spec: appsv1.StatefulSetSpec{ServiceName: "db-svc", Template: corev1.PodTemplateSpec{
			Spec: corev1.PodSpec{NodeSelector: map[string]string{"zone": "a"}, Containers: []corev1.Container{{Name: "c", Image: "i"}}}}},
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db-a-0", Labels: map[string]string{appsv1.PodIndexLabel: "0"},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(set, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1", PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"zone": "a"}}, Status: corev1.NodeStatus{Images: make([]corev1.ContainerImage, 50)}}
	full := gridhosts.Input{Node: node, Grids: []*superedgev1.StatefulSetGrid{g}, StatefulSets: []*appsv1.StatefulSet{set}, Pods: []*corev1.Pod{pod}, ClusterDomain: "cluster.local"}
	ts, _ := trimStatefulSet(set.DeepCopy())
	tp, _ := trimPod(pod.DeepCopy())
	tn, _ := trimNode(node.DeepCopy())
	trimmed := gridhosts.Input{Node: tn.(*corev1.Node), Grids: full.Grids, StatefulSets: []*appsv1.StatefulSet{ts.(*appsv1.StatefulSet)},
		Pods: []*corev1.Pod{tp.(*corev1.Pod)}, ClusterDomain: "cluster.local"}
	want, _ := gridhosts.Compute(full)
	got, _ := gridhosts.Compute(trimmed)
	if len(want) != 1 || string(gridhosts.Render("n1", want)) != string(gridhosts.Render("n1", got)) {
		t.Fatalf("trimmed objects give %v, full ones %v", got, want)
	}
	if len(tp.(*corev1.Pod).Spec.Containers) != 0 || ts.(*appsv1.StatefulSet).Annotations != nil || len(tn.(*corev1.Node).Status.Images) != 0 {
		t.Error("the transforms kept fields the records do not need")
	}
	// A tombstone passes unchanged.
	tomb := cache.DeletedFinalStateUnknown{Key: "ns/db-a-0", Obj: pod}
	if out, _ := trimPod(tomb); out != any(tomb) {
		t.Error("a tombstone was changed")
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db-svc"}, Spec: corev1.ServiceSpec{PublishNotReadyAddresses: true, ClusterIP: "None"}}
	if out, _ := trimService(svc); !out.(*corev1.Service).Spec.PublishNotReadyAddresses || out.(*corev1.Service).Spec.ClusterIP != "" {
		t.Error("trimService must keep publishNotReadyAddresses and nothing else of the spec")
	}
}
