// Package checkpodannotation is the CheckPodAnnotationWithStaticIP scheduler plugin: a pod
// whose IP is fixed may only run on the node that holds that IP. See README.md.
package checkpodannotation

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	v1helper "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	schedutil "k8s.io/kubernetes/pkg/scheduler/util"

	"github.com/staticip/staticip/apis/podip"
	"github.com/staticip/staticip/scheduler-plugins/apis/config"
	_ "github.com/staticip/staticip/scheduler-plugins/apis/config/scheme" // registers the args
	"github.com/staticip/staticip/scheduler-plugins/apis/config/validation"
	"github.com/staticip/staticip/scheduler-plugins/pkg/staticipnode"
)

// Name is the plugin's name in the registry and in KubeSchedulerConfiguration.
const Name = "CheckPodAnnotationWithStaticIP"

const stateKey = "PreFilter" + Name

var (
	_ fwk.PreFilterPlugin   = &CheckPodAnnotation{}
	_ fwk.FilterPlugin      = &CheckPodAnnotation{}
	_ fwk.ReservePlugin     = &CheckPodAnnotation{}
	_ fwk.EnqueueExtensions = &CheckPodAnnotation{}
	_ fwk.SignPlugin        = &CheckPodAnnotation{}
)

// errCacheNotSynced makes the scheduler retry the pod once the staticIPNode cache is filled.
var errCacheNotSynced = errors.New("the staticIPNode cache has not synced yet")

// CheckPodAnnotation pins pods with a fixed IP to the node that holds the IP.
type CheckPodAnnotation struct {
	handle fwk.Handle
	cache  *staticipnode.Cache
	args   config.CheckPodAnnotationWithStaticIPArgs
	// requeue brings back the pods this plugin pinned or rejected when their StaticIP or an
	// IPRange holding their IP changes (nil in unit tests built without a framework handle).
	requeue *staticipnode.Requeue
}

// New builds the plugin from its (internal, defaulted) args.
func New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	args, ok := obj.(*config.CheckPodAnnotationWithStaticIPArgs)
	if !ok {
		return nil, fmt.Errorf("%s: want args of type CheckPodAnnotationWithStaticIPArgs, got %T", Name, obj)
	}
	if err := validation.ValidateCheckPodAnnotationWithStaticIPArgs(nil, args); err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	c, err := staticipnode.ForHandle(ctx, h)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	pl := NewWithCache(h, c, *args)
	pl.requeue = c.NewRequeue(klog.FromContext(ctx).WithName(Name), h, pl.hint)
	return pl, nil
}

// NewWithCache builds the plugin on a given cache (unit tests).
func NewWithCache(h fwk.Handle, c *staticipnode.Cache, args config.CheckPodAnnotationWithStaticIPArgs) *CheckPodAnnotation {
	return &CheckPodAnnotation{handle: h, cache: c, args: args}
}

// Name returns the plugin's name.
func (pl *CheckPodAnnotation) Name() string { return Name }

// target is where the pod's IP lives, and how we know.
type target struct {
	node string
	ip   string
	// source names the record that pins the pod, e.g. `StaticIP ns/web-0`.
	source string
}

func (t *target) Clone() fwk.StateData { return t }

func (t *target) describe() string {
	if t.ip != "" {
		return fmt.Sprintf("the pod's IP %s (%s)", t.ip, t.source)
	}
	return fmt.Sprintf("the pod's %s", t.source)
}

// Target returns the node a pod must run on, nil when nothing pins it, or a status when the
// pod cannot be placed at all (malformed annotation, IP in no range or in an unowned range).
// The pod's IP is podip.Choose's, the CNI's rule too: its own active StaticIP's IP over the
// annotation. A StaticIP naming a node is authoritative for the node as well (failover moves it
// together with the ranges); otherwise the IP pins the pod to the owner of the IPRange
// containing it.
func (pl *CheckPodAnnotation) Target(pod *v1.Pod) (*target, *fwk.Status) {
	annotated := pod.Annotations[podip.AnnotationIPAddress]
	sip, own := pl.cache.StaticIPOfPod(pod)
	own = own && sip.Active
	record := ""
	if own {
		record = sip.IP
	}
	choice, err := podip.Choose(record, annotated)
	if err != nil {
		if bad := (*podip.BadAnnotationError)(nil); errors.As(err, &bad) {
			return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable,
				fmt.Sprintf("invalid annotation %s=%q: %s", podip.AnnotationIPAddress, annotated, strings.TrimPrefix(bad.Reason, "is ")))
		}
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("StaticIP %s/%s: %v", pod.Namespace, sip.Name, err))
	}
	if own {
		ip := ""
		if choice.IP.IsValid() {
			ip = choice.IP.String()
		}
		return &target{node: sip.Node, ip: ip, source: fmt.Sprintf("StaticIP %s/%s", pod.Namespace, sip.Name)}, nil
	}
	if choice.Source == podip.None {
		return nil, nil
	}
	ip := choice.IP
	rng, ok := pl.cache.RangeForIP(ip)
	if !ok {
		if pl.args.UnknownIP == config.UnknownIPIgnore {
			return nil, nil
		}
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable,
			fmt.Sprintf("the pod's IP %s (annotation %s) lies in no IPRange, so no node can give it", ip, podip.AnnotationIPAddress))
	}
	if rng.Node == "" {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable,
			fmt.Sprintf("the pod's IP %s lies in IPRange %s (%s), which no node owns", ip, rng.Name, rng.CIDR))
	}
	if second := choice.Secondary; second.IsValid() {
		// A dual-stack pod's two addresses come from one node: each family's range must be held
		// there (a node holds a block per family).
		if r2, ok := pl.cache.RangeForIP(second); !ok || r2.Node != rng.Node {
			held := "lies in no IPRange"
			if ok {
				held = fmt.Sprintf("lies in IPRange %s (%s) of node %q", r2.Name, r2.CIDR, r2.Node)
			}
			return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable,
				fmt.Sprintf("the pod's IPs %s (IPRange %s of node %s) and %s cannot be given by one node: %s %s",
					ip, rng.Name, rng.Node, second, second, held))
		}
	}
	return &target{node: rng.Node, ip: ip.String(), source: fmt.Sprintf("IPRange %s %s", rng.Name, rng.CIDR)}, nil
}

// SignPod takes part in opportunistic batching (KEP-5598, on by default since 1.35): a
// plugin that does not sign turns batching off for the whole profile, so staticip-scheduler
// would schedule the many ordinary pods of a cluster slower than kube-scheduler. A pod that
// neither carries the IP annotation nor has a StaticIP is not constrained by this plugin at
// all and needs no fragment; a pinned pod is refused (it has a single candidate node, there
// is nothing to batch). The batch only hints a node, which every Filter checks again.
func (pl *CheckPodAnnotation) SignPod(_ context.Context, pod *v1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	if _, annotated := pod.Annotations[podip.AnnotationIPAddress]; annotated {
		return nil, fwk.NewStatus(fwk.Unschedulable, "pods pinned by an IP annotation are not signable")
	}
	if _, ok := pl.cache.StaticIPOfPod(pod); ok {
		return nil, fwk.NewStatus(fwk.Unschedulable, "pods with a StaticIP are not signable")
	}
	return nil, nil
}

// PreFilter finds the node holding the pod's IP and returns it as the only candidate.
func (pl *CheckPodAnnotation) PreFilter(ctx context.Context, state fwk.CycleState, pod *v1.Pod, _ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	if !pl.cache.Synced() {
		return nil, fwk.AsStatus(errCacheNotSynced)
	}
	t, status := pl.Target(pod)
	if t == nil && status == nil {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	if pl.requeue != nil {
		// Rejected, or pinned to one node: a change of its StaticIP or of the IPRange holding
		// its IP may change where it can go.
		pl.requeue.Wait(pod)
	}
	if status != nil {
		return nil, status
	}
	nodeInfo, err := pl.handle.SnapshotSharedLister().NodeInfos().Get(t.node)
	if err != nil || nodeInfo.Node() == nil {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable,
			fmt.Sprintf("%s is held by node %s, which does not exist", t.describe(), t.node))
	}
	if node := nodeInfo.Node(); node.Spec.Unschedulable && !v1helper.TolerationsTolerateTaint(klog.FromContext(ctx), pod.Spec.Tolerations,
		&v1.Taint{Key: v1.TaintNodeUnschedulable, Effect: v1.TaintEffectNoSchedule}, false) {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable,
			fmt.Sprintf("%s is held by node %s, which is unschedulable", t.describe(), t.node))
	}
	state.Write(stateKey, t)
	return &fwk.PreFilterResult{NodeNames: sets.New(t.node)}, nil
}

// Reserve: the pod has a node; it no longer waits for a change of StaticIPs or IPRanges.
func (pl *CheckPodAnnotation) Reserve(_ context.Context, _ fwk.CycleState, pod *v1.Pod, _ string) *fwk.Status {
	if pl.requeue != nil {
		pl.requeue.Placed(pod)
	}
	return nil
}

// Unreserve: nothing was reserved.
func (pl *CheckPodAnnotation) Unreserve(context.Context, fwk.CycleState, *v1.Pod, string) {}

// PreFilterExtensions: the result does not depend on other pods.
func (pl *CheckPodAnnotation) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// Filter rejects every node but the one holding the pod's IP. PreFilter already narrowed
// the candidates; this keeps preemption and any caller that skips the narrowing honest.
func (pl *CheckPodAnnotation) Filter(_ context.Context, state fwk.CycleState, _ *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	data, err := state.Read(stateKey)
	if err != nil {
		return fwk.AsStatus(fmt.Errorf("reading %q from cycle state: %w", stateKey, err))
	}
	t := data.(*target)
	if name := nodeInfo.Node().Name; name != t.node {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable,
			fmt.Sprintf("node %s does not hold %s; node %s does", name, t.describe(), t.node))
	}
	return nil
}

// EventsToRegister: a pinned or rejected pod can only change its verdict when its own
// StaticIP changes, an IPRange containing its IP changes, its target node appears or
// becomes schedulable, or its own annotation is corrected. The StaticIP and IPRange changes
// come from the staticIPNode cache's informers (hint, through staticipnode.Requeue), not from
// cluster events: registering the custom resources would make kube-scheduler hold every
// StaticIP and IPRange a second time in dynamic informers.
func (pl *CheckPodAnnotation) EventsToRegister(_ context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeTaint}, QueueingHintFn: pl.isSchedulableAfterNodeChange},
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.UpdatePodToleration}, QueueingHintFn: pl.isSchedulableAfterPodTolerationChange},
		// Annotation changes come as the generic Pod/Update: the hint looks at the pod's UID
		// first, so other pods' updates cost one comparison.
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Update}, QueueingHintFn: pl.isSchedulableAfterPodAnnotationChange},
	}, nil
}

// hint decides, for a pod this plugin pinned or rejected, whether a change the cache applied
// may change its verdict (staticipnode.Requeue asks it after applying the change).
func (pl *CheckPodAnnotation) hint(logger klog.Logger, pod *v1.Pod, ch staticipnode.Change) bool {
	if ch.StaticIP != nil {
		return pl.staticIPHint(logger, pod, ch.StaticIP) == fwk.Queue
	}
	return ch.IPRange != nil && pl.ipRangeHint(logger, pod, ch.IPRange) == fwk.Queue
}

func (pl *CheckPodAnnotation) staticIPHint(logger klog.Logger, pod *v1.Pod, ev *staticipnode.StaticIPEvent) fwk.QueueingHint {
	oldSIP, newSIP := ev.Old, ev.New
	for _, s := range [...]*staticipnode.StaticIPFields{oldSIP, newSIP} {
		if s != nil && s.Namespace == pod.Namespace && s.Pod == pod.Name {
			if oldSIP != nil && newSIP != nil && oldSIP.Node == newSIP.Node && oldSIP.IP == newSIP.IP &&
				oldSIP.Active() == newSIP.Active() {
				logger.V(5).Info("the pod's StaticIP changed, but not its node, IP or state", "pod", klog.KObj(pod))
				return fwk.QueueSkip
			}
			logger.V(5).Info("the pod's StaticIP changed, the pod may go elsewhere now", "pod", klog.KObj(pod))
			return fwk.Queue
		}
	}
	return fwk.QueueSkip
}

func (pl *CheckPodAnnotation) ipRangeHint(logger klog.Logger, pod *v1.Pod, ev *staticipnode.IPRangeEvent) fwk.QueueingHint {
	ip, err := netip.ParseAddr(strings.TrimSpace(pod.Annotations[podip.AnnotationIPAddress]))
	if err != nil {
		return fwk.QueueSkip // no (valid) annotated IP: ranges cannot change the verdict
	}
	ip = ip.Unmap()
	contains := func(cidr string) bool {
		p, err := netip.ParsePrefix(cidr)
		return err == nil && p.Masked().Contains(ip)
	}
	oldR, newR := ev.Old, ev.New
	oldHas := oldR != nil && contains(oldR.Spec.CIDR)
	newHas := newR != nil && contains(newR.Spec.CIDR)
	switch {
	case !oldHas && !newHas:
		return fwk.QueueSkip
	case oldHas && newHas && oldR.Spec.Node == newR.Spec.Node:
		return fwk.QueueSkip
	}
	logger.V(5).Info("an IPRange holding the pod's IP changed", "pod", klog.KObj(pod), "ip", ip)
	return fwk.Queue
}

func (pl *CheckPodAnnotation) isSchedulableAfterNodeChange(logger klog.Logger, pod *v1.Pod, oldObj, newObj interface{}) (fwk.QueueingHint, error) {
	oldNode, newNode, err := schedutil.As[*v1.Node](oldObj, newObj)
	if err != nil {
		return fwk.Queue, err
	}
	t, status := pl.Target(pod)
	if status != nil || t == nil || t.node != newNode.Name {
		return fwk.QueueSkip, nil
	}
	if newNode.Spec.Unschedulable || (oldNode != nil && !oldNode.Spec.Unschedulable) {
		return fwk.QueueSkip, nil
	}
	logger.V(5).Info("the node holding the pod's IP appeared or became schedulable", "pod", klog.KObj(pod), "node", newNode.Name)
	return fwk.Queue, nil
}

func (pl *CheckPodAnnotation) isSchedulableAfterPodTolerationChange(_ klog.Logger, pod *v1.Pod, oldObj, newObj interface{}) (fwk.QueueingHint, error) {
	_, modified, err := schedutil.As[*v1.Pod](oldObj, newObj)
	if err != nil {
		return fwk.Queue, err
	}
	if modified.UID == pod.UID {
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}

// isSchedulableAfterPodAnnotationChange: the pending pod's own IP annotation was corrected.
func (pl *CheckPodAnnotation) isSchedulableAfterPodAnnotationChange(logger klog.Logger, pod *v1.Pod, oldObj, newObj interface{}) (fwk.QueueingHint, error) {
	before, after, err := schedutil.As[*v1.Pod](oldObj, newObj)
	if err != nil {
		return fwk.Queue, err
	}
	if after == nil || after.UID != pod.UID || before == nil {
		return fwk.QueueSkip, nil
	}
	if before.Annotations[podip.AnnotationIPAddress] == after.Annotations[podip.AnnotationIPAddress] {
		return fwk.QueueSkip, nil
	}
	logger.V(5).Info("the pod's IP annotation changed", "pod", klog.KObj(pod))
	return fwk.Queue, nil
}
