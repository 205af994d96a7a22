package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

// A node's claim that it holds a range is its own entry of the IPRange's status.holders, and
// only its own (manifests/cni/admission.yaml, staticip-agent-range-status, checked on the real
// API server against the agent's pod-bound token): node A's agent may add, change and remove
// its entry in any range (it drains ranges it does not own), and write the counts of the ranges
// it owns; it can never add, change or remove node B's entry, claim a generation above the
// range's ownerGeneration, or write the counts of B's range.
func TestAgentWritesOnlyItsOwnHolderEntry(t *testing.T) {
	f := newCredFixture(t)
	f.createRanges(t)
	ctx, nodeA, nodeB := f.ctx, f.nodeA, f.nodeB
	admin := versioned.NewForConfigOrDie(f.env.Config).JkeV1().IPRanges()
	agent := versioned.NewForConfigOrDie(f.agentCfg).JkeV1().IPRanges()
	rangeA, rangeB := f.rangeOf[nodeA].Name, f.rangeOf[nodeB].Name

	entry := func(node string, gen int64, state jkev1.IPRangeHolderState) jkev1.IPRangeHolder {
		return jkev1.IPRangeHolder{Node: node, Address: "192.168.78.9", Generation: gen, State: state}
	}
	update := func(asAgent bool, name string, change func(*jkev1.IPRange)) error {
		r, err := admin.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		change(r)
		if asAgent {
			_, err = agent.UpdateStatus(ctx, r, metav1.UpdateOptions{})
		} else {
			_, err = admin.UpdateStatus(ctx, r, metav1.UpdateOptions{})
		}
		return err
	}
	setHolders := func(hs ...jkev1.IPRangeHolder) func(*jkev1.IPRange) {
		return func(r *jkev1.IPRange) { r.Status.Holders = hs }
	}
	// The policy takes effect a moment after it is created: wait until node A's claim on
	// node B's behalf is refused (at most 20s; the checks below then say what went through).
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		r, err := admin.Get(ctx, rangeB, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r.Status.Holders = []jkev1.IPRangeHolder{entry(nodeB, 0, jkev1.HolderServing)}
		if _, err := agent.UpdateStatus(ctx, r, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil && strings.Contains(err.Error(), "staticip-agent-range-status") {
			break
		}
	}

	// Allowed: its own entry in its own range with the counts, and in another node's range
	// (draining), then changed and removed again.
	for _, c := range []struct {
		what   string
		name   string
		change func(*jkev1.IPRange)
	}{
		{"claim its own range and write its counts", rangeA, func(r *jkev1.IPRange) {
			r.Status.Holders = []jkev1.IPRangeHolder{entry(nodeA, 0, jkev1.HolderServing)}
			r.Status.Total, r.Status.Free = 254, 254
		}},
		{"claim another node's range as draining", rangeB, setHolders(entry(nodeA, 0, jkev1.HolderDraining))},
		{"change its own entry", rangeB, setHolders(jkev1.IPRangeHolder{Node: nodeA, Address: "192.168.78.10", State: jkev1.HolderDraining})},
		{"remove its own entry", rangeB, setHolders()},
	} {
		if err := update(true, c.name, c.change); err != nil {
			t.Errorf("node %s's agent cannot %s: %v", nodeA, c.what, err)
		}
	}

	// Node B's own claim, written as an administrator (B's agent would write it).
	if err := update(false, rangeB, setHolders(entry(nodeB, 0, jkev1.HolderServing))); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what   string
		name   string
		change func(*jkev1.IPRange)
	}{
		{"add an entry naming another node", rangeA, func(r *jkev1.IPRange) {
			r.Status.Holders = append(r.Status.Holders, entry(nodeB, 0, jkev1.HolderDraining))
		}},
		{"remove another node's entry", rangeB, setHolders()},
		{"replace another node's entry by its own", rangeB, setHolders(entry(nodeA, 0, jkev1.HolderServing))},
		{"change another node's entry", rangeB, setHolders(jkev1.IPRangeHolder{Node: nodeB, Address: "192.168.78.66", State: jkev1.HolderServing})},
		{"claim a generation above the range's ownerGeneration", rangeB, func(r *jkev1.IPRange) {
			r.Status.Holders = append(r.Status.Holders, entry(nodeA, 1, jkev1.HolderDraining))
		}},
		{"write the counts of another node's range", rangeB, func(r *jkev1.IPRange) { r.Status.Free = 3 }},
		{"write the conditions of another node's range", rangeB, func(r *jkev1.IPRange) {
			r.Status.Conditions = []metav1.Condition{{Type: ConditionSynced, Status: metav1.ConditionFalse, Reason: "Evil", Message: "m", LastTransitionTime: metav1.Now()}}
		}},
	} {
		err := update(true, c.name, c.change)
		if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "staticip-agent-range-status") {
			t.Errorf("node %s's agent could %s (or was refused by something else): %v", nodeA, c.what, err)
		}
	}
	if r, err := admin.Get(ctx, rangeB, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if len(r.Status.Holders) != 1 || r.Status.Holders[0] != entry(nodeB, 0, jkev1.HolderServing) {
		t.Errorf("node %s's claim on %s is now %+v, want it as node %s wrote it", nodeB, rangeB, r.Status.Holders, nodeB)
	}
	// Nothing but the status, and no object of its own.
	if err := agent.Delete(ctx, rangeB, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}); err == nil {
		t.Errorf("node %s's agent could delete an IPRange", nodeA)
	}
}

// A node's route report — which node failover waits for before moved pods start — is its own
// Lease in jkev1.NamespaceRouteReports and only its own (manifests/cni/admission.yaml,
// staticip-agent-route-report, on the real API server against the agent's pod-bound token): node
// A's agent may create and update the Lease named after node A with holderIdentity A; it can
// never create, update or delete node B's, name another holder in its own, or write a Lease
// elsewhere. RBAC alone (a Role in that namespace) would let it write every node's report.
func TestAgentWritesOnlyItsOwnRouteReport(t *testing.T) {
	f := newCredFixture(t)
	ctx, nodeA, nodeB := f.ctx, f.nodeA, f.nodeB
	admin := f.kube.CoordinationV1().Leases(jkev1.NamespaceRouteReports)
	agent := f.agentKube.CoordinationV1().Leases(jkev1.NamespaceRouteReports)
	lease := func(name, holder, report string) *coordinationv1.Lease {
		l, _ := routeLease(nil, holder, "", report, nil, time.Now())
		l.Name = name
		return l
	}
	t.Cleanup(func() {
		for _, n := range []string{nodeA, nodeB} {
			_ = admin.Delete(context.Background(), n, metav1.DeleteOptions{})
		}
	})
	// The policy takes effect a moment after it is created: wait until node A's write of node
	// B's report is refused (at most 20s; the checks below then say what went through).
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if _, err := agent.Create(ctx, lease(nodeB, nodeB, `{}`), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil &&
			strings.Contains(err.Error(), "staticip-agent-route-report") {
			break
		}
	}

	// Allowed: its own report, created and updated (as the agent writes it).
	// Owned by its Node, as the agent writes it (the garbage collector removes it with the Node).
	uidOf := func(node string) types.UID {
		n, err := f.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n.UID
	}
	a := New(Config{NodeName: nodeA}, f.agentKube, nil, nil)
	if err := a.reportRoutes(ctx, uidOf(nodeA), map[string]string{}, nil); err != nil {
		t.Fatalf("node %s's agent cannot create its own route report: %v", nodeA, err)
	}
	if err := a.reportRoutes(ctx, uidOf(nodeA), map[string]string{"r": "spare/1"}, map[string]bool{"r": true}); err != nil {
		t.Fatalf("node %s's agent cannot update its own route report: %v", nodeA, err)
	}
	if got, err := admin.Get(ctx, nodeA, metav1.GetOptions{}); err != nil || got.Annotations[jkev1.AnnotationRoutesObserved] != `{"r":"spare/1"}` ||
		!ownedByNode(got, nodeA, uidOf(nodeA)) {
		t.Fatalf("node %s's report: %v, %v (want it owned by its Node)", nodeA, got, err)
	}

	// Node B's report, written as an administrator (B's agent would write it).
	if _, err := admin.Create(ctx, lease(nodeB, nodeB, `{}`), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	refused := func(what string, err error) {
		t.Helper()
		if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "staticip-agent-route-report") {
			t.Errorf("node %s's agent could %s (or was refused by something else): %v", nodeA, what, err)
		}
	}
	b, err := admin.Get(ctx, nodeB, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	forged := b.DeepCopy()
	forged.Annotations[jkev1.AnnotationRoutesObserved] = `{"r":"spare/1"}`
	_, err = agent.Update(ctx, forged, metav1.UpdateOptions{})
	refused("update node "+nodeB+"'s report", err)
	_, err = agent.Create(ctx, lease(nodeB+"-x", nodeB+"-x", `{}`), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	refused("create another node's report", err)
	// Deletes: RBAC grants none (and the policy refuses them too, should a role grant one).
	if err := agent.Delete(ctx, nodeB, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}); !apierrors.IsForbidden(err) {
		t.Errorf("node %s's agent could delete node %s's report: %v", nodeA, nodeB, err)
	}
	own, err := admin.Get(ctx, nodeA, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ownedByB := own.DeepCopy()
	ownedByB.OwnerReferences = []metav1.OwnerReference{nodeOwner(nodeB, uidOf(nodeB))}
	_, err = agent.Update(ctx, ownedByB, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
	refused("make node "+nodeB+" the owner of its own report (its deletion would remove it)", err)
	own.Spec.HolderIdentity = &nodeB
	_, err = agent.Update(ctx, own, metav1.UpdateOptions{})
	refused("name node "+nodeB+" the holder of its own report", err)
	if err := agent.Delete(ctx, nodeA, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}); !apierrors.IsForbidden(err) {
		t.Errorf("node %s's agent could delete its own report: %v", nodeA, err)
	}
	if got, err := admin.Get(ctx, nodeB, metav1.GetOptions{}); err != nil || got.Annotations[jkev1.AnnotationRoutesObserved] != `{}` {
		t.Errorf("node %s's report is now %v (%v), want it as node %s wrote it", nodeB, got.Annotations, err, nodeB)
	}
	// No Lease outside the reports' namespace (RBAC: the Role is there only).
	if _, err := f.agentKube.CoordinationV1().Leases("kube-system").Create(ctx, lease(nodeA, nodeA, `{}`), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err == nil {
		t.Errorf("node %s's agent could create a Lease in kube-system", nodeA)
	}
}
