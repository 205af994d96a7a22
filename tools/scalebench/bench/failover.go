package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/controllers/pkg/nodefailover"
)

// The failover scenario's own nodes, in a zone of their own (failover takes a spare of the
// failed node's zone): the node whose static-IP pods fail over, its spare, the node of the
// native StatefulSet, and two nodes with room for the native pods once it is fenced.
const (
	FailoverSource = "kwok-fo-ests"
	FailoverSpare  = "kwok-fo-spare"
	FailoverNative = "kwok-fo-native"
	FailoverZone   = "zone-fo"
	// FailoverCIDR is the source node's IPRange (outside PoolCIDR).
	FailoverCIDR = "10.200.0.0/24"
	// failoverPool places the native StatefulSet's pods: on its node only until they run,
	// then on the room nodes as well.
	failoverPool = "scalebench.staticip.io/failover-pool"
)

func failoverRoom(i int) string { return fmt.Sprintf("kwok-fo-room-%d", i) }

// Failover (scenario 4): a node with pods static-IP pods of an EnhancedStatefulSet is powered
// off and fenced (out-of-service taint); measured from the fence until every pod runs on the
// spare with its IP. staticip-controller-manager (enhancedstatefulset, staticip, nodefailover),
// staticip-scheduler, kube-controller-manager (pod GC, taint eviction) and the simulated agents
// run. Then the upstream path, alone: a native StatefulSet of as many pods on a node fenced the
// same way (kube-controller-manager: taint eviction, pod GC, statefulset; kube-scheduler):
// fence → all Running elsewhere.
func (c *Cluster) Failover(ctx context.Context, pods int, nativeFirst bool) ([]Row, error) {
	if pods < 1 || pods > int(NodeCapacity.Pods().Value()) {
		return nil, fmt.Errorf("failover: %d pods do not fit one node (1-%d)", pods, NodeCapacity.Pods().Value())
	}
	if _, err := c.EnsureRanges(ctx); err != nil {
		return nil, err
	}
	if err := c.addFailoverNodes(ctx); err != nil {
		return nil, err
	}
	if _, err := c.SIP.JkeV1().IPRanges().Create(ctx, &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: FailoverSource},
		Spec: jkev1.IPRangeSpec{CIDR: FailoverCIDR, Node: FailoverSource}}, metav1.CreateOptions{}); ignoreExists(err) != nil {
		return nil, err
	}
	agents, err := c.StartAgents(ctx)
	if err != nil {
		return nil, err
	}
	defer agents.Stop()
	t0 := time.Now()
	if err := agents.WaitConverged(ctx, 20*time.Minute); err != nil {
		return nil, fmt.Errorf("simulated agents: %w", err)
	}
	setup := agents.Proxy.Counts()
	note := fmt.Sprintf("simulated agents reported %d nodes × %d ranges in %.1f s (%s)", len(c.Nodes)+5, len(c.Nodes)+1, time.Since(t0).Seconds(), setup)
	var native []Row
	var wallNative time.Duration
	if nativeFirst {
		// The other order (rounds alternate it, so that both sides see the same load on
		// average). The native node is unfenced afterwards: it holds no range, and the
		// failover controller must not take the spare for it.
		if native, wallNative, err = c.failoverNative(ctx, pods); err != nil {
			return native, fmt.Errorf("StatefulSet: %w", err)
		}
		if err := c.Unfence(ctx, FailoverNative); err != nil {
			return native, err
		}
	}
	rows, wallESTS, err := c.failoverESTS(ctx, pods, agents)
	if err != nil {
		return append(native, rows...), fmt.Errorf("EnhancedStatefulSet: %w", err)
	}
	if len(rows) > 1 {
		rows[1].Note("%s", note)
	}
	if !nativeFirst {
		native, wallNative, err = c.failoverNative(ctx, pods)
	}
	order := "EnhancedStatefulSet first"
	if nativeFirst {
		order = "StatefulSet first"
	}
	if len(rows) > 1 && wallNative > 0 {
		rows[1].Note("fence → all Running: %.2f × the StatefulSet's (%s)", wallESTS.Seconds()/wallNative.Seconds(), order)
	}
	rows = append(rows, native...)
	if err != nil {
		return rows, fmt.Errorf("StatefulSet: %w", err)
	}
	return rows, nil
}

// addFailoverNodes creates the scenario's nodes (kwok makes them Ready) and gives the spare
// its label and taint (as tools/localcluster registers a spare).
func (c *Cluster) addFailoverNodes(ctx context.Context) error {
	names := []string{FailoverSource, FailoverSpare, FailoverNative, failoverRoom(0), failoverRoom(1)}
	for _, n := range names {
		if _, err := c.Kube.CoreV1().Nodes().Create(ctx, FakeNode(n, FailoverZone), metav1.CreateOptions{}); ignoreExists(err) != nil {
			return err
		}
	}
	if err := poll(ctx, 5*time.Minute, func(ctx context.Context) (bool, error) {
		for _, n := range names {
			node, err := c.Kube.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
			if err != nil || !nodefailover.NodeReady(node) {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return fmt.Errorf("failover nodes Ready: %w", err)
	}
	for _, n := range names {
		patch := `{"spec":{"taints":null}}`
		if n == FailoverSpare {
			patch = fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}},"spec":{"taints":[{"key":%q,"value":"true","effect":"NoSchedule"}]}}`,
				jkev1alpha1.LabelSpare, jkev1alpha1.TaintSpare)
		}
		if _, err := c.Kube.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// PowerOff stands for switching node's machine off. kwok forgets the node (its annotation is
// removed and kwok restarted: no heartbeat, no lease renewal, nothing done to its pods any
// more, as a machine that is off); its Lease is deleted and its Ready condition set Unknown,
// as kube-controller-manager's node lifecycle controller writes it once the lease has expired
// (that controller does not run here: the harness writes the condition).
func (c *Cluster) PowerOff(ctx context.Context, node string) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{KwokAnnotation: nil}}})
	if _, err := c.Kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return err
	}
	c.kwok.Stop()
	if err := c.startKwok(); err != nil {
		return fmt.Errorf("restarting kwok: %w", err)
	}
	if err := c.Kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, node, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := c.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n = n.DeepCopy()
		now := metav1.Now()
		for i := range n.Status.Conditions {
			if n.Status.Conditions[i].Type == corev1.NodeReady {
				n.Status.Conditions[i] = corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionUnknown,
					Reason: "NodeStatusUnknown", Message: "Kubelet stopped posting node status.", LastHeartbeatTime: n.Status.Conditions[i].LastHeartbeatTime, LastTransitionTime: now}
			}
		}
		_, err = c.Kube.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

// Fence puts the out-of-service taint on node: the operator's statement that it is off.
func (c *Cluster) Fence(ctx context.Context, node string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := c.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == jkev1alpha1.TaintOutOfService }) {
			return nil
		}
		n = n.DeepCopy()
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: jkev1alpha1.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
		_, err = c.Kube.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

// Unfence removes node's out-of-service taint.
func (c *Cluster) Unfence(ctx context.Context, node string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := c.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n = n.DeepCopy()
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == jkev1alpha1.TaintOutOfService })
		_, err = c.Kube.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

// KubeControllerManager runs kube-controller-manager with only the listed controllers.
func (c *Cluster) KubeControllerManager(name, controllers string, extra ...string) (*Component, error) {
	return c.StartComponent(name, "kube-controller-manager", func(kc string) []string {
		args := append([]string{"--kubeconfig=" + kc, "--controllers=" + controllers, "--leader-elect=false", "--secure-port=0",
			"--feature-gates=MaxUnavailableStatefulSet=true", LogVerbosity()}, c.controllerLimits()...)
		return append(args, extra...)
	})
}

// fenceControllers are kube-controller-manager's controllers that act on a fenced node on a
// real cluster: taint eviction (it evicts the pods that do not tolerate the out-of-service
// taint), pod GC (it force-deletes terminating pods of a NotReady out-of-service node, every
// 20 s) and the node lifecycle controller (taint eviction needs its pod index; it turns the
// Ready condition into NoExecute taints). Its grace period is an hour: kwok's leases never
// make it judge a node, the harness writes the powered-off node's condition (PowerOff).
const fenceControllers = "node-lifecycle-controller,taint-eviction-controller,pod-garbage-collector-controller"

var fenceControllerFlags = []string{"--node-monitor-grace-period=1h"}

// failoverTemplate is both workloads' pod template: the default termination grace period (a
// pod of a node that is off never confirms its deletion: pod GC or the failover controller
// force-deletes it).
func failoverTemplate(set string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": set}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "scalebench",
			Resources: corev1.ResourceRequirements{Requests: Requests}}}}}
}

// phaseRun is the measured part of one failover: components whose cost counts from the fence.
type phaseRun struct {
	comps []*Component
	u0    map[*Component]Usage
	r0    map[*Component]Counts
	t0    time.Time
}

func (c *Cluster) fenceAndMeasure(ctx context.Context, node string, comps []*Component) (*phaseRun, error) {
	if err := c.PowerOff(ctx, node); err != nil {
		return nil, fmt.Errorf("power off %s: %w", node, err)
	}
	run := &phaseRun{comps: comps, u0: map[*Component]Usage{}, r0: map[*Component]Counts{}}
	for _, comp := range comps {
		u, err := comp.Usage()
		if err != nil {
			return nil, err
		}
		run.u0[comp], run.r0[comp] = u, comp.Proxy.Counts()
	}
	run.t0 = time.Now()
	return run, c.Fence(ctx, node)
}

// rows are each component's cost since the fence (CPU, requests) and its peak RSS.
func (run *phaseRun) rows(nodes int, wall time.Duration, label func(*Component) string) ([]Row, error) {
	var rows []Row
	for _, comp := range run.comps {
		u, err := comp.Usage()
		if err != nil {
			return rows, err
		}
		reqs := comp.Proxy.Counts().Sub(run.r0[comp])
		rows = append(rows, Row{Scenario: "failover", Component: label(comp), Nodes: nodes, Wall: wall,
			CPU: u.CPU - run.u0[comp].CPU, PeakRSS: u.PeakRSS, Requests: reqs.Total()})
	}
	return rows, nil
}

func (c *Cluster) waitComponents(ctx context.Context, comps []*Component, timeout time.Duration, what string, done func(ctx context.Context) (bool, error)) error {
	return poll(ctx, timeout, func(ctx context.Context) (bool, error) {
		for _, comp := range comps {
			if exited, perr := comp.Exited(); exited {
				return false, fmt.Errorf("%s exited: %v (log in %s)", comp.Name, perr, c.Dir)
			}
		}
		ok, err := done(ctx)
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		return ok, nil
	})
}

// runningWithIPs counts the live pods of ns Running on node (any node but notOn when node is
// "") with the IP ips names for them (any IP when ips is nil).
func (c *Cluster) runningWithIPs(ctx context.Context, ns, node, notOn string, ips map[string]string, old map[types.UID]bool) (int, error) {
	l, err := c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, nil
	}
	n := 0
	for i := range l.Items {
		p := &l.Items[i]
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" || old[p.UID] ||
			(node != "" && p.Spec.NodeName != node) || (notOn != "" && p.Spec.NodeName == notOn) {
			continue
		}
		if ips != nil && ips[p.Name] != p.Status.PodIP {
			continue
		}
		n++
	}
	return n, nil
}

func (c *Cluster) failoverESTS(ctx context.Context, pods int, agents *Agents) ([]Row, time.Duration, error) {
	const ns, set = "failover-ests", "fo"
	if err := c.EnsureNamespace(ctx, ns); err != nil {
		return nil, 0, err
	}
	cidr := netip.MustParsePrefix(FailoverCIDR)
	ips := map[string]string{}
	// The records of pods that have run on the node: IPs of its range (as its CNI handed
	// them out), the node, the set.
	for i := 0; i < pods; i++ {
		name := fmt.Sprintf("%s-%d", set, i)
		ips[name] = Host(cidr, i+1)
		s := RangeLabelled(StaticIP(ns, name, ips[name], FailoverSource, Requests), FailoverSource)
		s.Spec.APIGroup, s.Spec.Kind, s.Spec.Ref = jkev1alpha1.GroupName, "EnhancedStatefulSet", set
		if _, err := c.SIP.JkeV1().StaticIPs(ns).Create(ctx, s, metav1.CreateOptions{}); ignoreExists(err) != nil {
			return nil, 0, err
		}
	}
	ests := &jkev1alpha1.EnhancedStatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: set, Annotations: map[string]string{jkev1.AnnotationEnable: "true"}},
		Spec: jkev1alpha1.EnhancedStatefulSetSpec{Replicas: ptr.To(int32(pods)), ServiceName: set, PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": set}}, Template: failoverTemplate(set)}}
	if _, err := c.SIP.JkeV1alpha1().EnhancedStatefulSets(ns).Create(ctx, ests, metav1.CreateOptions{}); ignoreExists(err) != nil {
		return nil, 0, err
	}
	var comps []*Component
	defer func() {
		for _, comp := range comps {
			comp.Stop()
		}
	}()
	kcm, err := c.KubeControllerManager("failover-kcm-ests", fenceControllers, fenceControllerFlags...)
	if err != nil {
		return nil, 0, err
	}
	comps = append(comps, kcm)
	mgr, err := c.Manager("failover-controllers", "enhancedstatefulset,staticip,nodefailover", "--node-failover-window=0s")
	if err != nil {
		return nil, 0, err
	}
	comps = append(comps, mgr)
	sched, err := c.StartScheduler("failover-staticip-scheduler", "staticip-scheduler", StaticIPSchedulerConfig)
	if err != nil {
		return nil, 0, err
	}
	comps = append(comps, sched)
	if err := c.waitComponents(ctx, comps, 20*time.Minute, "pods Running on "+FailoverSource, func(ctx context.Context) (bool, error) {
		n, err := c.runningWithIPs(ctx, ns, FailoverSource, "", ips, nil)
		return n == pods, err
	}); err != nil {
		return nil, 0, err
	}
	if err := agents.WaitConverged(ctx, 10*time.Minute); err != nil {
		return nil, 0, fmt.Errorf("simulated agents: %w", err)
	}
	a0, bytes0 := agents.Proxy.Counts(), agents.AnnotationBytes.Load()
	traffic := agents.Record() // from the power-off until the agents have converged after the move
	defer agents.StopRecording()
	// Every phase of the record as it happens (a watch: a poll misses the short ones).
	var mu sync.Mutex
	seen := map[jkev1alpha1.NodeFailoverPhase]time.Time{}
	w, err := c.SIP.JkeV1alpha1().NodeFailovers().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + FailoverSource})
	if err != nil {
		return nil, 0, err
	}
	defer w.Stop()
	go func() {
		for ev := range w.ResultChan() {
			if rec, ok := ev.Object.(*jkev1alpha1.NodeFailover); ok && rec.Status.Phase != "" {
				mu.Lock()
				if _, ok := seen[rec.Status.Phase]; !ok {
					seen[rec.Status.Phase] = time.Now()
				}
				mu.Unlock()
			}
		}
	}()
	run, err := c.fenceAndMeasure(ctx, FailoverSource, comps)
	if err != nil {
		return nil, 0, err
	}
	phases := func() map[jkev1alpha1.NodeFailoverPhase]time.Duration {
		mu.Lock()
		defer mu.Unlock()
		out := map[jkev1alpha1.NodeFailoverPhase]time.Duration{}
		for p, t := range seen {
			out[p] = t.Sub(run.t0)
		}
		return out
	}
	var wall time.Duration
	if err := c.waitComponents(ctx, comps, 30*time.Minute, "pods Running on "+FailoverSpare+" with their IPs", func(ctx context.Context) (bool, error) {
		if wall == 0 {
			now := time.Since(run.t0)
			if n, err := c.runningWithIPs(ctx, ns, FailoverSpare, "", ips, nil); err == nil && n == pods {
				wall = now
			}
		}
		_, completed := phases()[jkev1alpha1.FailoverCompleted]
		return wall > 0 && completed, nil
	}); err != nil {
		return nil, 0, fmt.Errorf("%w (record phases so far: %s)", err, phaseString(phases()))
	}
	if err := agents.WaitConverged(ctx, 10*time.Minute); err != nil {
		return nil, 0, fmt.Errorf("simulated agents after the failover: %w", err)
	}
	agents.StopRecording()
	moveTraffic := traffic.Summary(agents.ReadyNodes())
	rows, err := run.rows(len(c.Nodes), wall, func(comp *Component) string {
		switch comp {
		case kcm:
			return "kube-controller-manager (node lifecycle, taint eviction, pod GC)"
		case mgr:
			return "staticip-controller-manager (ests, staticip, nodefailover)"
		}
		return "staticip-scheduler"
	})
	if err != nil {
		return rows, 0, err
	}
	agentReqs := agents.Proxy.Counts().Sub(a0)
	rows[1].Note("%d static-IP pods of an EnhancedStatefulSet: fence → all Running on the spare with their IPs %.1f s", pods, wall.Seconds())
	rows[1].Note("record phases after the fence: %s", phaseString(phases()))
	rows[1].Note("simulated agents after the fence: %d requests (%s), %.1f MiB of annotations",
		agentReqs.Total(), agentReqs, float64(agents.AnnotationBytes.Load()-bytes0)/(1<<20))
	rows[1].Note("the range move (power-off → agents converged), %s", moveTraffic)
	if first, last, med, mx := traffic.Writes(); !first.IsZero() {
		rows[1].Note("the agents' writes answered %.1f–%.1f s after the fence (each took median %d ms, max %d ms)",
			first.Sub(run.t0).Seconds(), last.Sub(run.t0).Seconds(), med.Milliseconds(), mx.Milliseconds())
	}
	// Leave the scenario's objects out of the next scenarios.
	for _, comp := range comps {
		comp.Stop()
	}
	comps = nil
	if err := c.SIP.JkeV1alpha1().EnhancedStatefulSets(ns).Delete(ctx, set, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return rows, wall, err
	}
	if err := c.DeletePods(ctx, ns); err != nil {
		return rows, wall, err
	}
	return rows, wall, c.SIP.JkeV1().StaticIPs(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
}

func phaseString(phases map[jkev1alpha1.NodeFailoverPhase]time.Duration) string {
	var parts []string
	for _, p := range jkev1alpha1.NodeFailoverPhases {
		if d, ok := phases[p]; ok {
			parts = append(parts, fmt.Sprintf("%s %.1f s", p, d.Seconds()))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func (c *Cluster) failoverNative(ctx context.Context, pods int) ([]Row, time.Duration, error) {
	const ns, set = "failover-native", "native"
	if err := c.EnsureNamespace(ctx, ns); err != nil {
		return nil, 0, err
	}
	label := func(node string) error {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}}}`, failoverPool)
		_, err := c.Kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	}
	if err := label(FailoverNative); err != nil {
		return nil, 0, err
	}
	var comps []*Component
	defer func() {
		for _, comp := range comps {
			comp.Stop()
		}
	}()
	kcm, err := c.KubeControllerManager("failover-kcm-native", "statefulset-controller,"+fenceControllers, fenceControllerFlags...)
	if err != nil {
		return nil, 0, err
	}
	comps = append(comps, kcm)
	sched, err := c.StartScheduler("failover-kube-scheduler", "kube-scheduler", StockSchedulerConfig)
	if err != nil {
		return nil, 0, err
	}
	comps = append(comps, sched)
	tmpl := failoverTemplate(set)
	tmpl.Spec.NodeSelector = map[string]string{failoverPool: "true"}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: set},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To(int32(pods)), ServiceName: set, PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": set}}, Template: tmpl}}
	if _, err := c.Kube.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{}); ignoreExists(err) != nil {
		return nil, 0, err
	}
	if err := c.waitComponents(ctx, comps, 20*time.Minute, "pods Running on "+FailoverNative, func(ctx context.Context) (bool, error) {
		n, err := c.runningWithIPs(ctx, ns, FailoverNative, "", nil, nil)
		return n == pods, err
	}); err != nil {
		return nil, 0, err
	}
	l, err := c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, 0, err
	}
	old := map[types.UID]bool{}
	for i := range l.Items {
		old[l.Items[i].UID] = true
	}
	// Room elsewhere for the recreated pods.
	for _, n := range []string{failoverRoom(0), failoverRoom(1)} {
		if err := label(n); err != nil {
			return nil, 0, err
		}
	}
	run, err := c.fenceAndMeasure(ctx, FailoverNative, comps)
	if err != nil {
		return nil, 0, err
	}
	var wall time.Duration
	if err := c.waitComponents(ctx, comps, 30*time.Minute, "pods Running elsewhere", func(ctx context.Context) (bool, error) {
		n, err := c.runningWithIPs(ctx, ns, "", FailoverNative, nil, old)
		wall = time.Since(run.t0)
		return n == pods, err
	}); err != nil {
		return nil, 0, err
	}
	rows, err := run.rows(len(c.Nodes), wall, func(comp *Component) string {
		if comp == kcm {
			return "kube-controller-manager (statefulset, node lifecycle, taint eviction, pod GC)"
		}
		return "kube-scheduler"
	})
	if err != nil {
		return rows, 0, err
	}
	rows[0].Note("%d pods of a native StatefulSet: fence → all Running elsewhere (new IPs) %.1f s", pods, wall.Seconds())
	for _, comp := range comps {
		comp.Stop()
	}
	comps = nil
	if err := c.Kube.AppsV1().StatefulSets(ns).Delete(ctx, set, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return rows, wall, err
	}
	return rows, wall, c.DeletePods(ctx, ns)
}
