package apis_test

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	"github.com/staticip/staticip/apis/generated/informers/externalversions"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	superedgev1 "github.com/staticip/staticip/apis/superedge/v1"
	"github.com/staticip/staticip/internal/testenv"
)

// watchFor starts an informer through the generated factory and returns a channel that
// receives the name of every object added.
func watchFor(t *testing.T, ctx context.Context, informer cache.SharedIndexInformer) <-chan string {
	t.Helper()
	added := make(chan string, 16)
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) {
			m, _ := obj.(metav1.Object)
			added <- m.GetName()
		},
	}); err != nil {
		t.Fatal(err)
	}
	go informer.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		t.Fatal("informer did not sync")
	}
	return added
}

func expectAdded(t *testing.T, ch <-chan string, name string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case got := <-ch:
			if got == name {
				return
			}
		case <-deadline:
			t.Fatalf("informer saw no add event for %s", name)
		}
	}
}

func podTemplate() corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "rt"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "test-server:v1"}}},
	}
}

// TestTypedClientRoundTrip: create, get, list, watch, status update for every kind, and the
// scale subresource of EnhancedStatefulSet, through the generated clientset and informers.
func TestTypedClientRoundTrip(t *testing.T) {
	env := testenv.Get(t)
	cs := versioned.NewForConfigOrDie(env.Config)
	ctx := testenv.Context(t, 3*time.Minute)
	factory := externalversions.NewSharedInformerFactory(cs, 0)
	const ns = "default"

	t.Run("StaticIP", func(t *testing.T) {
		added := watchFor(t, ctx, factory.Jke().V1().StaticIPs().Informer())
		in := &jkev1.StaticIP{
			ObjectMeta: metav1.ObjectMeta{Name: "rt-0", Namespace: ns},
			Spec: jkev1.StaticIPSpec{Ref: "rt", Kind: "EnhancedStatefulSet", Node: "node-1", IP: "10.10.0.9", Pod: "rt-0",
				Resources:       corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")},
				RetentionPolicy: &jkev1.StaticIPRetentionPolicy{WhenScaled: jkev1.RetainStaticIP}},
		}
		created, err := cs.JkeV1().StaticIPs(ns).Create(ctx, in, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if created.Spec.RetentionPolicy.WhenDeleted != jkev1.DeleteStaticIP {
			t.Errorf("whenDeleted defaulted to %q, want Delete", created.Spec.RetentionPolicy.WhenDeleted)
		}
		expectAdded(t, added, "rt-0")
		got, err := cs.JkeV1().StaticIPs(ns).Get(ctx, "rt-0", metav1.GetOptions{})
		if err != nil || got.Spec.IP != "10.10.0.9" || !got.Spec.Resources.Cpu().Equal(resource.MustParse("250m")) {
			t.Fatalf("get: %v %+v", err, got)
		}
		got.Status.Phase = jkev1.StaticIPBound
		got.Status.PodUID = "uid-1"
		upd, err := cs.JkeV1().StaticIPs(ns).UpdateStatus(ctx, got, metav1.UpdateOptions{})
		if err != nil || upd.Status.Phase != jkev1.StaticIPBound {
			t.Fatalf("update status: %v", err)
		}
		// The status subresource ignores spec changes; the main resource ignores status.
		upd.Spec.Node = "node-2"
		upd.Status.Phase = jkev1.StaticIPReserved
		upd2, err := cs.JkeV1().StaticIPs(ns).Update(ctx, upd, metav1.UpdateOptions{})
		if err != nil || upd2.Spec.Node != "node-2" || upd2.Status.Phase != jkev1.StaticIPBound {
			t.Fatalf("update: %v, node %q phase %q", err, upd2.Spec.Node, upd2.Status.Phase)
		}
		list, err := cs.JkeV1().StaticIPs(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) == 0 {
			t.Fatalf("list: %v", err)
		}
		lister := factory.Jke().V1().StaticIPs().Lister()
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			s, err := lister.StaticIPs(ns).Get("rt-0")
			return err == nil && s.Spec.Node == "node-2", nil
		}); err != nil {
			t.Fatalf("lister never saw the update: %v", err)
		}
	})

	t.Run("IPRange", func(t *testing.T) {
		added := watchFor(t, ctx, factory.Jke().V1().IPRanges().Informer())
		in := &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: "node-1-a"},
			Spec: jkev1.IPRangeSpec{CIDR: "10.10.0.0/26", Node: "node-1", Gateway: "10.10.0.1", ExcludeIPs: []string{"10.10.0.2"}}}
		if _, err := cs.JkeV1().IPRanges().Create(ctx, in, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		expectAdded(t, added, "node-1-a")
		got, err := cs.JkeV1().IPRanges().Get(ctx, "node-1-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got.Status = jkev1.IPRangeStatus{Total: 61, Used: 3, Reserved: 1, Free: 57}
		if upd, err := cs.JkeV1().IPRanges().UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil || upd.Status.Free != 57 {
			t.Fatalf("update status: %v", err)
		}
	})

	t.Run("EnhancedStatefulSet", func(t *testing.T) {
		added := watchFor(t, ctx, factory.Jke().V1alpha1().EnhancedStatefulSets().Informer())
		mu := intstr.FromString("50%")
		in := &jkev1alpha1.EnhancedStatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: "rt", Namespace: ns},
			Spec: jkev1alpha1.EnhancedStatefulSetSpec{
				Replicas: ptr.To[int32](3),
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "rt"}},
				Template: podTemplate(),
				UpdateStrategy: jkev1alpha1.EnhancedStatefulSetUpdateStrategy{
					RollingUpdate: &jkev1alpha1.RollingUpdateEnhancedStatefulSetStrategy{Partition: ptr.To[int32](1), MaxUnavailable: &mu},
				},
			},
		}
		created, err := cs.JkeV1alpha1().EnhancedStatefulSets(ns).Create(ctx, in, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if created.Spec.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType ||
			created.Spec.UpdateStrategy.RollingUpdate.PodUpdatePolicy != jkev1alpha1.RecreatePodUpdatePolicy ||
			created.Spec.PodManagementPolicy != appsv1.OrderedReadyPodManagement {
			t.Errorf("defaults not applied: %+v", created.Spec.UpdateStrategy)
		}
		if created.Spec.Template.Labels["app"] != "rt" {
			t.Errorf("pod template labels pruned: %v", created.Spec.Template.Labels)
		}
		expectAdded(t, added, "rt")
		created.Status = jkev1alpha1.EnhancedStatefulSetStatus{Replicas: 3, ReadyReplicas: 2, LabelSelector: "app=rt", UpdateRevision: "rt-abc"}
		if _, err := cs.JkeV1alpha1().EnhancedStatefulSets(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("update status: %v", err)
		}
		scale, err := cs.JkeV1alpha1().EnhancedStatefulSets(ns).GetScale(ctx, "rt", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get scale: %v", err)
		}
		if scale.Spec.Replicas != 3 || scale.Status.Replicas != 3 || scale.Status.Selector != "app=rt" {
			t.Fatalf("scale = %+v", scale)
		}
		scale.Spec.Replicas = 5
		if _, err := cs.JkeV1alpha1().EnhancedStatefulSets(ns).UpdateScale(ctx, "rt", scale, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("update scale: %v", err)
		}
		got, err := cs.JkeV1alpha1().EnhancedStatefulSets(ns).Get(ctx, "rt", metav1.GetOptions{})
		if err != nil || *got.Spec.Replicas != 5 {
			t.Fatalf("replicas after scale = %v (%v), want 5", got.Spec.Replicas, err)
		}
		var _ *autoscalingv1.Scale = scale
	})

	t.Run("Grids", func(t *testing.T) {
		dgAdded := watchFor(t, ctx, factory.Superedge().V1().DeploymentGrids().Informer())
		ssgAdded := watchFor(t, ctx, factory.Superedge().V1().StatefulSetGrids().Informer())
		sgAdded := watchFor(t, ctx, factory.Superedge().V1().ServiceGrids().Informer())
		sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "rt"}}
		dg, err := cs.SuperedgeV1().DeploymentGrids(ns).Create(ctx, &superedgev1.DeploymentGrid{
			ObjectMeta: metav1.ObjectMeta{Name: "rt-dg", Namespace: ns},
			Spec:       superedgev1.DeploymentGridSpec{GridUniqKey: "zone", Template: appsv1.DeploymentSpec{Selector: sel, Template: podTemplate()}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		dg.Status.Units = []superedgev1.GridUnitStatus{{Value: "zone-0", Name: "rt-dg-zone-0", Replicas: 1}}
		if upd, err := cs.SuperedgeV1().DeploymentGrids(ns).UpdateStatus(ctx, dg, metav1.UpdateOptions{}); err != nil || len(upd.Status.Units) != 1 || upd.Status.Units[0].Replicas != 1 {
			t.Fatalf("dg status: %v", err)
		}
		ssg, err := cs.SuperedgeV1().StatefulSetGrids(ns).Create(ctx, &superedgev1.StatefulSetGrid{
			ObjectMeta: metav1.ObjectMeta{Name: "rt-ssg", Namespace: ns},
			Spec:       superedgev1.StatefulSetGridSpec{GridUniqKey: "zone", Template: appsv1.StatefulSetSpec{Selector: sel, Template: podTemplate(), ServiceName: "rt-sg-svc"}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ssg.Status.Units = []superedgev1.GridUnitStatus{{Value: "zone-1", Name: "rt-ssg-zone-1", Replicas: 2}}
		if _, err := cs.SuperedgeV1().StatefulSetGrids(ns).UpdateStatus(ctx, ssg, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("ssg status: %v", err)
		}
		sg, err := cs.SuperedgeV1().ServiceGrids(ns).Create(ctx, &superedgev1.ServiceGrid{
			ObjectMeta: metav1.ObjectMeta{Name: "rt-sg", Namespace: ns},
			Spec:       superedgev1.ServiceGridSpec{GridUniqKey: "zone", Template: corev1.ServiceSpec{Selector: map[string]string{"app": "rt"}, Ports: []corev1.ServicePort{{Port: 80}}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sg.Status.ObservedGeneration = sg.Generation
		if _, err := cs.SuperedgeV1().ServiceGrids(ns).UpdateStatus(ctx, sg, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("sg status: %v", err)
		}
		expectAdded(t, dgAdded, "rt-dg")
		expectAdded(t, ssgAdded, "rt-ssg")
		expectAdded(t, sgAdded, "rt-sg")
		for _, l := range []func() (int, error){
			func() (int, error) {
				l, err := cs.SuperedgeV1().DeploymentGrids(ns).List(ctx, metav1.ListOptions{})
				return len(l.Items), err
			},
			func() (int, error) {
				l, err := cs.SuperedgeV1().StatefulSetGrids(ns).List(ctx, metav1.ListOptions{})
				return len(l.Items), err
			},
			func() (int, error) {
				l, err := cs.SuperedgeV1().ServiceGrids(ns).List(ctx, metav1.ListOptions{})
				return len(l.Items), err
			},
		} {
			if n, err := l(); err != nil || n == 0 {
				t.Fatalf("list: %d %v", n, err)
			}
		}
	})
}
