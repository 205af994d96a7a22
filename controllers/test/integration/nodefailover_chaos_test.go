package integration

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/apis/podip"
	"github.com/staticip/staticip/controllers/pkg/nodefailover"
	"github.com/staticip/staticip/internal/serving"
	"github.com/staticip/staticip/internal/testenv"
)

// The chaos variant of the failover tests: two staticip-controller-manager processes (the real
// binary, built from this tree) under Lease election against the test's kube-apiserver. The
// leader is SIGKILLed in the middle of the migration's two write loops — once while it writes
// the IPRanges, once while it re-points the StaticIPs — and a replacement process is started
// after each kill, as the Deployment would. The other replica takes the Lease and completes
// the migration. Watches on the ranges, StaticIPs, record and pods check that every step
// happened exactly once and that no IP was ever held by two pods.

var (
	managerBuildOnce sync.Once
	managerBinPath   string
	managerBuildErr  error
)

// managerBinary builds staticip-controller-manager from this tree, as `make build` does (same
// flags, so the build cache serves both).
func managerBinary(t *testing.T) string {
	t.Helper()
	managerBuildOnce.Do(func() {
		root, err := testenv.RepoRoot()
		if err != nil {
			managerBuildErr = err
			return
		}
		dir, err := os.MkdirTemp("", "staticip-manager-bin-")
		if err != nil {
			managerBuildErr = err
			return
		}
		managerBinPath = filepath.Join(dir, "staticip-controller-manager")
		cmd := exec.Command("go", "build", "-trimpath", "-o", managerBinPath, "./controllers/cmd/staticip-controller-manager")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			managerBuildErr = fmt.Errorf("go build staticip-controller-manager: %v\n%s", err, out)
		}
	})
	if managerBuildErr != nil {
		t.Fatal(managerBuildErr)
	}
	t.Cleanup(func() { _ = os.RemoveAll(filepath.Dir(managerBinPath)) })
	return managerBinPath
}

// managerProcess is one replica: a staticip-controller-manager process.
type managerProcess struct {
	name    string
	cmd     *exec.Cmd
	metrics string       // host:port of its /metrics (HTTPS, delegated authn/authz)
	client  *http.Client // the test's admin credentials (system:masters: always authorized)
	log     *bytes.Buffer
	logMu   *sync.Mutex
	exited  chan struct{}
}

type lockedWriter struct {
	mu  *sync.Mutex
	buf *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

// startManagerProcess runs the binary with only the nodefailover controller, a short lease
// in the test's namespace and its metrics on a loopback port.
func (e *failoverEnv) startManagerProcess(bin, kubeconfig, name string, window time.Duration) *managerProcess {
	e.t.Helper()
	p := &managerProcess{name: name, metrics: freeAddr(e.t), client: metricsClient(e.t, e.cfg), log: &bytes.Buffer{}, logMu: &sync.Mutex{}, exited: make(chan struct{})}
	p.cmd = exec.Command(bin,
		"--kubeconfig="+kubeconfig,
		"--controllers="+nodefailover.Name,
		"--leader-elect-namespace="+e.ns,
		"--leader-elect-lease-duration=3s", "--leader-elect-renew-deadline=2s", "--leader-elect-retry-period=250ms",
		"--metrics-bind-address="+p.metrics, "--health-bind-address=0",
		"--node-failover-window="+window.String(), "-v=2")
	w := lockedWriter{mu: p.logMu, buf: p.log}
	p.cmd.Stdout, p.cmd.Stderr = w, w
	if err := p.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	e.t.Cleanup(func() {
		p.kill()
		if e.t.Failed() {
			e.t.Logf("=== log of manager process %s (pid %d) ===\n%s", p.name, p.cmd.Process.Pid, p.tail(120))
		}
	})
	return p
}

// kill is a crash: SIGKILL, no lease release, no cleanup; it returns once the process is gone.
func (p *managerProcess) kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

func (p *managerProcess) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

func (p *managerProcess) tail(lines int) string {
	p.logMu.Lock()
	defer p.logMu.Unlock()
	all := strings.Split(strings.TrimRight(p.log.String(), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// leading reads the process's staticip_controller_manager_leader gauge.
func (p *managerProcess) leading() bool {
	if !p.alive() {
		return false
	}
	resp, err := p.client.Get("https://" + p.metrics + "/metrics")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	s := bufio.NewScanner(resp.Body)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		if s.Text() == "staticip_controller_manager_leader 1" {
			return true
		}
	}
	return false
}

// metricsClient reaches a manager's /metrics with cfg's credentials (a client certificate the
// manager verifies against the cluster's client CA, or a token it reviews); the serving
// certificate is self-signed.
func metricsClient(t *testing.T, cfg *rest.Config) *http.Client {
	t.Helper()
	c, err := serving.Client(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.Timeout = 2 * time.Second
	return c
}

// waitLeader waits until exactly one live process leads and returns it.
func (e *failoverEnv) waitLeader(procs []*managerProcess, what string) *managerProcess {
	e.t.Helper()
	var leader *managerProcess
	e.eventually(time.Minute, what, func() (bool, error) {
		var leaders []string
		leader = nil
		for _, p := range procs {
			if p.leading() {
				leaders = append(leaders, p.name)
				leader = p
			}
		}
		if len(leaders) > 1 {
			return false, fmt.Errorf("two processes report leading at once: %v", leaders)
		}
		if leader == nil {
			return false, fmt.Errorf("no process leads (lease holder %q)", e.leaseHolder())
		}
		return true, nil
	})
	return leader
}

// migrationHistory is what the watches saw, in the API server's order per resource.
type migrationHistory struct {
	mu          sync.Mutex
	rangeSpecs  map[string][]jkev1.IPRangeSpec // every distinct spec of each range
	sipNodes    map[string][]string            // every distinct spec.node of each StaticIP
	phases      []jkev1alpha1.NodeFailoverPhase
	ipHolders   map[string]map[string]bool // ip -> live pods holding it
	errs        []string
	podEvents   int
	rangeMoved  chan struct{} // closed at the first range naming the target
	sipRebound  chan struct{} // closed at the first StaticIP naming the target
	movedRanges map[string]bool
	reboundSIPs map[string]bool
}

func (h *migrationHistory) fail(format string, args ...any) {
	h.errs = append(h.errs, fmt.Sprintf(format, args...))
}

// watchMigration starts the watches; target is the spare the ranges are expected to move to.
func (e *failoverEnv) watchMigration(target string) *migrationHistory {
	h := &migrationHistory{rangeSpecs: map[string][]jkev1.IPRangeSpec{}, sipNodes: map[string][]string{},
		ipHolders: map[string]map[string]bool{}, rangeMoved: make(chan struct{}), sipRebound: make(chan struct{}),
		movedRanges: map[string]bool{}, reboundSIPs: map[string]bool{}}
	ctx := e.ctx
	e.follow(h, func() (runtime.Object, error) { return e.client.JkeV1().IPRanges().List(ctx, metav1.ListOptions{}) },
		func(rv string) (watch.Interface, error) {
			return e.client.JkeV1().IPRanges().Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
		},
		func(_ watch.EventType, o runtime.Object) {
			if r := o.(*jkev1.IPRange); strings.HasPrefix(r.Name, e.ns) {
				h.sawRange(r, target)
			}
		})
	e.follow(h, func() (runtime.Object, error) {
		return e.client.JkeV1().StaticIPs(e.ns).List(ctx, metav1.ListOptions{})
	},
		func(rv string) (watch.Interface, error) {
			return e.client.JkeV1().StaticIPs(e.ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
		},
		func(_ watch.EventType, o runtime.Object) { h.sawStaticIP(o.(*jkev1.StaticIP), target) })
	e.follow(h, func() (runtime.Object, error) {
		return e.client.JkeV1alpha1().NodeFailovers().List(ctx, metav1.ListOptions{})
	},
		func(rv string) (watch.Interface, error) {
			return e.client.JkeV1alpha1().NodeFailovers().Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
		},
		func(t watch.EventType, o runtime.Object) {
			if r := o.(*jkev1alpha1.NodeFailover); strings.HasPrefix(r.Name, e.ns) {
				h.sawRecord(t, r)
			}
		})
	e.follow(h, func() (runtime.Object, error) { return e.kube.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{}) },
		func(rv string) (watch.Interface, error) {
			return e.kube.CoreV1().Pods(e.ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
		},
		func(t watch.EventType, o runtime.Object) { h.sawPod(t, o.(*corev1.Pod)) })
	return h
}

// follow hands every object of the list, then every watch event from the list's
// resourceVersion, to handle, until the test ends; a watch that closes early is a failure.
func (e *failoverEnv) follow(h *migrationHistory, list func() (runtime.Object, error), watchFrom func(rv string) (watch.Interface, error), handle func(watch.EventType, runtime.Object)) {
	obj, err := list()
	if err != nil {
		e.t.Fatal(err)
	}
	items, err := meta.ExtractList(obj)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, it := range items {
		handle(watch.Added, it)
	}
	w, err := watchFrom(listRV(obj))
	if err != nil {
		e.t.Fatal(err)
	}
	go func() {
		defer w.Stop()
		for {
			select {
			case <-e.ctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					if e.ctx.Err() == nil {
						h.mu.Lock()
						h.fail("a watch closed early: the history is incomplete")
						h.mu.Unlock()
					}
					return
				}
				if ev.Type == watch.Error || ev.Type == watch.Bookmark {
					continue
				}
				handle(ev.Type, ev.Object)
			}
		}
	}()
}

// sawRange records a new spec of r; the first range naming target closes rangeMoved.
func (h *migrationHistory) sawRange(r *jkev1.IPRange, target string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	specs := h.rangeSpecs[r.Name]
	if len(specs) == 0 || !reflect.DeepEqual(specs[len(specs)-1], r.Spec) {
		h.rangeSpecs[r.Name] = append(specs, r.Spec)
	}
	if r.Spec.Node == target && !h.movedRanges[r.Name] {
		h.movedRanges[r.Name] = true
		if len(h.movedRanges) == 1 {
			close(h.rangeMoved)
		}
	}
}

// sawStaticIP records a new spec.node of s; the first StaticIP naming target closes sipRebound.
func (h *migrationHistory) sawStaticIP(s *jkev1.StaticIP, target string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	nodes := h.sipNodes[s.Name]
	if len(nodes) == 0 || nodes[len(nodes)-1] != s.Spec.Node {
		h.sipNodes[s.Name] = append(nodes, s.Spec.Node)
	}
	if s.Spec.Node == target && !h.reboundSIPs[s.Name] {
		h.reboundSIPs[s.Name] = true
		if len(h.reboundSIPs) == 1 {
			close(h.sipRebound)
		}
	}
}

// sawRecord records a new phase of the record; going back, or the record deleted, is a failure.
func (h *migrationHistory) sawRecord(t watch.EventType, r *jkev1alpha1.NodeFailover) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t == watch.Deleted {
		h.fail("record %s deleted mid-migration (phase %s)", r.Name, r.Status.Phase)
		return
	}
	p := r.Status.Phase
	if p == "" || (len(h.phases) > 0 && h.phases[len(h.phases)-1] == p) {
		return
	}
	if len(h.phases) > 0 && nodefailover.PhaseIndex(p) < nodefailover.PhaseIndex(h.phases[len(h.phases)-1]) {
		h.fail("record %s went back from phase %s to %s", r.Name, h.phases[len(h.phases)-1], p)
	}
	h.phases = append(h.phases, p)
}

// sawPod tracks which live pods hold each IP; two at once is a failure.
func (h *migrationHistory) sawPod(t watch.EventType, p *corev1.Pod) {
	key := p.Name + "/" + string(p.UID)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.podEvents++
	for ip, holders := range h.ipHolders {
		delete(holders, key)
		if len(holders) == 0 {
			delete(h.ipHolders, ip)
		}
	}
	if t == watch.Deleted || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return
	}
	for _, ip := range p.Status.PodIPs {
		if h.ipHolders[ip.IP] == nil {
			h.ipHolders[ip.IP] = map[string]bool{}
		}
		h.ipHolders[ip.IP][key] = true
		if len(h.ipHolders[ip.IP]) > 1 {
			h.fail("IP %s held by %d pods at once: %v", ip.IP, len(h.ipHolders[ip.IP]), slices.Sorted(mapKeys(h.ipHolders[ip.IP])))
		}
	}
}

func listRV(obj runtime.Object) string {
	if l, ok := obj.(metav1.ListInterface); ok {
		return l.GetResourceVersion()
	}
	return ""
}

// workload stands in for the workload controllers, the scheduler and the kubelets: a StaticIP
// whose pod is missing gets its pod Running on the StaticIP's node with its IP, once that node
// is Ready and has no NoSchedule/NoExecute taint (the spare taint is the gate). Before starting
// a pod it checks, on the API server, that the range holding the IP names that node: a pod
// started on a node that does not own its range is the invariant broken.
func (e *failoverEnv) workload(h *migrationHistory) {
	_ = wait.PollUntilContextCancel(e.ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		sips, err := e.client.JkeV1().StaticIPs(e.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, s := range sips.Items {
			if _, err := e.kube.CoreV1().Pods(e.ns).Get(ctx, s.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				continue
			}
			n, err := e.kube.CoreV1().Nodes().Get(ctx, s.Spec.Node, metav1.GetOptions{})
			if err != nil || !nodefailover.NodeReady(n) || slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
				return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
			}) {
				continue
			}
			ranges, err := e.client.JkeV1().IPRanges().List(ctx, metav1.ListOptions{})
			if err != nil {
				continue
			}
			for _, r := range ranges.Items {
				if nodefailover.IPInPrefixes(s.Spec.IP, nodefailover.ParsePrefixes([]string{r.Spec.CIDR})) && r.Spec.Node != s.Spec.Node {
					h.mu.Lock()
					h.fail("pod %s would start on %s (gate open) while its IP %s lies in range %s owned by %s", s.Name, s.Spec.Node, s.Spec.IP, r.Name, r.Spec.Node)
					h.mu.Unlock()
				}
			}
			short := strings.TrimPrefix(s.Spec.Node, e.ns+"-")
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: e.ns, Annotations: map[string]string{podip.AnnotationIPAddress: s.Spec.IP}},
				Spec: corev1.PodSpec{NodeName: e.name(short), Containers: []corev1.Container{{Name: "app", Image: "app:v1"}}}}
			created, err := e.kube.CoreV1().Pods(e.ns).Create(ctx, p, metav1.CreateOptions{})
			if err != nil {
				continue
			}
			created.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: s.Spec.IP, PodIPs: []corev1.PodIP{{IP: s.Spec.IP}}}
			_, _ = e.kube.CoreV1().Pods(e.ns).UpdateStatus(ctx, created, metav1.UpdateOptions{})
		}
		return false, nil
	})
}

// chaosNodes: n1, n2, n3 and spare1; n3 owns six ranges (two loops of writes wide enough to
// kill the leader inside them), one at ownerGeneration 4, and six StaticIPs in three of them;
// n1 owns one range. gens: each of n3's ranges' ownerGeneration.
func (e *failoverEnv) chaosNodes() (ranges []string, gens map[string]int64, sips []string) {
	for _, n := range []string{"n1", "n2", "n3"} {
		e.addNode(n)
	}
	e.addNode("spare1", spare)
	gens = map[string]int64{}
	for i := range 6 {
		gen := int64(0)
		if i == 1 {
			gen = 4
		}
		name := e.addRange(fmt.Sprintf("r3-%d", i), i+1, "n3", gen)
		ranges, gens[name] = append(ranges, name), gen
	}
	e.addRange("r1", 20, "n1", 0)
	for i := range 6 {
		name := fmt.Sprintf("web-%d", i)
		e.addStaticIP(name, "n3", e.ip(i%3+1, 10+i))
		sips = append(sips, name)
	}
	return ranges, gens, sips
}

// TestNodeFailoverLeaderKilledMidMigration: the manager's leader is SIGKILLed in the middle of
// a migration, twice; the other replica takes the Lease and completes it. Every range moves
// exactly once (ownerGeneration + 1), every StaticIP is re-pointed exactly once, the record
// only goes forward, no pod starts on the target before its range is there, no IP is ever on
// two pods.
func TestNodeFailoverLeaderKilledMidMigration(t *testing.T) {
	e := newFailoverEnv(t)
	bin := managerBinary(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := testenv.WriteKubeconfig(e.cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	ranges, gens, sips := e.chaosNodes()
	target := e.name("spare1")
	h := e.watchMigration(target)
	go e.workload(h)

	const window = time.Second
	a := e.startManagerProcess(bin, kubeconfig, "a", window)
	b := e.startManagerProcess(bin, kubeconfig, "b", window)
	procs := []*managerProcess{a, b}
	first := e.waitLeader(procs, "a leader")
	t.Logf("%s leads", first.name)

	// n3 is powered off and fenced; pod GC removes its pods.
	e.setReady("n3", false)
	e.fence("n3")
	e.podGC("n3")

	// Kill 1: while the leader writes the IPRanges.
	killAt := func(ch <-chan struct{}, what string, leader *managerProcess) {
		select {
		case <-ch:
		case <-time.After(2 * time.Minute):
			r, _ := e.record("n3")
			t.Fatalf("never saw %s (record %+v)", what, r)
		}
		leader.kill()
		h.mu.Lock()
		moved, rebound := len(h.movedRanges), len(h.reboundSIPs)
		h.mu.Unlock()
		t.Logf("SIGKILL %s at %s: %d of %d ranges and %d of %d StaticIPs on the target so far", leader.name, what, moved, len(ranges), rebound, len(sips))
	}
	killAt(h.rangeMoved, "the first range write", first)
	second := e.waitLeader(procs, "the other replica takes over")
	if second == first {
		t.Fatal("the killed process still leads")
	}
	// The Deployment replaces the killed pod.
	c := e.startManagerProcess(bin, kubeconfig, "c", window)
	procs = append(procs, c)

	// Kill 2: while the new leader re-points the StaticIPs.
	killAt(h.sipRebound, "the first StaticIP re-point", second)
	third := e.waitLeader(procs, "the replacement takes over")
	t.Logf("%s leads after the second kill", third.name)

	e.waitRecord("n3", "completed by the last leader", phaseIs(jkev1alpha1.FailoverCompleted))
	// Quiet for a moment: nothing is written again after completion.
	time.Sleep(2 * time.Second)
	e.checkHistory(h, ranges, gens, sips)
	e.checkCompleted(ranges, gens, sips)
}

// checkHistory: every range of n3 went through exactly one move to the target at its
// generation + 1, n1's was never rewritten, every StaticIP was re-pointed exactly once, and
// the watches saw no failure.
func (e *failoverEnv) checkHistory(h *migrationHistory, ranges []string, gens map[string]int64, sips []string) {
	t, target := e.t, e.name("spare1")
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range ranges {
		want := []jkev1.IPRangeSpec{{CIDR: h.rangeSpecs[r][0].CIDR, Node: e.name("n3"), OwnerGeneration: gens[r]},
			{CIDR: h.rangeSpecs[r][0].CIDR, Node: target, OwnerGeneration: gens[r] + 1}}
		if !reflect.DeepEqual(h.rangeSpecs[r], want) {
			t.Errorf("IPRange %s went through %+v, want exactly one move %+v", r, h.rangeSpecs[r], want)
		}
	}
	if specs := h.rangeSpecs[e.name("r1")]; len(specs) != 1 {
		t.Errorf("n1's range was rewritten: %+v", specs)
	}
	for _, s := range sips {
		if want := []string{e.name("n3"), target}; !slices.Equal(h.sipNodes[s], want) {
			t.Errorf("StaticIP %s named %v, want exactly one re-point %v", s, h.sipNodes[s], want)
		}
	}
	for _, err := range h.errs {
		t.Error(err)
	}
	t.Logf("phases seen: %v; %d pod events checked", h.phases, h.podEvents)
}

// checkCompleted: the record lists every move, the target is no spare and unclaimed, and every
// pod runs on the target with its IP.
func (e *failoverEnv) checkCompleted(ranges []string, gens map[string]int64, sips []string) {
	t, target := e.t, e.name("spare1")
	rec, err := e.record("n3")
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Status.MovedRanges) != len(ranges) {
		t.Errorf("movedRanges %+v, want %d entries", rec.Status.MovedRanges, len(ranges))
	}
	for _, mv := range rec.Status.MovedRanges {
		if mv.ToNode != target || mv.OwnerGeneration != gens[mv.Name]+1 {
			t.Errorf("movedRanges entry %+v, want to %s at %d", mv, target, gens[mv.Name]+1)
		}
	}
	if len(rec.Status.MovedStaticIPs) != len(sips) || slices.ContainsFunc(rec.Status.MovedStaticIPs, func(m jkev1alpha1.MovedStaticIP) bool { return !m.Rebound }) {
		t.Errorf("movedStaticIPs %+v", rec.Status.MovedStaticIPs)
	}
	n := e.getNode("spare1")
	if n.Labels[jkev1alpha1.LabelFailoverFor] != "" || slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == jkev1alpha1.TaintSpare }) {
		t.Errorf("target after completion: labels %v taints %v", n.Labels, n.Spec.Taints)
	}
	for i, s := range sips {
		p, err := e.kube.CoreV1().Pods(e.ns).Get(e.ctx, s, metav1.GetOptions{})
		if err != nil {
			t.Errorf("pod %s: %v", s, err)
		} else if p.Spec.NodeName != target || p.Status.PodIP != e.ip(i%3+1, 10+i) {
			t.Errorf("pod %s on %s with %s, want %s with %s", s, p.Spec.NodeName, p.Status.PodIP, target, e.ip(i%3+1, 10+i))
		}
	}
}
