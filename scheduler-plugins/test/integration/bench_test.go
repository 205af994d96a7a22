package integration

import (
	"context"
	"flag"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/apis/podip"
	"github.com/staticip/staticip/internal/testenv"
)

var (
	benchNodes  = flag.Int("sched-bench-nodes", 100, "nodes in BenchmarkSchedulingThroughput (issue 5 full size: 5000)")
	benchPods   = flag.Int("sched-bench-pods", 300, "pods in BenchmarkSchedulingThroughput (issue 5 full size: 10000)")
	benchOrder  = flag.String("sched-bench-order", "alternate", "order of the modes in one round: off,on, on,off (plugins first) or alternate (off,on in odd rounds, on,off in even ones, so that each mode runs first in half the rounds)")
	benchRounds = flag.Int("sched-bench-rounds", 1, "rounds of the modes in one process, after the warm-up; the summary pairs round i's modes")
	benchWarmup = flag.Bool("sched-bench-warmup", false, "run one discarded round of every mode first, so that neither measured mode pays the process's warm-up (first lists, heap growth)")
)

// BenchmarkSchedulingThroughput compares, in one run and on the same binary and API server,
// the scheduler with the staticip plugins (the replace-default profile) against the
// default profile, doing equal work: nodes each owning one IPRange, pods of which 30% have a
// StaticIP (and the matching annotation) on a node AND, in both modes, a required node
// affinity on metadata.name for that node — so that with the plugins off those pods are as
// restricted as the plugins make them. Pods are created first; the clock runs from the
// scheduler's start until every pod is bound. Reports pods/s, the test process's CPU per pod
// (the scheduler runs in it; kube-apiserver and etcd do not) and the p99 of the scheduler's
// own Filter extension-point histogram.
//
//	go test ./scheduler-plugins/test/integration -run '^$' -bench SchedulingThroughput -benchtime 1x \
//	    [-sched-bench-nodes 5000 -sched-bench-pods 10000] [-sched-bench-order on,off]
func BenchmarkSchedulingThroughput(b *testing.B) {
	env := testenv.Get(b)
	// The nodes and their IPRanges are the same for both modes: made once, so that neither
	// mode runs on a store the other one churned more.
	w := setUpNodes(b, env, *benchNodes, *benchPods)
	b.Cleanup(w.tearDownNodes)
	schedulerConfig := unlimited(env.Config)
	var results benchResults
	for _, mode := range benchSchedule(b) {
		b.Run(mode.name, func(b *testing.B) {
			profiles := LoadProfiles(b, mode.config)
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				w.createPods(b)
				b.StartTimer()
				m := startMeasuring(b, *benchPods)
				sched := StartScheduler(b, schedulerConfig, profiles)
				w.waitAllBound(b)
				m.stop(b)
				b.StopTimer()
				sched.Stop()
				m.report(b)
				results.add(mode, m)
				w.deletePods(b)
			}
		})
	}
	results.summarize()
}

// unlimited is the scheduler's own client config, not rate-limited (as Kubernetes'
// scheduler_perf): at 100+ pods/s, binds and events would otherwise meet the test client's
// 200 QPS and both modes would measure the limiter instead of the plugins.
func unlimited(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst = 5000, 5000
	return c
}

type benchMode struct {
	name, config string
	// key is "on" or "off"; round is 0 for the warm-up (discarded), then 1..rounds.
	key   string
	round int
}

// benchSchedule is the modes in the order they run: the optional warm-up round, then
// -sched-bench-rounds rounds of -sched-bench-order. Interleaving the modes round by round,
// instead of running one mode's repetitions and then the other's, spreads the load of a
// shared machine over both modes alike.
func benchSchedule(b *testing.B) []benchMode {
	var out []benchMode
	if *benchWarmup {
		for _, m := range benchModes(b, roundOrder(0)) {
			m.name = "warmup-" + m.name
			out = append(out, m)
		}
	}
	for r := 1; r <= *benchRounds; r++ {
		for _, m := range benchModes(b, roundOrder(r)) {
			m.round = r
			out = append(out, m)
		}
	}
	return out
}

// roundOrder is the order of the modes in round r (0: the warm-up). The mode that runs first
// in a round pays more CPU per pod (earlier runs: 0.92x with the plugins second, 1.27x with
// them first), so "alternate" puts each mode first in half the measured rounds.
func roundOrder(r int) string {
	if *benchOrder != "alternate" {
		return *benchOrder
	}
	if r%2 == 0 {
		return "on,off"
	}
	return "off,on"
}

// benchResults collects the measured rounds and prints, per mode, the medians and, per
// round, the on/off ratios (a ratio within one round compares runs made a few seconds apart).
type benchResults struct {
	rounds map[int]map[string]*measurement
}

func (r *benchResults) add(mode benchMode, m *measurement) {
	if mode.round == 0 {
		return
	}
	if r.rounds == nil {
		r.rounds = map[int]map[string]*measurement{}
	}
	if r.rounds[mode.round] == nil {
		r.rounds[mode.round] = map[string]*measurement{}
	}
	r.rounds[mode.round][mode.key] = m
}

// summarize prints to stdout: a parent benchmark's b.Log output is shown only with -test.v.
func (r *benchResults) summarize() {
	var podsRatio, cpuRatio []float64
	perMode := map[string][][2]float64{}
	byOrder := map[string][][2]float64{}
	for round := 1; round <= len(r.rounds); round++ {
		on, off := r.rounds[round]["on"], r.rounds[round]["off"]
		for key, m := range r.rounds[round] {
			perMode[key] = append(perMode[key], [2]float64{float64(m.pods) / m.elapsed.Seconds(), m.cpuPerPod * 1000})
		}
		if on == nil || off == nil {
			continue
		}
		pr := (float64(on.pods) / on.elapsed.Seconds()) / (float64(off.pods) / off.elapsed.Seconds())
		cr := on.cpuPerPod / off.cpuPerPod
		podsRatio, cpuRatio = append(podsRatio, pr), append(cpuRatio, cr)
		order := roundOrder(round)
		byOrder[order] = append(byOrder[order], [2]float64{pr, cr})
		fmt.Printf("round %d (%s): on/off pods/s %.2f, on/off cpu/pod %.2f\n", round, order, pr, cr)
	}
	// Per order, and the geometric mean of the two orders' medians: the position effect
	// cancels there, whatever the number of rounds of each.
	var orders []string
	for o := range byOrder {
		orders = append(orders, o)
	}
	sort.Strings(orders)
	podsGeo, cpuGeo := 1.0, 1.0
	for _, o := range orders {
		var p, c []float64
		for _, x := range byOrder[o] {
			p, c = append(p, x[0]), append(c, x[1])
		}
		fmt.Printf("order %s: %d rounds, median on/off pods/s %.2f, median on/off cpu/pod %.2f\n", o, len(p), median(p), median(c))
		podsGeo *= median(p)
		cpuGeo *= median(c)
	}
	if len(orders) == 2 {
		fmt.Printf("BALANCED geometric mean of the two orders' medians: on/off pods/s %.2f, on/off cpu/pod %.2f\n", math.Sqrt(podsGeo), math.Sqrt(cpuGeo))
	}
	for key, v := range perMode {
		var pods, cpu []float64
		for _, x := range v {
			pods, cpu = append(pods, x[0]), append(cpu, x[1])
		}
		fmt.Printf("plugins=%s: %d rounds, median %.1f pods/s, median %.2f cpu-ms/pod\n", key, len(v), median(pods), median(cpu))
	}
	if len(podsRatio) > 0 {
		fmt.Printf("SUMMARY %d rounds: median of per-round on/off pods/s %.2f, median of per-round on/off cpu/pod %.2f\n", len(podsRatio), median(podsRatio), median(cpuRatio))
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func benchModes(b *testing.B, order string) []benchMode {
	modes := map[string]string{
		"off": "manifests/scheduler/benchmark/default-scheduler-config.yaml",
		"on":  replaceDefault,
	}
	var out []benchMode
	for _, name := range strings.Split(order, ",") {
		config, ok := modes[name]
		if !ok {
			b.Fatalf("-sched-bench-order: unknown mode %q (off,on, on,off or alternate)", name)
		}
		out = append(out, benchMode{name: "plugins=" + name, config: config, key: name})
	}
	return out
}

// pinnedTo is a required node affinity on metadata.name: the same single-node restriction
// CheckPodAnnotationWithStaticIP gives a static-IP pod, expressed so that the default
// profile honours it too.
func pinnedTo(node string) *v1.Affinity {
	return &v1.Affinity{NodeAffinity: &v1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{
		NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchFields: []v1.NodeSelectorRequirement{{
			Key: metav1.ObjectNameField, Operator: v1.NodeSelectorOpIn, Values: []string{node}}}}}}}}
}

type workload struct {
	kube  kubernetes.Interface
	sip   versioned.Interface
	ns    string
	nodes int
	pods  int
}

func parallel(n, workers int, fn func(i int) error) error {
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	next := make(chan int)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(i); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// setUpNodes creates the nodes, each with allocatable room for many pods and one /24 IPRange.
func setUpNodes(b *testing.B, env *testenv.Env, nodes, pods int) *workload {
	b.Helper()
	ctx := context.Background()
	w := &workload{kube: kubernetes.NewForConfigOrDie(env.Config), sip: versioned.NewForConfigOrDie(env.Config), nodes: nodes, pods: pods}
	alloc := v1.ResourceList{v1.ResourceCPU: resource.MustParse("32"), v1.ResourceMemory: resource.MustParse("128Gi"), v1.ResourcePods: resource.MustParse("110")}
	err := parallel(nodes, 16, func(i int) error {
		name := fmt.Sprintf("sched-bench-n%d", i)
		n, err := w.kube.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"sched-bench": "true"}},
			Status: v1.NodeStatus{Capacity: alloc, Allocatable: alloc}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		n.Spec.Taints = nil
		if _, err := w.kube.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			return err
		}
		_, err = w.sip.JkeV1().IPRanges().Create(ctx, &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"sched-bench": "true"}},
			Spec: jkev1.IPRangeSpec{CIDR: fmt.Sprintf("10.%d.%d.0/24", 100+i/256, i%256), Node: name}}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return w
}

// createPods creates the pods, in a new namespace: 30% with a StaticIP on a node and the
// matching annotation.
func (w *workload) createPods(b *testing.B) {
	b.Helper()
	ctx := context.Background()
	w.ns = fmt.Sprintf("sched-bench-%d", time.Now().UnixNano())
	if _, err := w.kube.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	nodes := w.nodes
	err := parallel(w.pods, 16, func(i int) error {
		name := fmt.Sprintf("p-%d", i)
		req := v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("128Mi")}
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name},
			Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10", Resources: v1.ResourceRequirements{Requests: req}}}}}
		if i%10 < 3 { // 30% static-IP pods, pinned to a node by their StaticIP and, in both modes, by node affinity
			node := i % nodes
			nodeName := fmt.Sprintf("sched-bench-n%d", node)
			ip := fmt.Sprintf("10.%d.%d.%d", 100+node/256, node%256, 10+(i/nodes)%200)
			if _, err := w.sip.JkeV1().StaticIPs(w.ns).Create(ctx, &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name},
				Spec: jkev1.StaticIPSpec{Node: nodeName, IP: ip, Pod: name, Resources: req}}, metav1.CreateOptions{}); err != nil {
				return err
			}
			p.Annotations = map[string]string{podip.AnnotationIPAddress: ip}
			p.Spec.Affinity = pinnedTo(nodeName)
		}
		_, err := w.kube.CoreV1().Pods(w.ns).Create(ctx, p, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
}

// waitAllBound returns once no pod of the namespace is unbound.
func (w *workload) waitAllBound(b *testing.B) {
	b.Helper()
	waitNoneUnbound(b, w.kube, w.ns, 500*time.Millisecond)
}

// waitNoneUnbound polls until no pod of ns is unbound. It lists only the unbound pods (from
// the watch cache), so the check costs less as the scheduler progresses: a list of every
// pod each time would take CPU from the scheduler being measured.
func waitNoneUnbound(b *testing.B, kube kubernetes.Interface, ns string, interval time.Duration) {
	b.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), interval, 2*time.Hour, true, func(ctx context.Context) (bool, error) {
		list, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=", ResourceVersion: "0"})
		return err == nil && len(list.Items) == 0, nil
	})
	if err != nil {
		b.Fatalf("not all pods of %s bound: %v", ns, err)
	}
}

// deletePods removes the pods, their StaticIPs and the namespace, and waits until no pod is
// left, so that the next mode starts on nodes as empty as the first one did.
func (w *workload) deletePods(b *testing.B) {
	b.Helper()
	w.deleteNamespace(b, w.ns)
}

// deleteNamespace removes the pods and StaticIPs of ns and ns itself, and waits until no pod
// of it is left.
func (w *workload) deleteNamespace(b *testing.B, ns string) {
	b.Helper()
	ctx := context.Background()
	_ = w.kube.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{})
	_ = w.sip.JkeV1().StaticIPs(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	_ = w.kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	err := wait.PollUntilContextTimeout(ctx, time.Second, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := w.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil && len(list.Items) == 0, nil
	})
	if err != nil {
		b.Fatalf("pods of %s not deleted: %v", ns, err)
	}
}

func (w *workload) tearDownNodes() {
	ctx := context.Background()
	_ = w.sip.JkeV1().IPRanges().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "sched-bench=true"})
	_ = w.kube.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "sched-bench=true"})
}
