package kubectlplugin

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/apis/workloadref"
)

// WorkloadSet holds the workloads that exist, by namespace and workloadref.Ref, of the kinds
// the StaticIP controller records (EnhancedStatefulSet, StatefulSet). Audit reports a
// StaticIP as orphaned only when its workload is of one of those kinds and absent.
type WorkloadSet map[workloadKey]bool

type workloadKey struct {
	Namespace string
	Ref       workloadref.Ref
}

// trackedKinds are the workloads check lists; a record naming any other kind (e.g.
// OpenKruise's StatefulSet) is never called orphaned: check cannot tell whether it exists.
var trackedKinds = map[workloadref.Ref]bool{
	{Group: workloadref.JKEGroup, Kind: "EnhancedStatefulSet"}: true,
	{Group: workloadref.AppsGroup, Kind: "StatefulSet"}:        true,
}

func recordWorkload(sip *jkev1.StaticIP) workloadKey {
	return workloadKey{Namespace: sip.Namespace, Ref: workloadref.FromRecord(sip.Spec.APIGroup, sip.Spec.Kind, sip.Spec.Ref)}
}

// Has says whether the workload a record names exists; known is false for a record that
// names no workload or one of a kind check does not list.
func (w WorkloadSet) Has(sip *jkev1.StaticIP) (exists, known bool) {
	k := recordWorkload(sip)
	if k.Ref.Name == "" || !trackedKinds[workloadref.Ref{Group: k.Ref.Group, Kind: k.Ref.Kind}] {
		return false, false
	}
	return w[k], true
}

// loadWorkloads lists the EnhancedStatefulSets and StatefulSets of all namespaces.
func loadWorkloads(ctx context.Context, c *Clients) (WorkloadSet, error) {
	w := WorkloadSet{}
	sets, err := c.StaticIP.JkeV1alpha1().EnhancedStatefulSets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing EnhancedStatefulSets: %w", err)
	}
	for _, s := range sets.Items {
		w[workloadKey{s.Namespace, workloadref.Ref{Group: workloadref.JKEGroup, Kind: "EnhancedStatefulSet", Name: s.Name}}] = true
	}
	stss, err := c.Kube.AppsV1().StatefulSets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing StatefulSets: %w", err)
	}
	for _, s := range stss.Items {
		w[workloadKey{s.Namespace, workloadref.Ref{Group: workloadref.AppsGroup, Kind: "StatefulSet", Name: s.Name}}] = true
	}
	return w, nil
}

// orphaned says why sip's address is leaked ("" when it is not): it has an IP that no live
// pod holds, no pod of its pod's name exists at all (a Pending pod of the name will take the
// address), its workload is of a kind check lists and is gone, and it is not being deleted.
// holders are the live pods holding one of sip's addresses.
func orphaned(s *Snapshot, sip *jkev1.StaticIP, holders []*corev1.Pod) string {
	if sip.Spec.IP == "" || len(holders) > 0 || sip.DeletionTimestamp != nil {
		return ""
	}
	podName := recordPodName(sip)
	for i := range s.Pods {
		if p := &s.Pods[i]; p.Namespace == sip.Namespace && p.Name == podName {
			return ""
		}
	}
	exists, known := s.Workloads.Has(sip)
	if !known || exists {
		return ""
	}
	return fmt.Sprintf("pod %s of %s, neither of which exists", nsName(sip.Namespace, podName), recordWorkload(sip).Ref)
}
