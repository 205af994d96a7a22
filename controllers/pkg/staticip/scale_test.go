package staticip

import (
	"context"
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	sipfake "github.com/staticip/staticip/apis/generated/clientset/versioned/fake"
	"github.com/staticip/staticip/apis/generated/informers/externalversions"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

// TestReservedRecordsCostNoWorkloadReads (tools/scalebench, scenario 3): syncing the records
// of absent pods whose ordinals the workload still wants reads no workload from the API
// server (the cache says they are not scaled away: nothing would be deleted), and a
// status-only update of the workload (every pod readiness change during a rollout) requeues
// none of its records. Before, each such sync did a live GET of the StatefulSet, and every
// status write of the workload re-synced all its records: 10,000 Reserved records cost
// 10,000 GETs per StatefulSet status update.
func TestReservedRecordsCostNoWorkloadReads(t *testing.T) {
	const records = 50
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", Generation: 1, ResourceVersion: "1"},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](records)}}
	kube := kubefake.NewClientset(sts)
	var sips []*jkev1.StaticIP
	for i := 0; i < records; i++ {
		sips = append(sips, &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("web-%d", i)},
			Spec: jkev1.StaticIPSpec{Pod: fmt.Sprintf("web-%d", i), APIGroup: "apps", Kind: "StatefulSet", Ref: "web",
				IP: fmt.Sprintf("10.1.0.%d", i+1), Node: "node-a", RetentionPolicy: &jkev1.StaticIPRetentionPolicy{WhenScaled: jkev1.DeleteStaticIP}},
			Status: jkev1.StaticIPStatus{Phase: jkev1.StaticIPReserved}})
	}
	client := sipfake.NewSimpleClientset() //nolint:staticcheck // NewClientset needs the generated type schema, which this fake lacks
	for _, s := range sips {
		if _, err := client.JkeV1().StaticIPs("ns").Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	kf := informers.NewSharedInformerFactory(kube, 0)
	sf := externalversions.NewSharedInformerFactory(client, 0)
	c, err := NewController(kube, client, sf.Jke().V1().StaticIPs(), kf.Core().V1().Pods(),
		sf.Jke().V1alpha1().EnhancedStatefulSets(), kf.Apps().V1().StatefulSets(), sf.Jke().V1().IPRanges(), nil, record.NewFakeRecorder(1000))
	if err != nil {
		t.Fatal(err)
	}
	if err := kf.Apps().V1().StatefulSets().Informer().GetIndexer().Add(sts); err != nil {
		t.Fatal(err)
	}
	for _, s := range sips {
		if err := sf.Jke().V1().StaticIPs().Informer().GetIndexer().Add(s); err != nil {
			t.Fatal(err)
		}
	}
	kube.ClearActions()
	for _, s := range sips {
		if err := c.sync(context.Background(), "ns/"+s.Name); err != nil {
			t.Fatal(err)
		}
	}
	gets := 0
	for _, a := range kube.Actions() {
		if a.GetVerb() == "get" && a.GetResource().Resource == "statefulsets" {
			gets++
		}
	}
	if gets != 0 {
		t.Errorf("%d syncs of Reserved records within the StatefulSet's replicas read it %d times from the API server, want 0", records, gets)
	}

	// A status-only update of the workload (generation unchanged) requeues none of its records.
	for c.queue.Len() > 0 {
		k, _ := c.queue.Get()
		c.queue.Forget(k)
		c.queue.Done(k)
	}
	status := sts.DeepCopy()
	status.ResourceVersion, status.Status.ReadyReplicas = "2", 7
	if err := kf.Apps().V1().StatefulSets().Informer().GetIndexer().Update(status); err != nil {
		t.Fatal(err)
	}
	c.workloadUpdated(sts, status)
	if n := c.queue.Len(); n != 0 {
		t.Errorf("a status-only StatefulSet update queued %d records, want 0", n)
	}
	// A scale-down (generation bumped) does requeue them.
	scaled := status.DeepCopy()
	scaled.ResourceVersion, scaled.Generation, scaled.Spec.Replicas = "3", 2, ptr.To[int32](10)
	c.workloadUpdated(status, scaled)
	if n := c.queue.Len(); n != records {
		t.Errorf("a scale-down queued %d records, want %d", n, records)
	}
}
