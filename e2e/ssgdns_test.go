//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	superedgev1 "github.com/staticip/staticip/apis/superedge/v1"
	"github.com/staticip/staticip/e2e/framework"
)

const (
	edgeDNSGrid   = "edge-coredns"
	ssgDaemonName = "statefulset-grid-daemon"
	// latencyRounds pod deletions (at least) measure the record-update latency (median reported).
	latencyRounds = 20
)

// TestStatefulSetGridDNS: the published StatefulSetGrid (3 replicas, gridUniqKey zone) and
// ServiceGrid under the edge DNS (manifests/edge: statefulset-grid-daemon; manifests/edge/coredns:
// a CoreDNS per zone behind kube-dns with topologyKeys ["zone","*"]): from a pod on every node,
// {ssg}-{i}.{svc}.{ns}.svc.cluster.local resolves to pod {ssg}-{zone}-{i} of the caller's zone
// and HTTP to that name answers with that pod's name; a deleted pod's name follows its
// replacement (latency measured from the replacement's Ready to the caller's resolver seeing
// it, median over 20 deletions, logged); the zone's CoreDNS gone, names still resolve (through
// the other zone's, "*"); the grid deleted, its names stop resolving.
func TestStatefulSetGridDNS(t *testing.T) {
	requireManager(t)
	ctx := context.Background()
	if _, err := f.Client.AppsV1().DaemonSets("kube-system").Get(ctx, ssgDaemonName, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		t.Skip("SKIP: kube-system/statefulset-grid-daemon does not run here (manifests/edge not installed, or --kube-proxy-direct)")
	}
	cs := versioned.NewForConfigOrDie(f.Config)
	if _, err := cs.SuperedgeV1().DeploymentGrids("kube-system").Get(ctx, edgeDNSGrid, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		t.Skip("SKIP: the edge DNS (DeploymentGrid kube-system/edge-coredns, manifests/edge/coredns) is not the cluster's DNS here " +
			"(a local cluster up with --central-dns or --kube-proxy-direct, or kind with KIND_CENTRAL_DNS=1 or KIND_KUBE_PROXY_DIRECT=1)")
	}
	units := unitNodes(t, ctx, "zone")
	if len(units["zone-0"]) == 0 || len(units["zone-1"]) == 0 {
		t.Skipf("SKIP: needs nodes labelled zone=zone-0 and zone=zone-1, have %v", units)
	}
	start := time.Now()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		// The DNS the test relies on lives outside its namespace: where each zone's CoreDNS
		// is, whether it is ready, and what kube-dns's EndpointSlices offer.
		for _, args := range [][]string{
			{"get", "pods", "-o", "wide", "-n", "kube-system", "-l", "app.kubernetes.io/name=" + edgeDNSGrid},
			{"get", "endpointslices", "-o", "yaml", "-n", "kube-system", "-l", "kubernetes.io/service-name=kube-dns"},
			{"get", "ipranges", "-o", "wide"},
		} {
			out, _ := f.RunKubectl(args...)
			t.Logf("kubectl %s:\n%s", strings.Join(args, " "), out)
		}
	})
	ns := f.Namespace(t, "ssgdns")

	var ssg superedgev1.StatefulSetGrid
	var sg superedgev1.ServiceGrid
	readExample(t, "statefulsetgrid.yaml", &ssg)
	readExample(t, "servicegrid.yaml", &sg)
	ssg.Namespace, sg.Namespace = ns, ns
	localImage(&ssg.Spec.Template.Template.Spec, testServerImage)
	if _, err := cs.SuperedgeV1().ServiceGrids(ns).Create(ctx, &sg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.SuperedgeV1().StatefulSetGrids(ns).Create(ctx, &ssg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A client on every node.
	nodeZone := map[string]string{}
	var clients []string
	for zone, nodes := range units {
		for n := range nodes {
			nodeZone[n] = zone
		}
	}
	for n := range nodeZone {
		clients = append(clients, n)
	}
	sort.Strings(clients)
	clientPod := map[string]string{}
	for i, n := range clients {
		clientPod[n] = fmt.Sprintf("client-%d", i)
		if _, err := f.Client.CoreV1().Pods(ns).Create(ctx, testServerPod(clientPod[n], n, map[string]string{"role": "client"}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	sets := map[string]string{}
	for zone := range units {
		sets[ssg.Name+"-"+zone] = zone
	}
	ips := waitUnitPods(t, ctx, ns, sets, 3, units)
	for _, n := range clients {
		if _, err := f.WaitForPodRunning(ctx, ns, clientPod[n], gridTimeout); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("grid and clients up after %v", time.Since(start).Round(time.Second))
	dnsName := func(i int) string {
		return fmt.Sprintf("%s-%d.%s.%s.svc.cluster.local", ssg.Name, i, ssg.Spec.Template.ServiceName, ns)
	}

	// 1. The table, from every node: the name resolves to the caller's zone's pod, which answers.
	var table strings.Builder
	fmt.Fprintf(&table, "%-8s %-7s %-62s %-14s %s\n", "caller", "zone", "name", "resolves to", "HTTP answered by")
	for _, n := range clients {
		zone := nodeZone[n]
		for i := range 3 {
			want := fmt.Sprintf("%s-%s-%d", ssg.Name, zone, i)
			got := waitLookup(t, ns, clientPod[n], dnsName(i), func(a string) bool { return a == ips[want] }, time.Minute)
			out, err := f.ExecInPod(ns, clientPod[n], "/testserver", "get", "--timeout=3s", fmt.Sprintf("http://%s:8080/", dnsName(i)))
			var reply struct{ Pod string }
			if err != nil || json.Unmarshal([]byte(out), &reply) != nil || reply.Pod != want {
				t.Errorf("%s (%s): HTTP to %s answered by %q (%v: %s), want %s", n, zone, dnsName(i), reply.Pod, err, out, want)
			}
			fmt.Fprintf(&table, "%-8s %-7s %-62s %-14s %s\n", n, zone, dnsName(i), got, reply.Pod)
		}
	}
	t.Logf("from a pod on every node:\n%s", table.String())

	// 2. Record-update latency: delete a zone-0 pod, its name must follow the replacement.
	caller := ""
	for _, n := range clients {
		if nodeZone[n] == "zone-0" {
			caller = n
			break
		}
	}
	measureRecordLatency(t, ctx, ns, clientPod[caller], ssg.Name+"-zone-0", dnsName)

	// 3. The zone's CoreDNS gone (its nodes cordoned, its pod deleted, so none comes back
	// there): zone-0's callers resolve through zone-1's CoreDNS ("*" in topologyKeys).
	// Every node labelled zone-0, also those unitNodes leaves out (kind's control plane: test
	// pods do not tolerate its taint, the edge CoreDNS does).
	zone0, err := f.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "zone=zone-0"})
	if err != nil {
		t.Fatal(err)
	}
	zone0Nodes := map[string]bool{}
	for _, n := range zone0.Items {
		zone0Nodes[n.Name] = true
		cordon(t, ctx, n.Name, true)
		t.Cleanup(func() { cordon(t, context.Background(), n.Name, false) })
	}
	dnsPods, err := f.Client.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + edgeDNSGrid})
	if err != nil {
		t.Fatal(err)
	}
	killed := 0
	for _, p := range dnsPods.Items {
		if zone0Nodes[p.Spec.NodeName] {
			if err := f.Client.CoreV1().Pods("kube-system").Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); err != nil {
				t.Fatal(err)
			}
			killed++
		}
	}
	if killed == 0 {
		t.Fatalf("no edge CoreDNS pod on a zone-0 node: %d pods", len(dnsPods.Items))
	}
	killedAt := time.Now()
	zone1IPs := map[string]bool{}
	for i := range 3 {
		zone1IPs[ips[fmt.Sprintf("%s-zone-1-%d", ssg.Name, i)]] = true
	}
	for i := range 3 {
		got := waitLookup(t, ns, clientPod[caller], dnsName(i), func(a string) bool { return zone1IPs[a] }, 2*time.Minute)
		t.Logf("zone-0's CoreDNS gone: %s from %s resolves to %s (zone-1's pod, through zone-1's CoreDNS), %v after the kill",
			dnsName(i), caller, got, time.Since(killedAt).Round(100*time.Millisecond))
	}
	for n := range zone0Nodes {
		cordon(t, ctx, n, false)
	}
	if err := framework.WaitFor(ctx, 2*time.Minute, "zone-0's CoreDNS back and answering with zone-0's pod", func(ctx context.Context) (bool, error) {
		// The latency rounds replaced zone-0's pods: their IPs now.
		p, err := f.Client.CoreV1().Pods(ns).Get(ctx, ssg.Name+"-zone-0-0", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		out, err := f.ExecInPod(ns, clientPod[caller], "/testserver", "lookup", dnsName(0)+".")
		return holds(err == nil && strings.TrimSpace(out) == p.Status.PodIP, fmt.Errorf("%v %s, want %s", err, out, p.Status.PodIP))
	}); err != nil {
		t.Fatal(err)
	}

	// 4. The grid deleted: its names stop resolving everywhere.
	if err := cs.SuperedgeV1().StatefulSetGrids(ns).Delete(ctx, ssg.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range clients {
		waitLookup(t, ns, clientPod[n], dnsName(0), func(a string) bool { return a == "-" }, time.Minute)
	}
	t.Logf("grid deleted: %s resolves nowhere; TestStatefulSetGridDNS took %v", dnsName(0), time.Since(start).Round(time.Second))
}

// waitLookup resolves name from the pod until ok(answer) ("-" when it does not resolve) and
// returns the answer.
func waitLookup(t *testing.T, ns, pod, name string, ok func(string) bool, timeout time.Duration) string {
	t.Helper()
	answer := ""
	err := framework.WaitFor(context.Background(), timeout, name+" from "+pod, func(ctx context.Context) (bool, error) {
		out, err := f.ExecInPod(ns, pod, "/testserver", "lookup", name+".")
		answer = "-"
		if err == nil {
			answer = strings.Join(strings.Fields(out), ",")
		}
		return holds(ok(answer), fmt.Errorf("resolves to %s", answer))
	})
	if err != nil {
		t.Fatal(err)
	}
	return answer
}

func cordon(t *testing.T, ctx context.Context, node string, on bool) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, on)
	if _, err := f.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Errorf("cordon %s=%t: %v", node, on, err)
	}
}

// dnsChange is one line of `testserver dnswatch`: when the caller's resolver first gave answer.
type dnsChange struct {
	at     time.Time
	answer string
}

func (c dnsChange) String() string { return c.at.Format("15:04:05.000") + " " + c.answer }

// measureRecordLatency deletes the set's pods (the three ordinals in parallel, one after
// another within an ordinal, latencyRounds deletions or a few more in all) and, for each,
// measures from the moment the replacement is Ready (seen by this test's pod watch) to the
// moment the caller's resolver (testserver dnswatch in the caller pod, polling every 20 ms; same
// machine, same clock) returns the replacement's IP for its name. Logged, with the median;
// never asserted.
func measureRecordLatency(t *testing.T, ctx context.Context, ns, caller, set string, dnsName func(int) string) {
	t.Helper()
	perOrdinal := (latencyRounds + 2) / 3
	var mu sync.Mutex
	var lats []time.Duration
	errs := make(chan error, 3)
	var wg sync.WaitGroup
	for ordinal := range 3 {
		watcher := startDNSWatch(t, ns, caller, dnsName(ordinal)+".")
		pod := fmt.Sprintf("%s-%d", set, ordinal)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range perOrdinal {
				lat, what, err := replaceAndMeasure(ctx, ns, pod, watcher)
				if err != nil {
					errs <- fmt.Errorf("%s, deletion %d: %w", pod, round+1, err)
					return
				}
				mu.Lock()
				lats = append(lats, lat)
				mu.Unlock()
				t.Logf("%s deletion %d: %s; resolved %v after Ready", pod, round+1, what, lat.Round(time.Millisecond))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	sorted := append([]time.Duration(nil), lats...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	t.Logf("RECORD-UPDATE LATENCY (replacement pod Ready -> caller's resolver answers its IP), %d deletions: median %v, min %v, max %v",
		len(sorted), sorted[len(sorted)/2].Round(time.Millisecond), sorted[0].Round(time.Millisecond), sorted[len(sorted)-1].Round(time.Millisecond))
}

// replaceAndMeasure deletes pod, waits for its Ready replacement and for the watcher to see the
// name resolve to the replacement's IP after it went away (the old pod terminating drops the
// record; the IP may be the same again), and returns the time between the two.
func replaceAndMeasure(ctx context.Context, ns, pod string, watcher *dnsWatcher) (time.Duration, string, error) {
	old, err := f.Client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return 0, "", err
	}
	// A watch, not polling: readyAt is when the API server told us (and the daemon's
	// informer) that the replacement is Ready.
	w, err := f.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + pod, ResourceVersion: old.ResourceVersion})
	if err != nil {
		return 0, "", err
	}
	defer w.Stop()
	deletedAt := time.Now()
	if err := f.Client.CoreV1().Pods(ns).Delete(ctx, pod, metav1.DeleteOptions{}); err != nil {
		return 0, "", err
	}
	var readyAt time.Time
	var newIP string
	timeout := time.After(2 * time.Minute)
	for readyAt.IsZero() {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return 0, "", fmt.Errorf("pod watch ended")
			}
			if p, isPod := ev.Object.(*corev1.Pod); isPod && p.UID != old.UID && framework.PodReady(p) && p.Status.PodIP != "" {
				readyAt, newIP = time.Now(), p.Status.PodIP
			}
		case <-timeout:
			return 0, "", fmt.Errorf("no Ready replacement in 2 minutes")
		}
	}
	var resolvedAt time.Time
	err = framework.WaitFor(ctx, time.Minute, pod+"'s name -> "+newIP, func(context.Context) (bool, error) {
		gone := false
		for _, c := range watcher.changes() {
			if c.at.Before(deletedAt) {
				continue
			}
			if c.answer != old.Status.PodIP {
				gone = true
			}
			if gone && c.answer == newIP {
				resolvedAt = c.at
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return 0, "", fmt.Errorf("%v (resolver saw %v)", err, watcher.changes())
	}
	return resolvedAt.Sub(readyAt), old.Status.PodIP + " -> " + newIP, nil
}

type dnsWatcher struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	seen []dnsChange
}

// startDNSWatch runs `testserver dnswatch name` in the pod and collects its lines. The
// exec stream through the API server and kubelet is the fragile part (a CI run once got no
// line in 30 s, with nothing to say why): kubectl's stderr is kept, and an exec that ends or
// stays silent is tried again, up to three times, before the test fails with what kubectl said.
func startDNSWatch(t *testing.T, ns, pod, name string) *dnsWatcher {
	t.Helper()
	var why []string
	for attempt := 1; attempt <= 3; attempt++ {
		w, err := execDNSWatch(ns, pod, name)
		if err == nil {
			t.Cleanup(w.stop)
			return w
		}
		why = append(why, fmt.Sprintf("attempt %d: %v", attempt, err))
		time.Sleep(2 * time.Second)
	}
	t.Fatalf("testserver dnswatch in %s never printed:\n%s", pod, strings.Join(why, "\n"))
	return nil
}

// execDNSWatch starts one `kubectl exec ... testserver dnswatch` and returns once it printed
// its first line, or an error (with kubectl's stderr) when it ended or was silent for 30 s.
func execDNSWatch(ns, pod, name string) (*dnsWatcher, error) {
	cmd := exec.Command(f.Kubectl, "--kubeconfig="+f.Kubeconfig, "exec", "-n", ns, pod, "--",
		"/testserver", "dnswatch", "--interval=20ms", "--duration=15m", name)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	w := &dnsWatcher{cmd: cmd}
	started, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		sc := bufio.NewScanner(out)
		first := true
		for sc.Scan() {
			ts, answer, ok := strings.Cut(sc.Text(), " ")
			ns, err := strconv.ParseInt(ts, 10, 64)
			if ok && err == nil {
				w.mu.Lock()
				w.seen = append(w.seen, dnsChange{at: time.Unix(0, ns), answer: answer})
				w.mu.Unlock()
			}
			if first {
				close(started)
				first = false
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case <-started:
		return w, nil
	case <-ended:
		err := cmd.Wait()
		return nil, fmt.Errorf("kubectl exec ended before the first line (%v): %s", err, strings.TrimSpace(stderr.String()))
	case <-time.After(30 * time.Second):
		w.stop()
		<-ended
		return nil, fmt.Errorf("no line in 30 s; kubectl said: %q", strings.TrimSpace(stderr.String()))
	}
}

// lockedBuffer is a bytes.Buffer that kubectl's stderr copier and the test may use at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (w *dnsWatcher) changes() []dnsChange {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]dnsChange(nil), w.seen...)
}

func (w *dnsWatcher) stop() {
	if w.cmd.Process != nil {
		_ = w.cmd.Process.Kill()
		_ = w.cmd.Wait()
	}
}
