package podfitsresources

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/noderesources"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/scheduler-plugins/apis/config"
	"github.com/staticip/staticip/scheduler-plugins/pkg/staticipnode"
)

// filterCluster is tools/scalebench's scheduler scenario in memory: nodes with 64 CPUs and 110
// pod slots, each with a /24 IPRange, podsPerNode pods bound (a third of them static-IP, their
// records present) and held absent records of 1 CPU each.
func filterCluster(b *testing.B, nodes, podsPerNode, held int) (*PodFitsResources, []fwk.NodeInfo) {
	c := staticipnode.NewEmpty()
	c.MarkSynced()
	infos := make([]fwk.NodeInfo, nodes)
	for i := range nodes {
		name := fmt.Sprintf("node-%04d", i)
		c.OnIPRangeUpdate(nil, &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 1},
			Spec: jkev1.IPRangeSpec{CIDR: fmt.Sprintf("10.%d.%d.0/24", 64+i/256, i%256), Node: name}})
		var pods []*v1.Pod
		for j := range podsPerNode {
			p := mkPod("sched", fmt.Sprintf("p-%s-%d", name, j), name, rl("cpu", "100m", "memory", "128Mi"))
			if j < podsPerNode/3 {
				c.OnStaticIPUpdate(nil, &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Namespace: "sched", Name: p.Name, Generation: 1},
					Spec: jkev1.StaticIPSpec{Node: name, IP: fmt.Sprintf("10.%d.%d.%d", 64+i/256, i%256, 1+j), Resources: rl("cpu", "100m", "memory", "128Mi")}})
			}
			pods = append(pods, p)
		}
		for k := range held {
			c.OnStaticIPUpdate(nil, &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Namespace: "held", Name: fmt.Sprintf("held-%s-%d", name, k), Generation: 1},
				Spec: jkev1.StaticIPSpec{Node: name, IP: fmt.Sprintf("10.%d.%d.%d", 64+i/256, i%256, 200+k), Resources: rl("cpu", "1")}})
		}
		ni := framework.NewNodeInfo(pods...)
		alloc := rl("cpu", "64", "memory", "256Gi", "pods", "110")
		ni.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: v1.NodeStatus{Allocatable: alloc, Capacity: alloc}})
		infos[i] = ni
	}
	pl := NewWithCache(c, config.PodFitsResourcesWithStaticIPArgs{CheckIPs: true, NodesWithoutIPRange: config.NodesWithoutIPRangeAllow})
	return pl, infos
}

// BenchmarkFilter1000Nodes is one scheduling cycle's PreFilter and Filter of an ordinary pod
// over 1,000 nodes (30 pods, 5 reservations each), Filter on parallel goroutines as the
// scheduler runs it. One op is one pod over all nodes. "upstream NodeResourcesFit" runs the
// stock plugin every profile also runs (kube-scheduler's own resource Filter) over the same
// nodes, the plain path's cost to compare with.
//
//	go test -run '^$' -bench Filter1000Nodes -cpuprofile /tmp/filter.prof ./scheduler-plugins/pkg/podfitsresources/
func BenchmarkFilter1000Nodes(b *testing.B) {
	fitArgs := &schedconfig.NodeResourcesFitArgs{ScoringStrategy: &schedconfig.ScoringStrategy{Type: schedconfig.LeastAllocated,
		Resources: []schedconfig.ResourceSpec{{Name: "cpu", Weight: 1}, {Name: "memory", Weight: 1}}}}
	fitPlugin, err := noderesources.NewFit(context.Background(), fitArgs, nil, feature.Features{})
	if err != nil {
		b.Fatal(err)
	}
	fit := fitPlugin.(*noderesources.Fit)
	ours := func(pl *PodFitsResources) (fwk.PreFilterPlugin, fwk.FilterPlugin) { return pl, pl }
	upstream := func(*PodFitsResources) (fwk.PreFilterPlugin, fwk.FilterPlugin) { return fit, fit }
	for _, tc := range []struct {
		name string
		// bump: between pods, one node's pods change (the pod just bound there), as in a run.
		bump    bool
		plugins func(*PodFitsResources) (fwk.PreFilterPlugin, fwk.FilterPlugin)
	}{
		{"steady", false, ours},
		{"a node changes per pod", true, ours},
		{"upstream NodeResourcesFit, a node changes per pod", true, upstream},
	} {
		b.Run(tc.name, func(b *testing.B) {
			pl, infos := filterCluster(b, 1000, 30, 5)
			pre, filter := tc.plugins(pl)
			ctx := context.Background()
			b.ResetTimer()
			for n := range b.N {
				pod := mkPod("sched", fmt.Sprintf("new-%d", n), "", rl("cpu", "100m", "memory", "128Mi"))
				pod.UID = types.UID(pod.Name)
				state := framework.NewCycleState()
				if _, st := pre.PreFilter(ctx, state, pod, infos); st != nil {
					b.Fatal(st)
				}
				if tc.bump {
					ni := infos[n%len(infos)].(*framework.NodeInfo)
					ni.AddPod(mkPod("sched", fmt.Sprintf("bound-%d", n), ni.Node().Name, rl("cpu", "10m")))
				}
				var next atomic.Int64
				done := make(chan struct{})
				const workers = 16 // the scheduler's default parallelism
				for range workers {
					go func() {
						for {
							i := next.Add(1) - 1
							if i >= int64(len(infos)) {
								done <- struct{}{}
								return
							}
							if st := filter.Filter(ctx, state, pod, infos[i]); st != nil {
								b.Error(st)
							}
						}
					}()
				}
				for range workers {
					<-done
				}
			}
		})
	}
}
