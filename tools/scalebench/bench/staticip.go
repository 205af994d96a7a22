package bench

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/apis/podip"
)

// StaticIPController (scenario 3): total StaticIPs of one StatefulSet spread over the nodes,
// a tenth of them with a live pod (bound straight to its node, kwok gives it the annotated IP),
// the rest reserved for absent pods. The StaticIP controller alone: time and cost until every
// record has its phase, idle cost afterwards, time to reflect a deleted pod (record Reserved).
// Then the scheduler's reservation cache over the same records: staticip-scheduler against
// kube-scheduler (memory, start-up cost), and the time from deleting a reservation to the
// pod it kept out being bound.
func (c *Cluster) StaticIPController(ctx context.Context, total int, idle time.Duration) ([]Row, error) {
	const ns, set = "sip", "sip"
	ranges, err := c.EnsureRanges(ctx)
	if err != nil {
		return nil, err
	}
	if err := c.EnsureNamespace(ctx, ns); err != nil {
		return nil, err
	}
	sts, err := c.Kube.AppsV1().StatefulSets(ns).Create(ctx, &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: set, Annotations: map[string]string{jkev1.AnnotationEnable: "true"}},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(int32(total)), ServiceName: set,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": set}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": set}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "scalebench"}}}}}}, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	live := total / 10
	place := func(k int) (string, string) {
		node := c.Nodes[k%len(c.Nodes)]
		return node, Host(ranges[node], 21+k/len(c.Nodes)) // above the scheduler scenario's addresses
	}
	if total/len(c.Nodes) > 170 {
		return nil, fmt.Errorf("%d StaticIPs on %d nodes do not fit their /24s", total, len(c.Nodes))
	}
	owner := []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: set, UID: sts.UID, Controller: ptr.To(true)}}
	// The records first, as the workload controllers write them before a pod exists
	// (DESIGN.md, "How a fixed IP lives", 1), then the live pods.
	err = parallel(ctx, total, 32, func(ctx context.Context, k int) error {
		node, ip := place(k)
		name := fmt.Sprintf("%s-%d", set, k)
		s := RangeLabelled(StaticIP(ns, name, ip, node, Requests), c.rangeNames[node])
		s.Spec.APIGroup, s.Spec.Kind, s.Spec.Ref = "apps", "StatefulSet", set
		if _, err := c.SIP.JkeV1().StaticIPs(ns).Create(ctx, s, metav1.CreateOptions{}); ignoreExists(err) != nil {
			return err
		}
		if k >= live {
			return nil
		}
		p := Pod(ns, name, ip, node)
		p.Spec.Affinity, p.Spec.NodeName = nil, node
		p.Labels["app"] = set
		p.OwnerReferences = owner
		_, err := c.Kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		return ignoreExists(err)
	})
	if err != nil {
		return nil, err
	}
	// Wait for kwok: the live pods Running with their IPs.
	if err := poll(ctx, 20*time.Minute, func(ctx context.Context) (bool, error) {
		l, err := c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, nil
		}
		n := 0
		for i := range l.Items {
			if l.Items[i].Status.PodIP != "" && l.Items[i].Status.PodIP == l.Items[i].Annotations[podip.AnnotationIPAddress] {
				n++
			}
		}
		return n == live, nil
	}); err != nil {
		return nil, fmt.Errorf("pods Running with their IPs: %w", err)
	}

	phases := func(ctx context.Context) (bound, reserved int, err error) {
		l, err := c.SIP.JkeV1().StaticIPs(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return 0, 0, err
		}
		for i := range l.Items {
			switch l.Items[i].Status.Phase {
			case jkev1.StaticIPBound:
				bound++
			case jkev1.StaticIPReserved:
				reserved++
			}
		}
		return bound, reserved, nil
	}
	comp, err := c.Manager("staticip-controller", "staticip")
	if err != nil {
		return nil, err
	}
	defer comp.Stop()
	if err := poll(ctx, 30*time.Minute, func(ctx context.Context) (bool, error) {
		if done, perr := comp.Exited(); done {
			return false, fmt.Errorf("staticip controller exited: %v", perr)
		}
		b, r, err := phases(ctx)
		return err == nil && b == live && r == total-live, nil
	}); err != nil {
		b, r, _ := phases(ctx)
		return nil, fmt.Errorf("records: %d Bound (want %d), %d Reserved (want %d): %w", b, live, r, total-live, err)
	}
	synced := time.Since(comp.Started)
	row, err := Measure("staticip controller", len(c.Nodes), comp.Proc, comp.Proxy, synced)
	if err != nil {
		return nil, err
	}
	row.Note("%d StaticIPs (%d Bound, %d Reserved) all phased after %.1f s", total, live, total-live, synced.Seconds())
	row.Note("%.2f requests/record", float64(row.Requests)/float64(total))
	// Idle: what keeping the records costs.
	u0, _ := comp.Usage()
	r0 := comp.Proxy.Counts()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(idle):
	}
	u1, _ := comp.Usage()
	idleReqs := comp.Proxy.Counts().Sub(r0)
	row.Note("idle %.1f%% of a core, %d requests in %v (%s)", 100*(u1.CPU-u0.CPU).Seconds()/idle.Seconds(), idleReqs.Total(), idle, idleReqs)
	// A deleted pod: its record goes Reserved.
	gone := set + "-0"
	t0 := time.Now()
	if err := c.Kube.CoreV1().Pods(ns).Delete(ctx, gone, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		return nil, err
	}
	if err := poll(ctx, 5*time.Minute, func(ctx context.Context) (bool, error) {
		s, err := c.SIP.JkeV1().StaticIPs(ns).Get(ctx, gone, metav1.GetOptions{})
		return err == nil && s.Status.Phase == jkev1.StaticIPReserved, nil
	}); err != nil {
		return nil, fmt.Errorf("pod delete → record Reserved: %w", err)
	}
	row.Note("pod delete → Reserved %.0f ms", float64(time.Since(t0).Milliseconds()))
	u2, _ := comp.Usage()
	row.PeakRSS = u2.PeakRSS
	comp.Stop()

	rows := []Row{row}
	cache, err := c.reservationCache(ctx, ns)
	rows = append(rows, cache...)
	return rows, err
}

// reservationCache: kube-scheduler then staticip-scheduler started on the cluster with the
// records; each schedules one probe pod that fits its node only without a 60-CPU
// reservation there; staticip-scheduler keeps it pending until the reservation's record is
// deleted (the time until it is bound is the cache reflecting a delete).
func (c *Cluster) reservationCache(ctx context.Context, ns string) ([]Row, error) {
	node := c.Nodes[len(c.Nodes)-1]
	ranges, err := c.Ranges(ctx)
	if err != nil {
		return nil, err
	}
	big := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("60")}
	var rows []Row
	for _, m := range []struct{ name, bin, config string }{
		{"kube-scheduler", "kube-scheduler", StockSchedulerConfig},
		{"staticip-scheduler", "staticip-scheduler", StaticIPSchedulerConfig},
	} {
		blocker := "blocker-" + m.name
		if _, err := c.SIP.JkeV1().StaticIPs(ns).Create(ctx, RangeLabelled(StaticIP(ns, blocker, Host(ranges[node], 250), node, big), c.rangeNames[node]), metav1.CreateOptions{}); err != nil {
			return rows, err
		}
		comp, err := c.StartScheduler(m.name+"-cache", m.bin, m.config)
		if err != nil {
			return rows, err
		}
		probe := Pod(ns, "probe-"+m.name, "", "")
		probe.Spec.Affinity = PinnedTo(node)
		probe.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10")}
		if _, err := c.Kube.CoreV1().Pods(ns).Create(ctx, probe, metav1.CreateOptions{}); err != nil {
			comp.Stop()
			return rows, err
		}
		bound := func(ctx context.Context) (bool, error) {
			p, err := c.Kube.CoreV1().Pods(ns).Get(ctx, probe.Name, metav1.GetOptions{})
			return err == nil && p.Spec.NodeName != "", nil
		}
		row := Row{Scenario: "reservation cache", Component: m.name, Nodes: len(c.Nodes)}
		if m.bin == "staticip-scheduler" {
			// Held out: give it time to try (and its informers to sync) before the delete.
			if err := poll(ctx, 5*time.Minute, func(ctx context.Context) (bool, error) {
				if ok, _ := bound(ctx); ok {
					return false, fmt.Errorf("probe bound despite the reservation")
				}
				ev, err := c.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + probe.Name})
				return err == nil && len(ev.Items) > 0, nil
			}); err != nil {
				comp.Stop()
				return rows, fmt.Errorf("%s: probe not rejected: %w", m.name, err)
			}
		}
		t0 := time.Now()
		if err := c.SIP.JkeV1().StaticIPs(ns).Delete(ctx, blocker, metav1.DeleteOptions{}); err != nil {
			comp.Stop()
			return rows, err
		}
		if err := poll(ctx, 5*time.Minute, bound); err != nil {
			comp.Stop()
			return rows, fmt.Errorf("%s: probe not bound: %w", m.name, err)
		}
		if m.bin == "staticip-scheduler" {
			row.Note("reservation delete → pod bound %.0f ms", float64(time.Since(t0).Milliseconds()))
		}
		row.Wall = time.Since(comp.Started)
		// Settle, then read the cost of holding the cluster's objects.
		time.Sleep(5 * time.Second)
		u, err := comp.Usage()
		if err != nil {
			comp.Stop()
			return rows, err
		}
		row.CPU, row.PeakRSS, row.Requests = u.CPU, u.PeakRSS, comp.Proxy.Counts().Total()
		comp.Stop()
		rows = append(rows, row)
	}
	if len(rows) == 2 {
		rows[1].Note("RSS ratio to kube-scheduler %.2f", float64(rows[1].PeakRSS)/float64(rows[0].PeakRSS))
	}
	return rows, nil
}
