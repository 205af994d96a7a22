package staticip

import (
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1listers "github.com/staticip/staticip/apis/generated/listers/jke/v1"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/internal/testenv"
)

// TestEnsureClaimsThroughAStaleCache: the claim is an update of the record as the workload
// controller's cache shows it; when someone else wrote the record since (node failover
// re-pointing it, the StaticIP controller's status), the update conflicts. Ensure decides
// again on the record as the API server has it now — the re-pointed node is kept, a record
// released meanwhile is still refused — instead of failing the whole sync of the set: at
// 1,000 kwok nodes every sync of the failed-over set hit such a conflict while failover
// re-pointed 110 records, and the set's growing retry backoff delayed its pods by seconds.
func TestEnsureClaimsThroughAStaleCache(t *testing.T) {
	env := testenv.Get(t)
	ctx := testenv.Context(t, time.Minute)
	kube := kubernetes.NewForConfigOrDie(env.Config)
	client := versioned.NewForConfigOrDie(env.Config)
	ns := "ensure-" + rand.String(6)
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	set := &jkev1alpha1.EnhancedStatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns, UID: "set-uid"}}
	w := EnhancedStatefulSetWorkload(set)

	for _, tc := range []struct {
		name      string
		meantime  func(*jkev1.StaticIP) // someone else's write after the cache saw the record
		releasing bool                  // Ensure must refuse the record
	}{
		{name: "re-pointed by node failover", meantime: func(s *jkev1.StaticIP) {
			s.Spec.Node = "spare"
			if _, err := client.JkeV1().StaticIPs(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "released by the StaticIP controller", releasing: true, meantime: func(s *jkev1.StaticIP) {
			s.Status.Phase = jkev1.StaticIPReleased
			if _, err := client.JkeV1().StaticIPs(ns).UpdateStatus(ctx, s, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "web-" + rand.String(4)
			rec := NewStaticIP(w, name)
			rec.OwnerReferences = nil // the set object is not in the API server
			rec.Spec.Node, rec.Spec.IP = "failed", "10.200.0.9"
			created, err := client.JkeV1().StaticIPs(ns).Create(ctx, rec, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
			if err := indexer.Add(created); err != nil { // the cache keeps this version
				t.Fatal(err)
			}
			tc.meantime(created.DeepCopy())

			claimed, err := Ensure(ctx, client, jkev1listers.NewStaticIPLister(indexer), Workload{Object: set, GVK: w.GVK, Retention: w.Retention}, name, time.Now())
			var releasing *ReleasingError
			switch {
			case tc.releasing && !errors.As(err, &releasing):
				t.Fatalf("Ensure on a record released meanwhile: %v, want a ReleasingError", err)
			case tc.releasing:
				return
			case err != nil:
				t.Fatalf("Ensure through a stale cache: %v, want the record claimed as it is now", err)
			}
			if claimed.Spec.Node != "spare" || claimed.Annotations[AnnotationClaimed] == "" {
				t.Errorf("claimed record: node %q, claimed at %q; want node spare (the meantime's write kept) and the claim annotation", claimed.Spec.Node, claimed.Annotations[AnnotationClaimed])
			}
		})
	}
}
