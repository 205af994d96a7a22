package integration

import (
	"context"
	"flag"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/internal/testenv"
)

var (
	stressNodes   = flag.Int("sched-stress-nodes", 100, "nodes in BenchmarkStressedBacklog")
	stressBacklog = flag.Int("sched-stress-backlog", 500, "backlog pods in BenchmarkStressedBacklog")
)

// Per node in BenchmarkStressedBacklog: 10 cores; 9 bound filler pods take 8.5 of them (85%
// full); 5 StaticIPs of absent pods reserve 280m each (1.4 cores), leaving 100m; backlog
// pods ask 150m, so none fits until the reservations are released (then 10 per node do).
// Every 5th node owns a /28 (14 usable IPs: 9 used + 5 reserved = exhausted), the others a
// /24.
const (
	stressFillers      = 9
	stressFillerCPU    = "944m"
	stressReservations = 5
	stressReservedCPU  = "280m"
	stressBacklogCPU   = "150m"
)

// BenchmarkStressedBacklog: what the plugins do under load. Nodes 85% full, 5 reservations
// per node, 20% of the nodes' IP ranges exhausted, a backlog of pods that cannot fit until
// the reservations are released, and one IPRange or StaticIP status write per node per second
// throughout. With the plugins on: the scheduler starts, the backlog is rejected, every
// StaticIP is deleted, and "drain-s" is the time from the last deletion's return to the last
// backlog pod bound (target: ≤ 2 s). With the plugins off the reservations mean nothing and
// the backlog schedules at once: its pods/s, CPU per pod and Filter p99 are the baseline.
//
//	go test ./scheduler-plugins/test/integration -run '^$' -bench StressedBacklog -benchtime 1x \
//	    [-sched-stress-nodes 100 -sched-stress-backlog 500] [-sched-bench-order on,off]
func BenchmarkStressedBacklog(b *testing.B) {
	env := testenv.Get(b)
	s := setUpStressed(b, env, *stressNodes)
	b.Cleanup(s.tearDown)
	schedulerConfig := unlimited(env.Config)
	for _, mode := range benchModes(b, roundOrder(1)) {
		b.Run(mode.name, func(b *testing.B) {
			profiles := LoadProfiles(b, mode.config)
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				s.createReservations(b)
				s.createBacklog(b, *stressBacklog)
				stopChurn := s.churn()
				b.StartTimer()
				m := startMeasuring(b, *stressBacklog)
				sched := StartScheduler(b, schedulerConfig, profiles)
				if mode.name == "plugins=on" {
					s.waitRejected(b, *stressBacklog)
					released := s.releaseReservations(b)
					last := s.waitBacklogBound(b)
					b.ReportMetric(last.Sub(released).Seconds(), "drain-s")
				} else {
					s.waitBacklogBound(b)
				}
				m.stop(b)
				b.StopTimer()
				stopChurn()
				sched.Stop()
				m.report(b)
				s.deleteBacklog(b)
			}
		})
	}
}

type stressed struct {
	kube    kubernetes.Interface
	sip     versioned.Interface
	nodes   int
	ns      string
	backlog string // namespace of the backlog pods
	writes  atomic.Int64
}

func stressNode(i int) string { return fmt.Sprintf("sched-stress-n%d", i) }

func setUpStressed(b *testing.B, env *testenv.Env, nodes int) *stressed {
	b.Helper()
	ctx := context.Background()
	s := &stressed{kube: kubernetes.NewForConfigOrDie(unlimited(env.Config)), sip: versioned.NewForConfigOrDie(unlimited(env.Config)),
		nodes: nodes, ns: fmt.Sprintf("sched-stress-%d", time.Now().UnixNano())}
	if _, err := s.kube.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	alloc := v1.ResourceList{v1.ResourceCPU: resource.MustParse("10"), v1.ResourceMemory: resource.MustParse("64Gi"), v1.ResourcePods: resource.MustParse("110")}
	err := parallel(nodes, 16, func(i int) error {
		n, err := s.kube.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: stressNode(i), Labels: map[string]string{"sched-stress": "true"}},
			Status: v1.NodeStatus{Capacity: alloc, Allocatable: alloc}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		n.Spec.Taints = nil
		if _, err := s.kube.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			return err
		}
		cidr := fmt.Sprintf("10.%d.%d.0/24", 150+i/256, i%256)
		if i%5 == 0 {
			cidr = fmt.Sprintf("10.%d.%d.0/28", 150+i/256, i%256)
		}
		if _, err := s.sip.JkeV1().IPRanges().Create(ctx, &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: stressNode(i), Labels: map[string]string{"sched-stress": "true"}},
			Spec: jkev1.IPRangeSpec{CIDR: cidr, Node: stressNode(i)}}, metav1.CreateOptions{}); err != nil {
			return err
		}
		for f := 0; f < stressFillers; f++ { // bound directly: no scheduler needed
			req := v1.ResourceList{v1.ResourceCPU: resource.MustParse(stressFillerCPU)}
			if _, err := s.kube.CoreV1().Pods(s.ns).Create(ctx, &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: fmt.Sprintf("fill-%d-%d", i, f)},
				Spec: v1.PodSpec{NodeName: stressNode(i), Containers: []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10",
					Resources: v1.ResourceRequirements{Requests: req}}}}}, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func (s *stressed) createReservations(b *testing.B) {
	b.Helper()
	ctx := context.Background()
	err := parallel(s.nodes*stressReservations, 16, func(i int) error {
		node := i / stressReservations
		_, err := s.sip.JkeV1().StaticIPs(s.ns).Create(ctx, &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: fmt.Sprintf("held-%d", i)},
			Spec: jkev1.StaticIPSpec{Node: stressNode(node), Pod: fmt.Sprintf("held-%d", i),
				Resources: v1.ResourceList{v1.ResourceCPU: resource.MustParse(stressReservedCPU)}}}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
}

func (s *stressed) createBacklog(b *testing.B, n int) {
	b.Helper()
	ctx := context.Background()
	s.backlog = fmt.Sprintf("sched-stress-backlog-%d", time.Now().UnixNano())
	if _, err := s.kube.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.backlog}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	err := parallel(n, 16, func(i int) error {
		req := v1.ResourceList{v1.ResourceCPU: resource.MustParse(stressBacklogCPU)}
		_, err := s.kube.CoreV1().Pods(s.backlog).Create(ctx, &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: s.backlog, Name: fmt.Sprintf("b-%d", i)},
			Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10",
				Resources: v1.ResourceRequirements{Requests: req}}}}}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
}

// churn writes one status per node per second (IPRange counters and StaticIP conditions,
// alternating), as agents and controllers do, until stopped.
func (s *stressed) churn() func() {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for round := 0; ; round++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			_ = parallel(s.nodes, 8, func(i int) error {
				if round%2 == 0 {
					r, err := s.sip.JkeV1().IPRanges().Get(ctx, stressNode(i), metav1.GetOptions{})
					if err != nil {
						return err
					}
					r.Status.Used = int32(round % 100)
					_, err = s.sip.JkeV1().IPRanges().UpdateStatus(ctx, r, metav1.UpdateOptions{})
					s.writes.Add(1)
					return err
				}
				sip, err := s.sip.JkeV1().StaticIPs(s.ns).Get(ctx, fmt.Sprintf("held-%d", i*stressReservations), metav1.GetOptions{})
				if err != nil {
					return nil // released already
				}
				sip.Status.ObservedGeneration = int64(round)
				_, err = s.sip.JkeV1().StaticIPs(s.ns).UpdateStatus(ctx, sip, metav1.UpdateOptions{})
				s.writes.Add(1)
				return err
			})
		}
	}()
	return func() { cancel(); wg.Wait() }
}

// waitRejected waits until every backlog pod has been tried and found unschedulable.
func (s *stressed) waitRejected(b *testing.B, n int) {
	b.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 30*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := s.kube.CoreV1().Pods(s.backlog).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, nil
		}
		rejected := 0
		for _, p := range list.Items {
			if p.Spec.NodeName != "" {
				return false, fmt.Errorf("backlog pod %s bound to %s while the reservations hold", p.Name, p.Spec.NodeName)
			}
			for _, c := range p.Status.Conditions {
				if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse {
					rejected++
				}
			}
		}
		return rejected == n, nil
	})
	if err != nil {
		b.Fatalf("backlog not rejected: %v", err)
	}
}

// releaseReservations deletes every StaticIP and returns when the last deletion returned.
func (s *stressed) releaseReservations(b *testing.B) time.Time {
	b.Helper()
	ctx := context.Background()
	err := parallel(s.nodes*stressReservations, 32, func(i int) error {
		return s.sip.JkeV1().StaticIPs(s.ns).Delete(ctx, fmt.Sprintf("held-%d", i), metav1.DeleteOptions{})
	})
	if err != nil {
		b.Fatal(err)
	}
	return time.Now()
}

// waitBacklogBound returns when it saw no backlog pod unbound.
func (s *stressed) waitBacklogBound(b *testing.B) time.Time {
	b.Helper()
	waitNoneUnbound(b, s.kube, s.backlog, 100*time.Millisecond)
	return time.Now()
}

func (s *stressed) deleteBacklog(b *testing.B) {
	b.Helper()
	ctx := context.Background()
	_ = s.kube.CoreV1().Pods(s.backlog).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{})
	_ = s.sip.JkeV1().StaticIPs(s.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	err := wait.PollUntilContextTimeout(ctx, time.Second, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := s.kube.CoreV1().Pods(s.backlog).List(ctx, metav1.ListOptions{Limit: 1})
		sips, err2 := s.sip.JkeV1().StaticIPs(s.ns).List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil && err2 == nil && len(list.Items) == 0 && len(sips.Items) == 0, nil
	})
	if err != nil {
		b.Fatalf("backlog of %s not deleted: %v", s.backlog, err)
	}
}

func (s *stressed) tearDown() {
	ctx := context.Background()
	_ = s.kube.CoreV1().Pods(s.ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{})
	_ = s.sip.JkeV1().IPRanges().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "sched-stress=true"})
	_ = s.kube.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "sched-stress=true"})
}
