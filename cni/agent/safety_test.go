package agent

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/cni/plugin"
	"github.com/staticip/staticip/internal/serving"
	"github.com/staticip/staticip/internal/testenv"
	"github.com/staticip/staticip/internal/testsupport"
	"github.com/staticip/staticip/ipam"
)

// allocateAt makes the allocation the CNI plugin would have made at time at.
func allocateAt(t *testing.T, path string, at time.Time, containerID string, pod ipam.PodRef) ipam.Allocation {
	t.Helper()
	db, err := ipam.Open(ipam.Options{Path: path, Now: func() time.Time { return at }})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	al, _, err := db.Allocate(ipam.AllocateRequest{Attachment: ipam.Attachment{ContainerID: containerID, IfName: "eth0"}, Pod: pod})
	if err != nil {
		t.Fatal(err)
	}
	return al
}

// dbState lists the database's allocations (by container ID) and reservations (IP -> pod).
func dbState(t *testing.T, path string) (allocs []string, reserved map[string]string) {
	t.Helper()
	db, err := ipam.Open(ipam.Options{Path: path, OpenTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	as, err := db.Allocations()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range as {
		allocs = append(allocs, a.Attachment.ContainerID)
	}
	sort.Strings(allocs)
	rs, err := db.Reservations()
	if err != nil {
		t.Fatal(err)
	}
	reserved = map[string]string{}
	for _, r := range rs {
		reserved[r.IP.String()] = r.Pod.Key()
	}
	return allocs, reserved
}

func createNamespace(ctx context.Context, t *testing.T, kube kubernetes.Interface, name string) {
	t.Helper()
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func startedAgent(ctx context.Context, t *testing.T, cfg Config, kube kubernetes.Interface, sip versioned.Interface, log io.Writer) *Agent {
	t.Helper()
	a := New(cfg, kube, sip, log)
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.WaitForCaches(ctx); err != nil {
		t.Fatal(err)
	}
	return a
}

// GC frees only what it can prove dead. An ADD that commits after the pass read the pod cache
// (its pod not in the snapshot), a pod whose sandbox still has its host veth (force-deleted),
// and a static pod (the kubelet's UID is not its mirror pod's) all keep their IPs, pass after
// pass; an old allocation of a gone pod without a veth is freed.
func TestGCFreesOnlyProvablyDeadAllocations(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	ctx, kube, sip, suffix := apiFixture(t, 2*time.Minute)
	node, nsName := "cni-node-gc-"+suffix, "cni-gc-"+suffix
	createIPRange(ctx, t, sip, "cni-gc-"+suffix, jkev1.IPRangeSpec{CIDR: "10.156.0.0/24", Node: node})
	createNamespace(ctx, t, kube, nsName)
	mirror := "etcd-" + node
	if _, err := kube.CoreV1().Pods(nsName).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: mirror, Annotations: map[string]string{corev1.MirrorPodAnnotationKey: "hash"}},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	host := nodeNetns(t, "gc", "192.168.79.1/24")
	// The sandbox of the force-deleted pod still runs: its host veth is there.
	if err := host.Do(func(ns.NetNS) error {
		return netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: plugin.HostVethName("c-forced", "eth0")}, PeerName: "cni-gcpeer"})
	}); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	cfg := Config{NodeName: node, CNIBinDir: filepath.Join(dir, "bin"), CNIConfDir: filepath.Join(dir, "net.d"), DataDir: dir}
	var log syncBuffer
	a := startedAgent(ctx, t, cfg, kube, sip, &log)
	dbPath := a.DBPath()
	if err := host.Do(func(ns.NetNS) error { return a.SyncOnce(ctx) }); err != nil { // creates the database and its range
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	allocateAt(t, dbPath, old, "c-static", ipam.PodRef{Namespace: nsName, Name: mirror, UID: "kubelet-side-uid"})
	allocateAt(t, dbPath, old, "c-forced", ipam.PodRef{Namespace: nsName, Name: "forced", UID: "deleted-uid"})
	allocateAt(t, dbPath, old, "c-dead", ipam.PodRef{Namespace: nsName, Name: "dead", UID: "dead-uid"})

	// The plugin's ADD for pod "late" commits after the pass took its snapshot of the pods.
	a.afterSnapshot = func() {
		allocateAt(t, dbPath, time.Now(), "c-late", ipam.PodRef{Namespace: nsName, Name: "late", UID: "late-uid"})
		a.afterSnapshot = nil
	}
	want := "c-forced,c-late,c-static"
	for pass := range 3 {
		if err := host.Do(func(ns.NetNS) error { return a.SyncOnce(ctx) }); err != nil {
			t.Fatalf("pass %d: %v\nlog:\n%s", pass, err, log.String())
		}
		allocs, _ := dbState(t, dbPath)
		if got := strings.Join(allocs, ","); got != want {
			t.Fatalf("pass %d: allocations %s, want %s\nlog:\n%s", pass, got, want, log.String())
		}
	}
}

// The node that owns a range reserves every StaticIP whose IP lies in it, whatever node the
// record names (failover moves records after ranges); a StaticIP naming this node with an IP of
// another node's range reserves nothing here.
func TestReservationsFollowRangeOwnership(t *testing.T) {
	ctx, kube, sip, suffix := apiFixture(t, 2*time.Minute)
	nodeA, nodeB, nsName := "cni-node-own-a-"+suffix, "cni-node-own-b-"+suffix, "cni-own-"+suffix
	createIPRange(ctx, t, sip, "cni-own-a-"+suffix, jkev1.IPRangeSpec{CIDR: "10.157.0.0/24", Node: nodeA})
	createIPRange(ctx, t, sip, "cni-own-b-"+suffix, jkev1.IPRangeSpec{CIDR: "10.158.0.0/24", Node: nodeB})
	createNamespace(ctx, t, kube, nsName)
	for name, spec := range map[string]jkev1.StaticIPSpec{
		"moved":     {Pod: "moved", Node: nodeB, IP: "10.157.0.20"},
		"elsewhere": {Pod: "elsewhere", Node: nodeA, IP: "10.158.0.20"},
		"home":      {Pod: "home", Node: nodeA, IP: "10.157.0.21"},
	} {
		if _, err := sip.JkeV1().StaticIPs(nsName).Create(ctx, &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	a := startedAgent(ctx, t, Config{NodeName: nodeA, CNIBinDir: filepath.Join(dir, "bin"), CNIConfDir: filepath.Join(dir, "net.d"), DataDir: dir}, kube, sip, io.Discard)
	testsupport.Eventually(context.Background(), t, 10*time.Second, "the agent's cache holds the three StaticIPs", testsupport.True(func() bool {
		return len(staticIPsIn(a, nsName)) == 3
	}))
	if err := a.SyncOnce(ctx); err != nil {
		t.Fatal(err)
	}
	_, reserved := dbState(t, a.DBPath())
	if reserved["10.157.0.20"] != nsName+"/moved" || reserved["10.157.0.21"] != nsName+"/home" || len(reserved) != 2 {
		t.Fatalf("reservations %v, want 10.157.0.20 for moved and 10.157.0.21 for home only", reserved)
	}
}

// Two StaticIPs claiming one IP freeze nothing: every other record is reserved, the contested
// IP stays reserved for the older record (never free for a third pod), and both records get a
// Warning Event naming the other.
func TestDuplicateStaticIPIsReportedAndTheRestReserved(t *testing.T) {
	ctx, kube, sip, suffix := apiFixture(t, 2*time.Minute)
	node, nsName := "cni-node-dup-"+suffix, "cni-dup-"+suffix
	createIPRange(ctx, t, sip, "cni-dup-"+suffix, jkev1.IPRangeSpec{CIDR: "10.159.0.0/24", Node: node})
	createNamespace(ctx, t, kube, nsName)
	for _, s := range []struct{ name, ip string }{{"first", "10.159.0.5"}, {"second", "10.159.0.5"}, {"good", "10.159.0.6"}} {
		if _, err := sip.JkeV1().StaticIPs(nsName).Create(ctx, &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Name: s.name},
			Spec: jkev1.StaticIPSpec{Pod: s.name, Node: node, IP: s.ip}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1100 * time.Millisecond) // creationTimestamp has a resolution of one second
	}
	dir := t.TempDir()
	var log syncBuffer
	a := startedAgent(ctx, t, Config{NodeName: node, CNIBinDir: filepath.Join(dir, "bin"), CNIConfDir: filepath.Join(dir, "net.d"), DataDir: dir}, kube, sip, &log)
	testsupport.Eventually(context.Background(), t, 10*time.Second, "the agent's cache holds the three StaticIPs", testsupport.True(func() bool {
		return len(staticIPsIn(a, nsName)) == 3
	}))
	if err := a.SyncOnce(ctx); err != nil {
		t.Fatalf("SyncOnce: %v", err)
	}
	_, reserved := dbState(t, a.DBPath())
	if reserved["10.159.0.6"] != nsName+"/good" || reserved["10.159.0.5"] != nsName+"/first" || len(reserved) != 2 {
		t.Fatalf("reservations %v, want 10.159.0.5 for first and 10.159.0.6 for good\nlog:\n%s", reserved, log.String())
	}
	for _, name := range []string{"first", "second"} {
		testsupport.Eventually(context.Background(), t, 20*time.Second, "a Warning Event on StaticIP "+name+" naming the other record", testsupport.True(func() bool {
			evs, err := kube.CoreV1().Events(nsName).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range evs.Items {
				if e.Type == corev1.EventTypeWarning && e.Reason == "DuplicateIP" && e.InvolvedObject.Kind == "StaticIP" &&
					strings.Contains(e.Message, "10.159.0.5") {
					return true
				}
			}
			return false
		}))
	}
}

// An IPRange overlapping an older one is left out of the owning node's conflist and database
// and reported (condition Synced=False reason Overlaps, Warning Event); the node keeps
// serving from its other ranges.
func TestOverlappingIPRangeIsLeftOutAndReported(t *testing.T) {
	ctx, kube, sip, suffix := apiFixture(t, 2*time.Minute)
	node := "cni-node-ovl-" + suffix
	good, bad := "cni-ovl-good-"+suffix, "cni-ovl-bad-"+suffix
	createIPRange(ctx, t, sip, good, jkev1.IPRangeSpec{CIDR: "10.160.0.0/24", Node: node})
	time.Sleep(1100 * time.Millisecond)
	createIPRange(ctx, t, sip, bad, jkev1.IPRangeSpec{CIDR: "10.160.0.128/25", Node: node})
	dir := t.TempDir()
	var log syncBuffer
	a := startedAgent(ctx, t, Config{NodeName: node, CNIBinDir: filepath.Join(dir, "bin"), CNIConfDir: filepath.Join(dir, "net.d"), DataDir: dir}, kube, sip, &log)
	err := a.SyncOnce(ctx)
	if err != nil {
		t.Fatalf("SyncOnce: %v\nlog:\n%s", err, log.String())
	}
	conf, err := os.ReadFile(filepath.Join(dir, "net.d", "10-staticip.conflist"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(conf), "10.160.0.0/24") || strings.Contains(string(conf), "10.160.0.128/25") {
		t.Fatalf("conflist:\n%s", conf)
	}
	db, err := ipam.Open(ipam.Options{Path: a.DBPath()})
	if err != nil {
		t.Fatal(err)
	}
	rs, _ := db.Ranges()
	db.Close()
	if len(rs) != 1 || rs[0].Subnet != netip.MustParsePrefix("10.160.0.0/24") {
		t.Fatalf("database ranges %v", rs)
	}
	testsupport.Eventually(context.Background(), t, 20*time.Second, "Synced=False/Overlaps on the newer IPRange and a Warning Event", testsupport.True(func() bool {
		r, err := sip.JkeV1().IPRanges().Get(ctx, bad, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cond := meta.FindStatusCondition(r.Status.Conditions, ConditionSynced)
		if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != "Overlaps" || !strings.Contains(cond.Message, good) {
			return false
		}
		evs, err := kube.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + bad})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs.Items {
			if e.Type == corev1.EventTypeWarning && e.Reason == "Overlaps" {
				return true
			}
		}
		return false
	}))
	r, _ := sip.JkeV1().IPRanges().Get(ctx, good, metav1.GetOptions{})
	if cond := meta.FindStatusCondition(r.Status.Conditions, ConditionSynced); cond == nil || cond.Status != metav1.ConditionTrue {
		t.Fatalf("the good IPRange's conditions: %+v", r.Status.Conditions)
	}
}

// cutProxy forwards TCP connections to target until Cut: then it refuses new ones and drops
// the open ones, as a partitioned node sees its API server.
type cutProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	cut   bool
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln}
	t.Cleanup(p.Cut)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			if p.cut {
				c.Close()
				up.Close()
				p.mu.Unlock()
				return
			}
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { io.Copy(up, c); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
	return p
}

func (p *cutProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	p.ln.Close()
	for _, c := range p.conns {
		c.Close()
	}
}

func probe(h http.Handler, path string) int {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
	return w.Code
}

// A node cut off from the API server stays live: an agent started offline answers /healthz
// (it does not block waiting for its caches); an agent that loses the API server mid-run keeps
// /healthz up while its status writes fail (readiness reports them), leaves the conflist in
// place and never keeps the plugin from its database.
func TestAgentStaysLiveWithoutTheAPIServer(t *testing.T) {
	ctx, kube, sip, suffix := apiFixture(t, 2*time.Minute)
	node, nsName := "cni-node-off-"+suffix, "cni-off-"+suffix
	createNamespace(ctx, t, kube, nsName)
	createIPRange(ctx, t, sip, "cni-off-"+suffix, jkev1.IPRangeSpec{CIDR: "10.161.0.0/24", Node: node})
	const maxAge = 2 * time.Second

	run := func(t *testing.T, a *Agent) {
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { a.Run(runCtx, 300*time.Millisecond, 50*time.Millisecond); close(done) }()
		t.Cleanup(func() { stop(); <-done })
	}

	t.Run("started offline", func(t *testing.T) {
		unreachable := &rest.Config{Host: "https://127.0.0.1:1", Timeout: time.Second}
		dir := t.TempDir()
		a := New(Config{NodeName: node, CNIBinDir: filepath.Join(dir, "bin"), CNIConfDir: filepath.Join(dir, "net.d"), DataDir: dir},
			kubernetes.NewForConfigOrDie(unreachable), versioned.NewForConfigOrDie(unreachable), io.Discard)
		run(t, a)
		h := serving.Handler(a.Endpoints(maxAge))
		testsupport.Eventually(context.Background(), t, 20*time.Second, "/healthz answers 200 while the API server is unreachable", testsupport.True(func() bool { return probe(h, "/healthz") == http.StatusOK }))
		if code := probe(h, "/readyz"); code == http.StatusOK {
			t.Fatalf("/readyz %d without ever reaching the API server", code)
		}
	})

	t.Run("cut off mid-run", func(t *testing.T) {
		env := testenv.Get(t)
		u, err := url.Parse(env.Config.Host)
		if err != nil {
			t.Fatal(err)
		}
		proxy := newCutProxy(t, u.Host)
		cfg := rest.CopyConfig(env.Config)
		cfg.Host = "https://" + proxy.ln.Addr().String()
		cfg.Timeout = 2 * time.Second
		dir := t.TempDir()
		var log syncBuffer
		a := New(Config{NodeName: node, CNIBinDir: filepath.Join(dir, "bin"), CNIConfDir: filepath.Join(dir, "net.d"), DataDir: dir},
			kubernetes.NewForConfigOrDie(cfg), versioned.NewForConfigOrDie(cfg), &log)
		pod, err := kube.CoreV1().Pods(nsName).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "offline"},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		run(t, a)
		h := serving.Handler(a.Endpoints(maxAge))
		testsupport.Eventually(context.Background(), t, 30*time.Second, "a full sync", testsupport.True(func() bool { return a.syncsOK.Load() > 0 }))
		confPath := filepath.Join(dir, "net.d", "10-staticip.conflist")
		if _, err := os.Stat(confPath); err != nil {
			t.Fatal(err)
		}
		proxy.Cut()
		// A pod started just before the API server went away (the plugin's ADD): the counts
		// change and the status write that follows fails.
		allocateAt(t, a.DBPath(), time.Now(), "c-offline", ipam.PodRef{Namespace: nsName, Name: "offline", UID: string(pod.UID)})
		failedBefore := a.syncsFailed.Load()
		testsupport.Eventually(context.Background(), t, 30*time.Second, "three passes that fail to write status", testsupport.True(func() bool { return a.syncsFailed.Load() >= failedBefore+3 }))
		time.Sleep(maxAge + time.Second)
		if code := probe(h, "/healthz"); code != http.StatusOK {
			t.Fatalf("/healthz %d while only the API server is away (the liveness probe would restart the agent)\nlog:\n%s", code, log.String())
		}
		if code := probe(h, "/readyz"); code == http.StatusOK {
			t.Fatalf("/readyz 200 while status writes fail")
		}
		if _, err := os.Stat(confPath); err != nil {
			t.Fatalf("the conflist went away offline: %v", err)
		}
		allocs, _ := dbState(t, a.DBPath()) // the plugin still gets its database
		if strings.Join(allocs, ",") != "c-offline" {
			t.Fatalf("allocations %v", allocs)
		}
	})
}

func everything() labels.Selector { return labels.Everything() }

// A corrupt database is rebuilt before anything allocates again: the file is moved aside (not
// deleted), the ranges and reservations come from the API, and every IP the host routes to
// one of the plugin's veths is imported for the pod that holds it, so no running pod's IP is
// handed out again.
func TestCorruptDatabaseIsRebuiltFromTheHost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	ctx, kube, sip, suffix := apiFixture(t, 2*time.Minute)
	node, nsName := "cni-node-rb-"+suffix, "cni-rb-"+suffix
	createIPRange(ctx, t, sip, "cni-rb-"+suffix, jkev1.IPRangeSpec{CIDR: "10.162.0.0/24", Node: node})
	createNamespace(ctx, t, kube, nsName)
	if _, err := sip.JkeV1().StaticIPs(nsName).Create(ctx, &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Name: "db-0"},
		Spec: jkev1.StaticIPSpec{Pod: "db-0", Node: node, IP: "10.162.0.20"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := kube.CoreV1().Pods(nsName).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status.PodIP, pod.Status.PodIPs = "10.162.0.7", []corev1.PodIP{{IP: "10.162.0.7"}}
	pod, err = kube.CoreV1().Pods(nsName).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// On the host: the running pod's veth and /32 route, as the plugin left them.
	host := nodeNetns(t, "rb", "192.168.80.1/24")
	veth := plugin.HostVethName("c-web", "eth0")
	if err := host.Do(func(ns.NetNS) error {
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: veth}, PeerName: "cni-rbpeer"}); err != nil {
			return err
		}
		l, err := netlink.LinkByName(veth)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return err
		}
		return netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: &net.IPNet{IP: net.ParseIP("10.162.0.7").To4(), Mask: net.CIDRMask(32, 32)}, Scope: netlink.SCOPE_LINK})
	}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var log syncBuffer
	a := startedAgent(ctx, t, Config{NodeName: node, CNIBinDir: filepath.Join(dir, "bin"), CNIConfDir: filepath.Join(dir, "net.d"), DataDir: dir}, kube, sip, &log)
	testsupport.Eventually(context.Background(), t, 10*time.Second, "the agent's cache holds the pod with its IP", testsupport.True(func() bool {
		p, _ := a.view.pods.Pods(nsName).Get("web")
		return p != nil && p.ResourceVersion == pod.ResourceVersion
	}))
	dbPath := a.DBPath()
	if err := os.MkdirAll(filepath.Dir(dbPath), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dbPath, []byte(strings.Repeat("not a bbolt file ", 512)), 0o600); err != nil {
		t.Fatal(err)
	}
	err = host.Do(func(ns.NetNS) error { return a.SyncOnce(ctx) })
	db, openErr := ipam.Open(ipam.Options{Path: dbPath, OpenTimeout: 30 * time.Second})
	if openErr != nil {
		t.Fatalf("after a pass (error %v) the database does not open: %v\nlog:\n%s", err, openErr, log.String())
	}
	defer db.Close()
	allocs, _ := db.Allocations()
	if len(allocs) != 1 || allocs[0].IP.String() != "10.162.0.7" || allocs[0].Pod.Key() != nsName+"/web" {
		t.Fatalf("allocations after the rebuild: %+v (pass error %v)\nlog:\n%s", allocs, err, log.String())
	}
	// What the plugin's ADD of another pod can get now: neither the running pod's IP nor the
	// StaticIP's.
	for _, ip := range []string{"10.162.0.7", "10.162.0.20"} {
		_, _, aerr := db.Allocate(ipam.AllocateRequest{Attachment: ipam.Attachment{ContainerID: "c-other-" + ip, IfName: "eth0"},
			Pod: ipam.PodRef{Namespace: nsName, Name: "other"}, IP: netip.MustParseAddr(ip)})
		if !errors.Is(aerr, ipam.ErrInUse) {
			t.Fatalf("another pod asking for %s: %v, want ErrInUse", ip, aerr)
		}
	}
	moved, _ := filepath.Glob(dbPath + ".corrupt-*")
	if len(moved) != 1 {
		t.Fatalf("the corrupt file was not kept aside: %v", moved)
	}
}

// An IPRange shrunk while a pod holds an address outside the new CIDR breaks nothing: the old
// CIDR drains in the database (the pod keeps its IP), the new one is not served until it has
// drained, and the IPRange says why (Synced=False, ResizedWhileInUse).
func TestIPRangeResizedWhileInUse(t *testing.T) {
	ctx, kube, sip, suffix := apiFixture(t, 2*time.Minute)
	node, nsName, name := "cni-node-rs-"+suffix, "cni-rs-"+suffix, "cni-rs-"+suffix
	createIPRange(ctx, t, sip, name, jkev1.IPRangeSpec{CIDR: "10.163.0.0/24", Node: node})
	createNamespace(ctx, t, kube, nsName)
	pod, err := kube.CoreV1().Pods(nsName).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var log syncBuffer
	a := startedAgent(ctx, t, Config{NodeName: node, CNIBinDir: filepath.Join(dir, "bin"), CNIConfDir: filepath.Join(dir, "net.d"), DataDir: dir}, kube, sip, &log)
	if err := a.SyncOnce(ctx); err != nil {
		t.Fatal(err)
	}
	db, err := ipam.Open(ipam.Options{Path: a.DBPath()})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.Allocate(ipam.AllocateRequest{Attachment: ipam.Attachment{ContainerID: "c-p", IfName: "eth0"},
		Pod: ipam.PodRef{Namespace: nsName, Name: "p", UID: string(pod.UID)}, IP: netip.MustParseAddr("10.163.0.200")}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	r, err := sip.JkeV1().IPRanges().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r.Spec.CIDR = "10.163.0.0/25"
	if _, err := sip.JkeV1().IPRanges().Update(ctx, r, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(context.Background(), t, 10*time.Second, "the agent's cache holds the new CIDR", testsupport.True(func() bool {
		r, _ := a.view.ranges.Get(name)
		return r != nil && r.Spec.CIDR == "10.163.0.0/25"
	}))
	if err := a.SyncOnce(ctx); err != nil {
		t.Fatalf("SyncOnce after the resize: %v\nlog:\n%s", err, log.String())
	}
	allocs, _ := dbState(t, a.DBPath())
	if strings.Join(allocs, ",") != "c-p" {
		t.Fatalf("allocations %v: the pod lost its IP", allocs)
	}
	conf, _ := os.ReadFile(filepath.Join(dir, "net.d", "10-staticip.conflist"))
	if strings.Contains(string(conf), "10.163.0.0/25") {
		t.Fatalf("the resized range is served while the old CIDR drains:\n%s", conf)
	}
	testsupport.Eventually(context.Background(), t, 20*time.Second, "Synced=False/ResizedWhileInUse on the IPRange", testsupport.True(func() bool {
		r, err := sip.JkeV1().IPRanges().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c := meta.FindStatusCondition(r.Status.Conditions, ConditionSynced)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == ReasonResizedWhileUsed && strings.Contains(c.Message, "10.163.0.0/24")
	}))
}

// staticIPsIn are the StaticIPs of namespace ns in the agent's caches.
func staticIPsIn(a *Agent, ns string) []*jkev1.StaticIP {
	var out []*jkev1.StaticIP
	for _, s := range a.view.staticIPs.list() {
		if s.Namespace == ns {
			out = append(out, s)
		}
	}
	return out
}
