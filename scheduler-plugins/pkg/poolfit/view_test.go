package poolfit

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

// The free addresses Filter sees follow the node's pods and the namespace's labels, although
// they are memoised per node: a pod added to the node (a new NodeInfo generation) takes an
// address, and a namespace relabelled so that no pool selects it any more stops its waiting pods
// from counting against the pool.
func TestVerdictFollowsTheNodesPodsAndNamespaceLabels(t *testing.T) {
	kube := fake.NewClientset()
	factory := informers.NewSharedInformerFactory(kube, 0)
	nsInformer := factory.Core().V1().Namespaces()
	v := &View{pools: map[string]*jkev1.IPPool{}, blocks: map[string]*jkev1.IPRange{}, annotated: map[string]bool{},
		nsLabels: map[string]map[string]string{}, waiting: map[types.UID]*v1.Pod{}, namespaces: nsInformer.Lister(), logger: klog.Background()}
	v.ready.Store(true)
	setNS := func(labels map[string]string) {
		ns := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team", Labels: labels}}
		if err := nsInformer.Informer().GetIndexer().Update(ns); err != nil {
			t.Fatal(err)
		}
		v.setNamespace(ns.Name, ns, true)
	}
	setNS(map[string]string{"tenant": "blue"})
	v.setPool("blue", &jkev1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "blue"},
		Spec: jkev1.IPPoolSpec{CIDRs: []string{"10.9.0.0/29"}, NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": "blue"}}}}, true)
	// Its one block, on n1: /30, two addresses for pods; no block left to give.
	v.setBlock("blue-0", &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: "blue-0", Labels: map[string]string{jkev1.LabelIPPool: "blue"}},
		Spec: jkev1.IPRangeSpec{CIDR: "10.9.0.0/30", Node: "n1"}}, true)

	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	waitingPod := func(i int) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: fmt.Sprintf("w%d", i), UID: types.UID(fmt.Sprintf("w%d", i))},
			Spec: v1.PodSpec{NodeName: "n1"}, Status: v1.PodStatus{Phase: v1.PodPending}}
	}
	incoming := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "new", UID: "new"}}
	nodeInfo := framework.NewNodeInfo(waitingPod(0))
	nodeInfo.SetNode(node)

	verdict := func(step string, want bool) {
		t.Helper()
		s := v.Snapshot()
		ch, err := v.Choose(s, incoming)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		pools := ch.Pools
		if len(pools) == 0 {
			pools = []string{"blue"} // the pod's own annotation would name it
		}
		ok, why := v.Verdict(s, incoming, pools, nodeInfo)
		if ok != want {
			t.Fatalf("%s: verdict %v (%s), want %v", step, ok, why, want)
		}
		// Asked again on the same snapshot and pods (the memoised count): the same answer.
		if again, _ := v.Verdict(s, incoming, pools, nodeInfo); again != ok {
			t.Fatalf("%s: asked again, verdict %v, first %v", step, again, ok)
		}
	}
	verdict("one pod of the pool waits on n1, one address left", true)
	nodeInfo.AddPod(waitingPod(1))
	verdict("a second pod of the pool bound to n1 takes the last address", false)
	setNS(map[string]string{"tenant": "red"})
	verdict("the namespace relabelled: its bound pods no longer wait for the pool", true)
}

// Filter records rejected pods (Wait, from the scheduler's parallel filter goroutines) while
// informer handlers report pool, block and namespace changes (changedLocked): the waiting set is
// read only under its lock. Run with -race (make test does): CI of 65b36f2 caught
// changedLocked reading the set's length after letting go of the lock.
func TestWaitBesideChangesIsRaceFree(t *testing.T) {
	v := &View{pools: map[string]*jkev1.IPPool{}, blocks: map[string]*jkev1.IPRange{}, annotated: map[string]bool{},
		nsLabels: map[string]map[string]string{}, waiting: map[types.UID]*v1.Pod{}, logger: klog.Background()}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 2000 {
			v.Wait(&v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: fmt.Sprint(i), UID: types.UID(fmt.Sprint(i))}})
		}
	}()
	for i := 0; ; i++ {
		select {
		case <-done:
			v.setBlock("b", nil, false) // the last change takes whatever still waits
			v.waitMu.Lock()
			left := len(v.waiting)
			v.waitMu.Unlock()
			if left != 0 {
				t.Fatalf("%d pods still waiting after a change", left)
			}
			return
		default:
			v.setBlock("b", nil, false)
		}
	}
}

// The snapshot's ServesEveryNode follows the pools: PreFilter lets a pod skip the pool check
// on its answer, so a snapshot kept after the pool ran out of blocks, got a nodeSelector or
// began deleting would place pods on nodes without an address of their pool.
func TestServesEveryNodeFollowsThePool(t *testing.T) {
	v := &View{pools: map[string]*jkev1.IPPool{}, blocks: map[string]*jkev1.IPRange{}, annotated: map[string]bool{},
		nsLabels: map[string]map[string]string{}, waiting: map[types.UID]*v1.Pod{}, logger: klog.Background()}
	pool := func(mutate func(*jkev1.IPPool)) *jkev1.IPPool {
		p := &jkev1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "blue"}, Spec: jkev1.IPPoolSpec{CIDRs: []string{"10.9.0.0/16"},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tenant": "blue"}}},
			Status: jkev1.IPPoolStatus{BlocksFree: 3}}
		if mutate != nil {
			mutate(p)
		}
		return p
	}
	step := func(name string, p *jkev1.IPPool, want bool) {
		t.Helper()
		v.setPool("blue", p, true)
		if got := v.Snapshot().ServesEveryNode([]string{"blue"}); got != want {
			t.Fatalf("%s: ServesEveryNode = %v, want %v", name, got, want)
		}
	}
	step("blocks left", pool(nil), true)
	step("no block left", pool(func(p *jkev1.IPPool) { p.Status.BlocksFree = 0 }), false)
	step("blocks again", pool(nil), true)
	// A released block (an IPRange of the pool no node holds) is a block to give.
	v.setPool("blue", pool(func(p *jkev1.IPPool) { p.Status.BlocksFree = 0 }), true)
	v.setBlock("blue-0", &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: "blue-0", Labels: map[string]string{jkev1.LabelIPPool: "blue"}},
		Spec: jkev1.IPRangeSpec{CIDR: "10.9.0.0/26"}}, true)
	if !v.Snapshot().ServesEveryNode([]string{"blue"}) {
		t.Fatal("a released block: ServesEveryNode = false, want true")
	}
	v.setBlock("blue-0", nil, false)
	if v.Snapshot().ServesEveryNode([]string{"blue"}) {
		t.Fatal("the released block gone: ServesEveryNode = true, want false")
	}
	step("a nodeSelector", pool(func(p *jkev1.IPPool) {
		p.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"zone": "a"}}
	}), false)
	step("being deleted", pool(func(p *jkev1.IPPool) { now := metav1.Now(); p.DeletionTimestamp = &now }), false)
	v.setPool("blue", nil, false)
	if v.Snapshot().ServesEveryNode([]string{"blue"}) {
		t.Fatal("the pool deleted: ServesEveryNode = true, want false")
	}
}
