package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/tools/estsbench/bench"
	"github.com/staticip/staticip/tools/localcluster/cluster"
)

// Route convergence after a failover (issue 36, "Measure"): on the local cluster's datacenter
// router (FRR, tools/localcluster), from the moment the spare serves the moved range (its agent
// reported the IPRange Synced at the new owner generation) to
//
//   - FRR's best path for the range via the spare (`vtysh -c 'show bgp ipv4 unicast json'`,
//     every 50 ms), and
//   - the outside client's first successful request to a moved static IP (from the router's
//     outside namespace, routed only by what FRR learned; every 100 ms, 300 ms timeout),
//
// medians and p90 over the rounds. A request can only succeed once the pod runs on the spare,
// so the table also shows the outside's first answer after the pod turned Running there.

// RouteTimes are one round's route-convergence instants, each from the fence (0: not seen).
type RouteTimes struct {
	// Served: every moved range Synced on the spare at its new generation.
	Served time.Duration
	// FRRBest: FRR's best path for every moved range via the spare.
	FRRBest time.Duration
	// OutsideAnswer: the first answer from a moved static IP, by a pod on the spare, to a
	// request from the outside namespace.
	OutsideAnswer time.Duration
	// PodRunning: the first moved pod Running on the spare with its IP (MovedWithIPs's view of
	// one pod), for the outside's share that is pod start, not routing.
	PodRunning time.Duration
}

// FRRAfterServed and OutsideAfterServed are the two figures (negative: before the
// range's status said so — the agent announces as soon as it serves, and writes the status
// after).
func (t RouteTimes) FRRAfterServed() time.Duration     { return t.FRRBest - t.Served }
func (t RouteTimes) OutsideAfterServed() time.Duration { return t.OutsideAnswer - t.Served }

// OutsideAfterPod is the outside's first answer after the pod ran on the spare.
func (t RouteTimes) OutsideAfterPod() time.Duration { return t.OutsideAnswer - t.PodRunning }

// Complete: every instant was seen.
func (t RouteTimes) Complete() bool {
	return t.Served > 0 && t.FRRBest > 0 && t.OutsideAnswer > 0 && t.PodRunning > 0
}

// BestViaAll: FRR's best path of every cidr goes via nextHop.
func BestViaAll(table cluster.BGPTable, cidrs []string, nextHop string) bool {
	for _, c := range cidrs {
		if table.BestNextHop(c) != nextHop {
			return false
		}
	}
	return len(cidrs) > 0
}

// ServedOn: every named range is assigned to node and Served at its generation.
func ServedOn(ranges []jkev1.IPRange, names map[string]bool, node string) bool {
	n := 0
	for i := range ranges {
		r := &ranges[i]
		if !names[r.Name] {
			continue
		}
		if r.Spec.Node != node || !Served(r) {
			return false
		}
		n++
	}
	return n == len(names) && n > 0
}

// routeTracker samples the three instants concurrently from the fence until stopped.
type routeTracker struct {
	mu     sync.Mutex
	times  RouteTimes
	fenced time.Time
}

func (t *routeTracker) set(field *time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if *field == 0 {
		*field = time.Since(t.fenced)
	}
}

func (t *routeTracker) result() RouteTimes {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.times
}

// trackRoutes starts the samplers: moved are the failed node's ranges, ips the static pods'
// IPs (pod name -> IP), spare and spareIP the node that takes them over.
func (r *Runner) trackRoutes(ctx context.Context, router cluster.Router, dialer *outsideDialer, fenced time.Time, moved []jkev1.IPRange, ips map[string]string, spare, spareIP string) *routeTracker {
	t := &routeTracker{fenced: fenced}
	names := map[string]bool{}
	var cidrs []string
	for _, m := range moved {
		names[m.Name] = true
		cidrs = append(cidrs, m.Spec.CIDR)
	}
	every := func(d time.Duration, done func() bool) {
		go func() {
			for ctx.Err() == nil && !done() {
				time.Sleep(d)
			}
		}()
	}
	every(100*time.Millisecond, func() bool {
		list, err := r.Staticip.JkeV1().IPRanges().List(ctx, metav1.ListOptions{})
		if err == nil && ServedOn(list.Items, names, spare) {
			t.set(&t.times.Served)
			return true
		}
		return false
	})
	every(50*time.Millisecond, func() bool {
		table, err := router.BGPTable()
		if err == nil && BestViaAll(table, cidrs, spareIP) {
			t.set(&t.times.FRRBest)
			return true
		}
		return false
	})
	var target, pod string
	for p, ip := range ips {
		target, pod = ip, p
		break
	}
	every(100*time.Millisecond, func() bool {
		p, err := r.Kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + pod + ",spec.nodeName=" + spare})
		if err == nil {
			for _, x := range p.Items {
				if x.Status.Phase == "Running" && x.Status.PodIP == target {
					t.set(&t.times.PodRunning)
					return true
				}
			}
		}
		return false
	})
	every(100*time.Millisecond, func() bool {
		if answeredBy(dialer, target, pod) {
			t.set(&t.times.OutsideAnswer)
			return true
		}
		return false
	})
	return t
}

// outsideDialer dials TCP from inside the network namespace netns: one goroutine, locked to its
// OS thread, enters the namespace and creates every socket there (a socket stays in the
// namespace it was created in). No process per request, so a request's time is the network's.
type outsideDialer struct{ reqs chan dialReq }

type dialReq struct {
	addr    string
	timeout time.Duration
	reply   chan dialRes
}

type dialRes struct {
	conn net.Conn
	err  error
}

func newOutsideDialer(ctx context.Context, netns string) (*outsideDialer, error) {
	d := &outsideDialer{reqs: make(chan dialReq)}
	ready := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends with the goroutine instead of going back to the
		// runtime in the wrong namespace.
		runtime.LockOSThread()
		f, err := os.Open("/run/netns/" + netns)
		if err != nil {
			ready <- err
			return
		}
		err = unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
		f.Close()
		ready <- err
		if err != nil {
			return
		}
		for {
			select {
			case <-ctx.Done():
				return
			case q := <-d.reqs:
				c, err := net.DialTimeout("tcp", q.addr, q.timeout)
				q.reply <- dialRes{c, err}
			}
		}
	}()
	if err := <-ready; err != nil {
		return nil, fmt.Errorf("into network namespace %s: %w", netns, err)
	}
	return d, nil
}

// get asks http://addr/ and returns the body, within timeout.
func (d *outsideDialer) get(addr string, timeout time.Duration) ([]byte, error) {
	q := dialReq{addr: addr, timeout: timeout, reply: make(chan dialRes, 1)}
	d.reqs <- q
	res := <-q.reply
	if res.err != nil {
		return nil, res.err
	}
	defer res.conn.Close()
	_ = res.conn.SetDeadline(time.Now().Add(timeout))
	if _, err := fmt.Fprintf(res.conn, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", addr); err != nil {
		return nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(res.conn), nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// answeredBy: the testserver at ip:8080 answers a request from the outside, as pod (its
// hostname; the benchmark's pods carry no node name, and the failed node that ran the pod's
// predecessor is powered off, so an answer from pod comes from the spare).
func answeredBy(d *outsideDialer, ip, pod string) bool {
	body, err := d.get(net.JoinHostPort(ip, "8080"), 300*time.Millisecond)
	if err != nil {
		return false
	}
	var reply struct {
		Hostname string `json:"hostname"`
	}
	return json.Unmarshal(body, &reply) == nil && reply.Hostname == pod
}

// nodeIP is the node's InternalIP.
func (r *Runner) nodeIP(ctx context.Context, node string) (string, error) {
	n, err := r.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	for _, a := range n.Status.Addresses {
		if a.Type == "InternalIP" {
			if ip, err := netip.ParseAddr(a.Address); err == nil && ip.Is4() {
				return a.Address, nil
			}
		}
	}
	return "", fmt.Errorf("node %s has no IPv4 InternalIP", node)
}

// PrintRouteTable prints every round's route convergence and the median and p90 of each figure.
func PrintRouteTable(w io.Writer, rounds []Round) {
	var frr, outside, afterPod []time.Duration
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "round\tserved (s after fence)\tFRR best via spare − served (ms)\toutside answer − served (ms)\toutside answer − pod Running (ms)\t")
	for _, r := range rounds {
		if !r.Routes.Complete() {
			fmt.Fprintf(tw, "%d\t%s\t-\t-\t-\t\n", r.N, secs(r.Routes.Served))
			continue
		}
		frr, outside, afterPod = append(frr, r.Routes.FRRAfterServed()), append(outside, r.Routes.OutsideAfterServed()), append(afterPod, r.Routes.OutsideAfterPod())
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t\n", r.N, secs(r.Routes.Served), ms(r.Routes.FRRAfterServed()), ms(r.Routes.OutsideAfterServed()), ms(r.Routes.OutsideAfterPod()))
	}
	if len(frr) > 0 {
		fmt.Fprintf(tw, "median\t\t%s\t%s\t%s\t\n", ms(bench.Median(frr)), ms(bench.Median(outside)), ms(bench.Median(afterPod)))
		fmt.Fprintf(tw, "p90\t\t%s\t%s\t%s\t\n", ms(bench.Percentile(frr, 90)), ms(bench.Percentile(outside, 90)), ms(bench.Percentile(afterPod, 90)))
	}
	_ = tw.Flush()
}

func ms(d time.Duration) string { return fmt.Sprintf("%d", d.Milliseconds()) }
