package agent

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/apis/poolchoice"
	"github.com/staticip/staticip/apis/poolchoice/poolchoiceapi"
)

// namespacePools is, per namespace, the pools its pods take addresses of when they name none
// themselves — its staticip.jke.jdcloud.com/ippools annotation, else the pools whose
// namespaceSelector selects it (apis/poolchoice, the rule admission, the allocator and the
// scheduler apply too) — for the store (ipam SetNamespacePools), which the plugin reads in the
// allocation's own transaction: no API call on ADD. Namespaces without such pools are left out;
// so is a namespace whose annotation names a pool it may not use (admission refuses its pods).
// A cluster without namespace pools and namespace annotations costs one pass over the namespaces.
func namespacePools(pools []*jkev1.IPPool, namespaces []*corev1.Namespace) map[string][]string {
	byName := make(map[string]poolchoice.Pool, len(pools))
	for _, p := range pools {
		if cp, err := poolchoiceapi.FromIPPool(p); err == nil {
			byName[p.Name] = cp
		}
	}
	nsPools := poolchoice.NamespacePools(byName)
	out := map[string][]string{}
	for _, n := range namespaces {
		if len(nsPools) == 0 && n.Annotations[jkev1.AnnotationIPPools] == "" {
			continue
		}
		ch, err := poolchoice.Choose(nil, poolchoice.Namespace{Name: n.Name, Labels: n.Labels, Annotations: n.Annotations}, byName, nsPools)
		if err == nil && len(ch.Pools) > 0 {
			out[n.Name] = ch.Pools
		}
	}
	return out
}

// trimNamespace keeps of a namespace what the pool choice reads: its name, labels and
// staticip.jke.jdcloud.com/ippools annotation.
func trimNamespace(obj any) (any, error) {
	n, ok := obj.(*corev1.Namespace)
	if !ok {
		return obj, nil // a DeletedFinalStateUnknown tombstone
	}
	t := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion, Labels: n.Labels}}
	if v, ok := n.Annotations[jkev1.AnnotationIPPools]; ok {
		t.Annotations = map[string]string{jkev1.AnnotationIPPools: v}
	}
	return t, nil
}
