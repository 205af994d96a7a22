package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/tools/localcluster/cluster"
)

func TestBestViaAll(t *testing.T) {
	table, err := cluster.ParseBGPTable([]byte(`{"routes":{
		"10.244.1.0/24":[{"valid":true,"bestpath":true,"nexthops":[{"ip":"172.30.0.14","used":true}]}],
		"10.244.2.0/24":[{"valid":true,"bestpath":true,"nexthops":[{"ip":"172.30.0.11","used":true}]},{"valid":true,"nexthops":[{"ip":"172.30.0.14"}]}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cidrs []string
		via   string
		want  bool
	}{
		{[]string{"10.244.1.0/24"}, "172.30.0.14", true},
		{[]string{"10.244.1.0/24", "10.244.2.0/24"}, "172.30.0.14", false}, // the second's best is still the old node
		{[]string{"10.244.3.0/24"}, "172.30.0.14", false},                  // not in the table
		{nil, "172.30.0.14", false},
	} {
		if got := BestViaAll(table, tc.cidrs, tc.via); got != tc.want {
			t.Errorf("BestViaAll(%v, %s) = %t, want %t", tc.cidrs, tc.via, got, tc.want)
		}
	}
}

func TestServedOn(t *testing.T) {
	rng := func(name, node string, gen, observed int64, synced metav1.ConditionStatus) jkev1.IPRange {
		r := jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: name, Generation: gen}, Spec: jkev1.IPRangeSpec{Node: node}}
		r.Status.ObservedGeneration = observed
		r.Status.Conditions = []metav1.Condition{{Type: "Synced", Status: synced, ObservedGeneration: observed}}
		return r
	}
	names := map[string]bool{"a": true}
	for _, tc := range []struct {
		name   string
		ranges []jkev1.IPRange
		want   bool
	}{
		{"served on the spare", []jkev1.IPRange{rng("a", "spare", 3, 3, metav1.ConditionTrue), rng("b", "other", 1, 1, metav1.ConditionTrue)}, true},
		{"moved, not yet synced at the new generation", []jkev1.IPRange{rng("a", "spare", 3, 2, metav1.ConditionTrue)}, false},
		{"still on the failed node", []jkev1.IPRange{rng("a", "failed", 2, 2, metav1.ConditionTrue)}, false},
		{"synced false", []jkev1.IPRange{rng("a", "spare", 3, 3, metav1.ConditionFalse)}, false},
		{"gone", nil, false},
	} {
		if got := ServedOn(tc.ranges, names, "spare"); got != tc.want {
			t.Errorf("%s: ServedOn = %t, want %t", tc.name, got, tc.want)
		}
	}
}

func TestPrintRouteTable(t *testing.T) {
	s := time.Second
	rounds := []Round{
		{N: 1, Routes: RouteTimes{Served: 10 * s, FRRBest: 10*s + 200*time.Millisecond, PodRunning: 11 * s, OutsideAnswer: 11*s + 100*time.Millisecond}},
		{N: 2, Routes: RouteTimes{Served: 12 * s, FRRBest: 12*s - 50*time.Millisecond, PodRunning: 12 * s, OutsideAnswer: 12*s + 300*time.Millisecond}},
		{N: 3, Routes: RouteTimes{Served: 9 * s}}, // incomplete: shown, not counted
	}
	var b bytes.Buffer
	PrintRouteTable(&b, rounds)
	out := b.String()
	for _, want := range []string{"-50", "1100", "300", "median", "p90"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if r := rounds[1].Routes; r.FRRAfterServed() != -50*time.Millisecond || r.OutsideAfterServed() != 300*time.Millisecond || r.OutsideAfterPod() != 300*time.Millisecond {
		t.Errorf("round 2 figures: %s %s %s", r.FRRAfterServed(), r.OutsideAfterServed(), r.OutsideAfterPod())
	}
	if rounds[2].Routes.Complete() {
		t.Error("an incomplete round counted as complete")
	}
}

// TestOutsideDialer: requests made through the dialer leave from inside the namespace (a real
// netns with a server only reachable there).
func TestOutsideDialer(t *testing.T) {
	ns := fmt.Sprintf("fobench-%d", time.Now().UnixNano()%100000)
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Skipf("SKIP: cannot create a network namespace here: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	if out, err := exec.Command("ip", "-n", ns, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A server inside the namespace, on its loopback: the host's loopback has nothing there.
	// Its socket is made on a thread inside the namespace (and stays there); it is served
	// from anywhere.
	lc := make(chan net.Listener, 1)
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		f, err := os.Open("/run/netns/" + ns)
		if err == nil {
			err = unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
			f.Close()
		}
		var l net.Listener
		if err == nil {
			l, err = net.Listen("tcp", "127.0.0.9:8080")
		}
		if err != nil {
			errc <- err
			return
		}
		lc <- l
		<-ctx.Done()
	}()
	var l net.Listener
	select {
	case l = <-lc:
	case err := <-errc:
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		_ = http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`{"hostname":"inside"}`)) }))
	}()
	d, err := newOutsideDialer(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	var ok bool
	for i := 0; i < 50 && !ok; i++ {
		ok = answeredBy(d, "127.0.0.9", "inside")
		time.Sleep(100 * time.Millisecond)
	}
	if !ok {
		t.Fatal("no answer through the dialer from the server inside the namespace")
	}
	if c, err := net.DialTimeout("tcp", "127.0.0.9:8080", 300*time.Millisecond); err == nil {
		c.Close()
		t.Error("the host reached the namespace's server: the test proves nothing")
	}
}
