package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"

	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/tools/estsbench/bench"
)

// Round is one measured failure.
type Round struct {
	N int
	// ESTS and Native are from the out-of-service taint to every pod of the workload Running
	// again: the static-IP pods on the spare with their old IPs, the native pods anywhere.
	ESTS, Native time.Duration
	// NotReady is from the power-off to the Node turning NotReady (before the taint).
	NotReady time.Duration
	// PodsGone is from the taint to the last pod object of the failed node gone (pod GC
	// force-deletes them): both workloads wait for it.
	PodsGone time.Duration
	// Phases: when (after the taint) the NodeFailover record was first seen at each phase.
	Phases map[jkev1alpha1.NodeFailoverPhase]time.Duration
	// Events: pod events of the whole cluster checked during the round (from the pods Ready to
	// the end of the restore); Duplicates: IPs seen held by two pods at one of them.
	Events     int
	Duplicates []string
	// Routes: route convergence on the datacenter router (routes.go), when the cluster has one.
	Routes RouteTimes
}

// phaseColumns are the record's phases the table shows (the rest pass within a sync).
var phaseColumns = []jkev1alpha1.NodeFailoverPhase{jkev1alpha1.FailoverDetected, jkev1alpha1.FailoverRangesMoved,
	jkev1alpha1.FailoverStaticIPsRebound}

func setOf(p *corev1.Pod) string { return p.Labels[setLabel] }

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func live(p *corev1.Pod) bool { return p.DeletionTimestamp == nil }

// AllReadyOn: n live pods, every one Ready on node with an IP.
func AllReadyOn(pods []*corev1.Pod, node string, n int) bool {
	count := 0
	for _, p := range pods {
		if !live(p) {
			continue
		}
		if p.Spec.NodeName != node || !podReady(p) || p.Status.PodIP == "" {
			return false
		}
		count++
	}
	return count == n
}

// StaticIPs maps the pods of set to their IPs.
func StaticIPs(pods []*corev1.Pod, set string) map[string]string {
	out := map[string]string{}
	for _, p := range pods {
		if setOf(p) == set && live(p) {
			out[p.Name] = p.Status.PodIP
		}
	}
	return out
}

// MovedWithIPs: every pod of ips runs (phase Running, not deleting) on target with its IP.
func MovedWithIPs(pods []*corev1.Pod, ips map[string]string, target string) bool {
	ok := 0
	for _, p := range pods {
		if want, in := ips[p.Name]; in && live(p) && p.Spec.NodeName == target && p.Status.Phase == corev1.PodRunning && p.Status.PodIP == want {
			ok++
		}
	}
	return ok == len(ips)
}

// OldPodsGone: no pod object of before is listed any more.
func OldPodsGone(pods, before []*corev1.Pod) bool {
	old := map[string]bool{}
	for _, p := range before {
		old[string(p.UID)] = true
	}
	for _, p := range pods {
		if old[string(p.UID)] {
			return false
		}
	}
	return true
}

// NativeBack: replicas live pods of set run (phase Running), none of them one of before (a new
// pod object) and none on the failed node.
func NativeBack(pods, before []*corev1.Pod, set, failed string, replicas int) bool {
	old := map[string]bool{}
	for _, p := range before {
		old[string(p.UID)] = true
	}
	ok := 0
	for _, p := range pods {
		if setOf(p) != set || !live(p) {
			continue
		}
		if old[string(p.UID)] || p.Spec.NodeName == failed || p.Status.Phase != corev1.PodRunning {
			return false
		}
		ok++
	}
	return ok == replicas
}

// PrintTable prints every round, the medians and the ratio native / ests.
func PrintTable(w io.Writer, rounds []Round) {
	if len(rounds) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	cols := []string{"round", "ests (s)", "native (s)", "native/ests", "stop→NotReady (s)", "old pods gone (s)", "pod events", "IPs held twice"}
	for _, p := range phaseColumns {
		cols = append(cols, "record "+string(p)+" (s)")
	}
	fmt.Fprintln(tw, strings.Join(cols, "\t")+"\t")
	var ests, native, notReady, gone []time.Duration
	phases := map[jkev1alpha1.NodeFailoverPhase][]time.Duration{}
	for _, r := range rounds {
		ests, native, notReady, gone = append(ests, r.ESTS), append(native, r.Native), append(notReady, r.NotReady), append(gone, r.PodsGone)
		row := []string{fmt.Sprint(r.N), secs(r.ESTS), secs(r.Native), fmt.Sprintf("%.2f", bench.Ratio(r.Native, r.ESTS)), secs(r.NotReady), secs(r.PodsGone),
			fmt.Sprint(r.Events), fmt.Sprint(len(r.Duplicates))}
		for _, p := range phaseColumns {
			d, ok := r.Phases[p]
			if ok {
				phases[p] = append(phases[p], d)
				row = append(row, secs(d))
			} else {
				row = append(row, "-")
			}
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	me, mn := bench.Median(ests), bench.Median(native)
	row := []string{"median", secs(me), secs(mn), fmt.Sprintf("%.2f", bench.Ratio(mn, me)), secs(bench.Median(notReady)), secs(bench.Median(gone)), "", ""}
	for _, p := range phaseColumns {
		if len(phases[p]) == 0 {
			row = append(row, "-")
		} else {
			row = append(row, secs(bench.Median(phases[p])))
		}
	}
	fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	_ = tw.Flush()
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1f", d.Seconds()) }
