package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/tools/benchstat"
	"github.com/staticip/staticip/tools/podwatch"
)

// RestartConfig says how to measure what a user feels when a static-IP pod is deleted.
type RestartConfig struct {
	// Count deletions of an EnhancedStatefulSet's static-IP pod, each followed by one plain
	// pod's creation; the two alternate, so both see the same load.
	Count int
	// Replicas of the static-IP EnhancedStatefulSet; deletions go round its ordinals.
	Replicas int
	Image    string
	Template TemplateOptions
	Timeout  time.Duration
	// Trace prints every watch event of each restarted pod (old and successor) with its time
	// from the delete call: where a slow deletion spent its time.
	Trace bool
	// Together deletes the static-IP pod and a native pod on the same node at the same moment
	// (else one after the other): both then wait for the same kubelet's next PLEG relist, the
	// largest and most random term of a restart, and the ratio measures what differs.
	Together bool
	// Jitter: each delete (and each plain pod's create) waits a random time in [0, Jitter)
	// first. The kubelet finishes a pod's termination only at its next PLEG relist (every
	// second, pkg/kubelet/pod_workers.go: "adds ~1s of latency"), so a deletion's time depends
	// on its phase against that clock; without jitter one step's timing set the next one's
	// phase (issue 30: the static-IP deletion always came ~0.2 s after the plain pod's
	// termination, i.e. after a relist, and always waited ~0.8 s for the next one).
	Jitter time.Duration
}

// RestartResult is one latency per deletion and per plain pod.
type RestartResult struct {
	// StaticIP: delete of a static-IP EnhancedStatefulSet pod → its successor (same name, new
	// UID) Running with the same IP. StatefulSet: the same for a native StatefulSet's pod
	// (no static IP: the peer a user would otherwise run; its successor may get any IP).
	// Plain: create of a pod without a controller → Running.
	StaticIP, StatefulSet, Plain []time.Duration
	// StaticIPGone, StatefulSetGone: the part of each restart from the delete call until the
	// old pod object is gone (the kubelet stopped the container and tore the sandbox down);
	// no successor of the same name can exist before.
	StaticIPGone, StatefulSetGone []time.Duration
	// StaticIPStopped, StatefulSetStopped: from the delete call until the watch first shows
	// the old pod with no container running (the kubelet's status write after it stopped
	// them); the rest of "gone" is the sandbox teardown (CNI DEL), the kubelet's cleanup and
	// its final delete.
	StaticIPStopped, StatefulSetStopped []time.Duration
}

// Percentile is the p-th percentile (nearest rank) of ds; 0 for none.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(p/100*float64(len(s))+0.999999) - 1
	return s[min(max(rank, 0), len(s)-1)]
}

// restartSet is the name of the static-IP EnhancedStatefulSet of the restart measurement;
// restartPeer the native StatefulSet's (the rollout benchmark's plain StatefulSet).
const (
	restartSet  = "ests-staticip"
	restartPeer = WorkloadStatefulSet
)

// MeasureRestart creates a static-IP EnhancedStatefulSet (staticip.jke.jdcloud.com/enable) and
// a native StatefulSet of the same template without static IPs, then cfg.Count times deletes
// one pod of each and times its successor to Running (the static-IP one with the same IP), and
// creates a plain pod of the same template and times it to Running. The three alternate, so
// all see the same load. It fails when a static-IP successor comes back with another IP.
func (r *Runner) MeasureRestart(ctx context.Context, cfg RestartConfig) (RestartResult, error) {
	var res RestartResult
	ns, cleanup, err := r.namespace(ctx, "")
	if err != nil {
		return res, err
	}
	defer cleanup()
	replicas := int32(cfg.Replicas)
	maxUnavailable := intstr.FromInt(1)
	cfg.Template.SpreadOverNodes = true
	tmpl := podTemplate(restartSet, cfg.Image, cfg.Template)
	set := &jkev1alpha1.EnhancedStatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: restartSet, Annotations: map[string]string{jkev1.AnnotationEnable: "true"}},
		Spec: jkev1alpha1.EnhancedStatefulSetSpec{
			Replicas:            &replicas,
			Selector:            &metav1.LabelSelector{MatchLabels: map[string]string{setLabel: restartSet}},
			Template:            tmpl,
			ServiceName:         ServiceName,
			PodManagementPolicy: appsv1.ParallelPodManagement,
			UpdateStrategy: jkev1alpha1.EnhancedStatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType,
				RollingUpdate: &jkev1alpha1.RollingUpdateEnhancedStatefulSetStrategy{MaxUnavailable: &maxUnavailable}},
		},
	}
	if _, err := r.Staticip.JkeV1alpha1().EnhancedStatefulSets(ns).Create(ctx, set, metav1.CreateOptions{}); err != nil {
		return res, err
	}
	// The peer: the rollout benchmark's plain StatefulSet (same template), Parallel like the set.
	peerOpts := cfg.Template
	peerOpts.PodManagement = appsv1.ParallelPodManagement
	peer := &statefulSet{client: r.Kube, namespace: ns, opts: peerOpts}
	if err := peer.Create(ctx, replicas, cfg.Image); err != nil {
		return res, err
	}
	running := func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && p.Status.PodIP != ""
	}
	for _, owner := range []string{restartSet, restartPeer} {
		for i := range cfg.Replicas {
			if _, err := r.waitPod(ctx, ns, fmt.Sprintf("%s-%d", owner, i), "", cfg.Timeout, func(p *corev1.Pod) (bool, error) { return running(p) && ready(p), nil }); err != nil {
				return res, fmt.Errorf("pod %s-%d: %w", owner, i, err)
			}
		}
	}
	r.Logf("restart: %d static-IP pods and %d StatefulSet pods Running and Ready", cfg.Replicas, cfg.Replicas)
	// restart deletes pod name and times its successor to Running (and the old object's
	// disappearance); sameIP: the successor must have the old pod's IP. iter numbers the trace.
	restart := func(iter int, name string, sameIP bool) (t restartTiming, err error) {
		old, err := r.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return t, err
		}
		start := time.Now()
		if err := r.Kube.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &old.UID}}); err != nil {
			return t, err
		}
		var goneAt, stoppedAt time.Time
		at, err := r.waitPodEvents(ctx, ns, name, old.ResourceVersion, cfg.Timeout, func(t time.Time, typ watch.EventType, p *corev1.Pod) {
			if cfg.Trace {
				r.Logf("  trace #%d %s +%4dms %-8s %s", iter, name, t.Sub(start).Milliseconds(), typ, podTrace(p, old.UID))
			}
			if p.UID != old.UID {
				return
			}
			if stoppedAt.IsZero() && (typ == watch.Deleted || noContainerRunning(p)) {
				stoppedAt = t
			}
			if typ == watch.Deleted && goneAt.IsZero() {
				goneAt = t
			}
		}, func(p *corev1.Pod) (bool, error) {
			if p.UID == old.UID || !running(p) {
				return false, nil
			}
			if sameIP && p.Status.PodIP != old.Status.PodIP {
				return false, fmt.Errorf("%s came back with IP %s, had %s", name, p.Status.PodIP, old.Status.PodIP)
			}
			return true, nil
		})
		if err != nil {
			return t, err
		}
		if goneAt.IsZero() { // the watch missed the deletion (compacted): count it as at the end
			goneAt = at
		}
		if stoppedAt.IsZero() {
			stoppedAt = goneAt
		}
		// Let the successor become Ready before the next measurement.
		if _, err := r.waitPod(ctx, ns, name, "", cfg.Timeout, func(p *corev1.Pod) (bool, error) { return p.UID != old.UID && ready(p), nil }); err != nil {
			return t, err
		}
		return restartTiming{stopped: stoppedAt.Sub(start), gone: goneAt.Sub(start), back: at.Sub(start), ip: old.Status.PodIP}, nil
	}
	for i := range cfg.Count {
		// A static-IP pod: delete, wait for its successor Running with the same IP; and a
		// native StatefulSet's pod the same way, without the IP check.
		name := fmt.Sprintf("%s-%d", restartSet, i%cfg.Replicas)
		peerName := fmt.Sprintf("%s-%d", restartPeer, i%cfg.Replicas)
		var static, native restartTiming
		var staticErr, nativeErr error
		if cfg.Together {
			// Both at the same moment, on the same node: both wait for the same kubelet's
			// next relist, so their difference is what differs between the two paths.
			peer, err := r.peerOnNode(ctx, ns, name, peerName, i)
			if err != nil {
				return res, err
			}
			peerName = peer
			if err := sleepJitter(ctx, cfg.Jitter); err != nil {
				return res, err
			}
			var wg sync.WaitGroup
			wg.Go(func() { static, staticErr = restart(i+1, name, true) })
			wg.Go(func() { native, nativeErr = restart(i+1, peerName, false) })
			wg.Wait()
		} else {
			// One after the other; which goes first alternates, so neither always follows
			// the same step.
			for _, first := range restartOrder(i) {
				if err := sleepJitter(ctx, cfg.Jitter); err != nil {
					return res, err
				}
				if first {
					static, staticErr = restart(i+1, name, true)
				} else {
					native, nativeErr = restart(i+1, peerName, false)
				}
				if staticErr != nil || nativeErr != nil {
					break
				}
			}
		}
		if staticErr != nil {
			return res, fmt.Errorf("deletion %d: %w", i+1, staticErr)
		}
		if nativeErr != nil {
			return res, fmt.Errorf("StatefulSet deletion %d: %w", i+1, nativeErr)
		}
		ip := static.ip
		res.StaticIP, res.StaticIPGone = append(res.StaticIP, static.back), append(res.StaticIPGone, static.gone)
		res.StaticIPStopped = append(res.StaticIPStopped, static.stopped)
		res.StatefulSet, res.StatefulSetGone = append(res.StatefulSet, native.back), append(res.StatefulSetGone, native.gone)
		res.StatefulSetStopped = append(res.StatefulSetStopped, native.stopped)

		// A plain pod of the same template: create, wait Running; then delete it and wait
		// until it is gone, so it does not load the next measurement.
		plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("plain-%d", i), Labels: map[string]string{setLabel: "plain"}}, Spec: *tmpl.Spec.DeepCopy()}
		plain.Spec.TopologySpreadConstraints = nil // the set's spread; a lone pod has none
		if err := sleepJitter(ctx, cfg.Jitter); err != nil {
			return res, err
		}
		start := time.Now()
		created, err := r.Kube.CoreV1().Pods(ns).Create(ctx, plain, metav1.CreateOptions{})
		if err != nil {
			return res, err
		}
		at, err := r.waitPod(ctx, ns, plain.Name, created.ResourceVersion, cfg.Timeout, func(p *corev1.Pod) (bool, error) { return running(p), nil })
		if err != nil {
			return res, fmt.Errorf("plain pod %d: %w", i+1, err)
		}
		res.Plain = append(res.Plain, at.Sub(start))
		if err := r.Kube.CoreV1().Pods(ns).Delete(ctx, plain.Name, metav1.DeleteOptions{}); err != nil {
			return res, err
		}
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, cfg.Timeout, true, func(context.Context) (bool, error) {
			_, err := r.Kube.CoreV1().Pods(ns).Get(ctx, plain.Name, metav1.GetOptions{})
			return err != nil, nil
		}); err != nil {
			return res, fmt.Errorf("plain pod %d did not go: %w", i+1, err)
		}
		r.Logf("restart %d/%d: static-IP pod %s back Running with IP %s after %s (gone after %s); StatefulSet pod %s after %s (gone after %s); plain pod Running after %s",
			i+1, cfg.Count, name, ip, res.StaticIP[i].Round(10*time.Millisecond), res.StaticIPGone[i].Round(10*time.Millisecond),
			peerName, res.StatefulSet[i].Round(10*time.Millisecond), res.StatefulSetGone[i].Round(10*time.Millisecond), res.Plain[i].Round(10*time.Millisecond))
	}
	return res, nil
}

// restartTiming is one pod's restart, from the delete call.
type restartTiming struct {
	stopped, gone, back time.Duration
	ip                  string
}

// peerOnNode names a native StatefulSet pod on the node of static-IP pod name (the i-th of
// the candidates there, so deletions rotate among them), for a restart at the same moment;
// without one it says so and returns fallback.
func (r *Runner) peerOnNode(ctx context.Context, ns, name, fallback string, i int) (string, error) {
	pod, err := r.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	peers, err := r.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: setLabel + "=" + restartPeer})
	if err != nil {
		return "", err
	}
	var here []string
	for _, p := range peers.Items {
		if p.Spec.NodeName == pod.Spec.NodeName && p.DeletionTimestamp == nil {
			here = append(here, p.Name)
		}
	}
	slices.Sort(here)
	if len(here) == 0 {
		r.Logf("restart: no StatefulSet pod on %s (node of %s); pairing with %s", pod.Spec.NodeName, name, fallback)
		return fallback, nil
	}
	return here[i%len(here)], nil
}

// restartOrder says which restart of iteration i goes first: true is the static-IP pod's.
func restartOrder(i int) [2]bool {
	if i%2 == 0 {
		return [2]bool{true, false}
	}
	return [2]bool{false, true}
}

// sleepJitter waits a uniformly random time in [0, max) (nothing for max <= 0).
func sleepJitter(ctx context.Context, max time.Duration) error {
	if max <= 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(rand.N(max)):
		return nil
	}
}

// waitPod watches pod name from resourceVersion (empty: its current state first) until done
// says so, and returns when the watch delivered that state.
func (r *Runner) waitPod(ctx context.Context, ns, name, resourceVersion string, timeout time.Duration, done func(*corev1.Pod) (bool, error)) (time.Time, error) {
	return r.waitPodEvents(ctx, ns, name, resourceVersion, timeout, nil, done)
}

// waitPodEvents is waitPod that also hands each event (with the time the watch delivered it)
// to observe, when not nil.
func (r *Runner) waitPodEvents(ctx context.Context, ns, name, resourceVersion string, timeout time.Duration, observe func(time.Time, watch.EventType, *corev1.Pod), done func(*corev1.Pod) (bool, error)) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return podwatch.Until(ctx, r.Kube, ns, name, resourceVersion, observe, done)
}

// PrintRestart writes the restart latencies: median, p90 and the ratios of the medians.
func PrintRestart(w interface{ Write([]byte) (int, error) }, res RestartResult) {
	fmt.Fprintf(w, "delete -> same-IP Running (static-IP EnhancedStatefulSet pod, %d deletions): median %s, p90 %s; of which delete -> old pod gone: median %s, p90 %s (containers stopped: median %s, p90 %s)\n",
		len(res.StaticIP), secs2(Median(res.StaticIP)), secs2(Percentile(res.StaticIP, 90)), secs2(Median(res.StaticIPGone)), secs2(Percentile(res.StaticIPGone, 90)),
		secs2(Median(res.StaticIPStopped)), secs2(Percentile(res.StaticIPStopped, 90)))
	fmt.Fprintf(w, "delete -> Running (native StatefulSet pod, no static IP, %d deletions): median %s, p90 %s; of which delete -> old pod gone: median %s, p90 %s (containers stopped: median %s, p90 %s)\n",
		len(res.StatefulSet), secs2(Median(res.StatefulSet)), secs2(Percentile(res.StatefulSet, 90)), secs2(Median(res.StatefulSetGone)), secs2(Percentile(res.StatefulSetGone, 90)),
		secs2(Median(res.StatefulSetStopped)), secs2(Percentile(res.StatefulSetStopped, 90)))
	fmt.Fprintf(w, "create -> Running (plain pod, %d pods): median %s, p90 %s\n", len(res.Plain), secs2(Median(res.Plain)), secs2(Percentile(res.Plain, 90)))
	fmt.Fprintf(w, "ratio static-IP restart / plain pod start (medians): %.2fx, (p90): %.2fx\n",
		Ratio(Median(res.StaticIP), Median(res.Plain)), Ratio(Percentile(res.StaticIP, 90), Percentile(res.Plain, 90)))
	fmt.Fprintf(w, "ratio static-IP restart / native StatefulSet restart (medians): %.2fx, (p90): %.2fx\n",
		Ratio(Median(res.StaticIP), Median(res.StatefulSet)), Ratio(Percentile(res.StaticIP, 90), Percentile(res.StatefulSet, 90)))
	p90 := func(ds []time.Duration) time.Duration { return Percentile(ds, 90) }
	fmt.Fprintf(w, "  95%% interval (paired bootstrap over the deletions, static-IP and native of one iteration as a pair): median %s, p90 %s\n",
		interval(res.StaticIP, res.StatefulSet, Median), interval(res.StaticIP, res.StatefulSet, p90))
	// What follows the deletion, per restart: the successor's start, next to a plain pod's.
	after := make([]time.Duration, len(res.StaticIP))
	for i := range res.StaticIP {
		after[i] = res.StaticIP[i] - res.StaticIPGone[i]
	}
	fmt.Fprintf(w, "static-IP restart after the old pod is gone: median %s -> %.2fx the plain pod's start\n", secs2(Median(after)), Ratio(Median(after), Median(res.Plain)))
}

// interval is benchstat's paired 95% interval of stat(a)/stat(b), printed.
func interval(a, b []time.Duration, stat func([]time.Duration) time.Duration) string {
	lo, hi, ok := benchstat.PairedRatioInterval(a, b, stat)
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%.2fx-%.2fx", lo, hi)
}

func secs2(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }

// noContainerRunning: the kubelet reports every container of p stopped (or none started).
func noContainerRunning(p *corev1.Pod) bool {
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Running != nil {
			return false
		}
	}
	return true
}

// podTrace is one line about p for --restart-trace: which pod (old or successor), phase,
// deletion, node, IP, container states and conditions.
func podTrace(p *corev1.Pod, old types.UID) string {
	who := "new"
	if p.UID == old {
		who = "old"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s rv=%s phase=%s", who, p.ResourceVersion, p.Status.Phase)
	if p.DeletionTimestamp != nil {
		b.WriteString(" deleting")
	}
	if p.Spec.NodeName != "" {
		fmt.Fprintf(&b, " node=%s", p.Spec.NodeName)
	}
	if p.Status.PodIP != "" {
		fmt.Fprintf(&b, " ip=%s", p.Status.PodIP)
	}
	for _, c := range p.Status.ContainerStatuses {
		state := "waiting"
		switch {
		case c.State.Running != nil:
			state = "running"
		case c.State.Terminated != nil:
			state = "terminated"
		}
		fmt.Fprintf(&b, " %s=%s", c.Name, state)
	}
	for _, c := range p.Status.Conditions {
		if c.Status == corev1.ConditionTrue {
			fmt.Fprintf(&b, " %s", c.Type)
		}
	}
	if len(p.Finalizers) > 0 {
		fmt.Fprintf(&b, " finalizers=%v", p.Finalizers)
	}
	return b.String()
}
