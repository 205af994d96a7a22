package integration

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/internal/testenv"
)

var benchPoolRounds = flag.Int("sched-bench-pool-rounds", 3, "rounds of BenchmarkSchedulingPools (each round runs both modes, the order alternating)")

// benchPoolCount is the number of namespace pools in BenchmarkSchedulingPools' pools=4 mode.
const benchPoolCount = 4

// BenchmarkSchedulingPools (issue 39, "Measure"): the staticip-scheduler (replace-default
// profile) placing the same pods, spread over four namespaces, in two modes of one run:
//   - pools=1: the cluster's one pool — every node's own IPRange, no IPPool with a
//     namespaceSelector (what a cluster without the feature has: poolfit costs one atomic load);
//   - pools=4: four IPPools, each selecting one of the namespaces by label, and every node
//     holding a /26 block of each (IPRanges labelled with the pool, as the range allocator cuts
//     them): every pod's node must have a free address of its namespace's pool (poolfit's
//     snapshot, Verdict and Free on every node Filter looks at).
//
// No static-IP pods (a pool decides where a pod's dynamic address comes from; a static IP keeps
// its own). The pools and their blocks exist only during the pools=4 passes. Rounds alternate
// the order (pools=1 first in odd rounds; -sched-bench-warmup adds a discarded round 0); the summary prints per-round ratios pools=4 / pools=1
// and their median and spread. Goal: pods/s ≥ 0.95×.
//
//	go test ./scheduler-plugins/test/integration -run '^$' -bench SchedulingPools -benchtime 1x \
//	    -args -sched-bench-nodes 300 -sched-bench-pods 1000 -sched-bench-pool-rounds 3 -sched-bench-warmup
func BenchmarkSchedulingPools(b *testing.B) {
	env := testenv.Get(b)
	w := setUpNodes(b, env, *benchNodes, *benchPods)
	b.Cleanup(w.tearDownNodes)
	schedulerConfig := unlimited(env.Config)
	profiles := LoadProfiles(b, replaceDefault)
	rates := map[int]map[int]float64{} // round -> pools -> pods/s
	cpu := map[int]map[int]float64{}   // round -> pools -> cpu-ms/pod
	first := 1
	if *benchWarmup {
		first = 0 // round 0: both modes once, discarded (the process's first lists, heap growth)
	}
	for round := first; round <= *benchPoolRounds; round++ {
		order := []int{1, benchPoolCount}
		if round%2 == 0 {
			order = []int{benchPoolCount, 1}
		}
		rates[round], cpu[round] = map[int]float64{}, map[int]float64{}
		for _, pools := range order {
			b.Run(fmt.Sprintf("round=%d/pools=%d", round, pools), func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					var teardown func()
					if pools > 1 {
						teardown = w.createPools(b, pools)
					}
					w.createPoolPods(b, pools)
					b.StartTimer()
					m := startMeasuring(b, *benchPods)
					stopProfile := startPassProfile(b, fmt.Sprintf("round=%d-pools=%d", round, pools))
					sched := StartScheduler(b, schedulerConfig, profiles)
					w.waitAllBoundIn(b, w.poolNamespaces())
					m.stop(b)
					stopProfile()
					b.StopTimer()
					sched.Stop()
					m.report(b)
					rates[round][pools] = float64(m.pods) / m.elapsed.Seconds()
					cpu[round][pools] = m.cpuPerPod * 1000
					w.deletePoolPods(b)
					if teardown != nil {
						teardown()
					}
				}
			})
		}
	}
	var podsRatio, cpuRatio []float64
	for round := 1; round <= *benchPoolRounds; round++ {
		one, four := rates[round][1], rates[round][benchPoolCount]
		if one == 0 || four == 0 {
			continue
		}
		pr, cr := four/one, cpu[round][benchPoolCount]/cpu[round][1]
		podsRatio, cpuRatio = append(podsRatio, pr), append(cpuRatio, cr)
		fmt.Printf("pools round %d: pools=1 %.1f pods/s %.2f cpu-ms/pod, pools=%d %.1f pods/s %.2f cpu-ms/pod; ratio pods/s %.2f, cpu/pod %.2f\n",
			round, one, cpu[round][1], benchPoolCount, four, cpu[round][benchPoolCount], pr, cr)
	}
	if len(podsRatio) > 0 {
		fmt.Printf("POOLS SUMMARY %d rounds: pools=%d / pools=1 pods/s median %.2f (%.2f–%.2f), cpu/pod median %.2f (%.2f–%.2f)\n",
			len(podsRatio), benchPoolCount, median(podsRatio), slices.Min(podsRatio), slices.Max(podsRatio), median(cpuRatio), slices.Min(cpuRatio), slices.Max(cpuRatio))
	}
}

// poolNamespace is the i-th namespace of the pods of BenchmarkSchedulingPools' current pass.
func (w *workload) poolNamespace(i int) string { return fmt.Sprintf("%s-t%d", w.ns, i) }

func (w *workload) poolNamespaces() []string {
	out := make([]string, benchPoolCount)
	for i := range out {
		out[i] = w.poolNamespace(i)
	}
	return out
}

// createPools creates n IPPools, pool k selecting the namespaces labelled
// sched-bench-tenant=t<k>, and on every node one /26 block of each (10.(200+k).x.y/26, up to
// 1,024 nodes). The pools' status says blocks are left, as the range allocator would. It
// returns the teardown.
func (w *workload) createPools(b *testing.B, n int) func() {
	b.Helper()
	if w.nodes > 1024 {
		b.Fatalf("BenchmarkSchedulingPools cuts one /26 per node from a /16: at most 1024 nodes, not %d", w.nodes)
	}
	ctx := context.Background()
	bits := int32(26)
	for k := 0; k < n; k++ {
		name := fmt.Sprintf("sched-bench-pool-%d", k)
		p, err := w.sip.JkeV1().IPPools().Create(ctx, &jkev1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"sched-bench": "true"}},
			Spec: jkev1.IPPoolSpec{CIDRs: []string{fmt.Sprintf("10.%d.0.0/16", 200+k)}, BlockSize: &bits,
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"sched-bench-tenant": fmt.Sprintf("t%d", k)}}}}, metav1.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		p.Status = jkev1.IPPoolStatus{BlocksTotal: 1024, BlocksAssigned: int64(w.nodes), BlocksFree: int64(1024 - w.nodes)}
		if _, err := w.sip.JkeV1().IPPools().UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
		err = parallel(w.nodes, 16, func(i int) error {
			_, err := w.sip.JkeV1().IPRanges().Create(ctx, &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-n%d", name, i),
				Labels: map[string]string{"sched-bench": "true", "sched-bench-pool": "true", jkev1.LabelIPPool: name, jkev1.LabelIPPoolRestricted: "true"}},
				Spec: jkev1.IPRangeSpec{CIDR: fmt.Sprintf("10.%d.%d.%d/26", 200+k, i/4, (i%4)*64), Node: fmt.Sprintf("sched-bench-n%d", i)}}, metav1.CreateOptions{})
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	return func() {
		_ = w.sip.JkeV1().IPRanges().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "sched-bench-pool=true"})
		_ = w.sip.JkeV1().IPPools().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "sched-bench=true"})
	}
}

// createPoolPods creates the pass's pods round-robin over four new namespaces, labelled for
// their pool when pools > 1.
func (w *workload) createPoolPods(b *testing.B, pools int) {
	b.Helper()
	ctx := context.Background()
	w.ns = fmt.Sprintf("sched-bench-%d", time.Now().UnixNano())
	for i := 0; i < benchPoolCount; i++ {
		ns := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.poolNamespace(i)}}
		if pools > 1 {
			ns.Labels = map[string]string{"sched-bench-tenant": fmt.Sprintf("t%d", i%pools)}
		}
		if _, err := w.kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	req := v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("128Mi")}
	err := parallel(w.pods, 16, func(i int) error {
		ns := w.poolNamespace(i % benchPoolCount)
		_, err := w.kube.CoreV1().Pods(ns).Create(ctx, &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("p-%d", i)},
			Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10", Resources: v1.ResourceRequirements{Requests: req}}}}}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
}

func (w *workload) waitAllBoundIn(b *testing.B, namespaces []string) {
	b.Helper()
	for _, ns := range namespaces {
		waitNoneUnbound(b, w.kube, ns, 500*time.Millisecond)
	}
}

func (w *workload) deletePoolPods(b *testing.B) {
	b.Helper()
	for _, ns := range w.poolNamespaces() {
		w.deleteNamespace(b, ns)
	}
}

// startPassProfile writes a CPU profile of one pass to $SCHED_BENCH_CPUPROFILE_DIR/<name>.pprof
// when that variable is set (go tool pprof -top -diff_base=...pools=1.pprof ...pools=4.pprof
// attributes pools=4's extra CPU); it returns the function that stops it.
func startPassProfile(b *testing.B, name string) func() {
	b.Helper()
	dir := os.Getenv("SCHED_BENCH_CPUPROFILE_DIR")
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, name+".pprof"))
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
