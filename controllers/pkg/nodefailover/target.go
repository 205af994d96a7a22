package nodefailover

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	resourcehelper "k8s.io/component-helpers/resource"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/controllers/pkg/metrics"
)

// claimed lists the nodes labelled as claimed for this failed node.
func (m *migration) claimed() ([]*corev1.Node, error) {
	sel := labels.SelectorFromSet(labels.Set{jkev1alpha1.LabelFailoverFor: m.failedName()})
	return m.c.nodes.List(sel)
}

func (m *migration) releaseClaim(ctx context.Context) error {
	nodes, err := m.claimed()
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if err := m.c.patchNode(ctx, n, map[string]any{"labels": map[string]any{jkev1alpha1.LabelFailoverFor: nil}}, nil); err != nil {
			return err
		}
	}
	return nil
}

// reserveTarget finds (spec.target, an earlier claim, or a new choice) and claims the target.
func (m *migration) reserveTarget(ctx context.Context, sips []*jkev1.StaticIP) (string, time.Duration, error) {
	st := m.st()
	failed := FailedNode{Name: m.failedName(), Zone: st.Zone, InstanceType: st.InstanceType}
	need := Needed(sips)
	target := m.rec.Spec.Target
	pinned := target != ""
	if target == "" {
		claims, err := m.claimed()
		if err != nil {
			return "", 0, err
		}
		if len(claims) > 0 {
			target = claims[0].Name // a claim of an earlier sync that did not reach spec.target
		}
	}
	nodes, err := m.c.nodes.List(labels.Everything())
	if err != nil {
		return "", 0, err
	}
	// Capacity is counted on the nodes that may become the target only.
	candidates := []string{target}
	for _, n := range nodes {
		if n.Labels[jkev1alpha1.LabelSpare] == "true" {
			candidates = append(candidates, n.Name)
		}
	}
	used, err := m.c.usage(candidates)
	if err != nil {
		return "", 0, err
	}
	if target == "" {
		choice := ChooseTarget(failed, nodes, used, need)
		if choice.Target == "" {
			msg := fmt.Sprintf("%s (need %s for %d static IPs); nothing moved", choice.Message(), resourceString(need), len(sips))
			if m.became(jkev1alpha1.NodeFailoverConditionTargetReserved, metav1.ConditionFalse, ReasonNoTarget) {
				m.c.recorder.Event(m.rec, corev1.EventTypeWarning, ReasonNoTarget, msg)
				if m.node != nil {
					m.c.recorder.Event(m.node, corev1.EventTypeWarning, ReasonNoTarget, msg)
				}
				metrics.NodeFailoverMigrations.WithLabelValues("no_target").Inc()
			}
			m.setCondition(jkev1alpha1.NodeFailoverConditionTargetReserved, metav1.ConditionFalse, ReasonNoTarget, msg)
			m.waiting(ReasonNoTarget, msg)
			return "", recheck, nil
		}
		target = choice.Target
	}
	tn, err := m.c.nodes.Get(target)
	if err != nil && !apierrors.IsNotFound(err) {
		return "", 0, err
	}
	var problem string
	if tn == nil {
		problem = "node not found"
	} else {
		// Capacity is counted before the claim only: once the spare is ours, its own
		// reservations for the moved StaticIPs are part of "used".
		need := need
		if tn.Labels[jkev1alpha1.LabelFailoverFor] == failed.Name {
			need = nil
		}
		problem = TargetProblem(failed, tn, used[target], need, !pinned)
	}
	if problem != "" {
		msg := fmt.Sprintf("target %s cannot take over %s: %s; nothing moved", target, failed.Name, problem)
		if m.became(jkev1alpha1.NodeFailoverConditionTargetReserved, metav1.ConditionFalse, ReasonTargetUnusable) {
			m.c.recorder.Event(m.rec, corev1.EventTypeWarning, ReasonTargetUnusable, msg)
		}
		m.setCondition(jkev1alpha1.NodeFailoverConditionTargetReserved, metav1.ConditionFalse, ReasonTargetUnusable, msg)
		m.waiting(ReasonTargetUnusable, msg)
		return "", recheck, nil
	}
	if tn.Labels[jkev1alpha1.LabelFailoverFor] != failed.Name {
		// Optimistic lock on the node: two migrations racing for one spare cannot both win.
		if err := m.c.patchNode(ctx, tn, map[string]any{"labels": map[string]any{jkev1alpha1.LabelFailoverFor: failed.Name}}, nil); err != nil {
			return "", 0, err
		}
		m.c.recorder.Eventf(tn, corev1.EventTypeNormal, ReasonClaimed, "claimed as the failover target of node %s", failed.Name)
	}
	if m.rec.Spec.Target == "" {
		rec := m.rec.DeepCopy()
		rec.Spec.Target = target
		updated, err := m.c.client.JkeV1alpha1().NodeFailovers().Update(ctx, rec, metav1.UpdateOptions{})
		if err != nil {
			return "", 0, err
		}
		m.c.recordWrites.Remember(updated.Name, updated)
		// Keep m.rec (and pointers into its status) and take the new spec and version.
		m.rec.Spec, m.rec.ResourceVersion, m.rec.Generation = updated.Spec, updated.ResourceVersion, updated.Generation
	}
	st.Target = target
	if m.became(jkev1alpha1.NodeFailoverConditionTargetReserved, metav1.ConditionTrue, ReasonClaimed) && m.node != nil {
		m.c.recorder.Eventf(m.node, corev1.EventTypeNormal, ReasonClaimed, "failover target: %s", target)
	}
	m.setCondition(jkev1alpha1.NodeFailoverConditionTargetReserved, metav1.ConditionTrue, ReasonClaimed,
		fmt.Sprintf("%s is claimed (label %s=%s) for %d static IPs needing %s", target, jkev1alpha1.LabelFailoverFor, failed.Name, len(sips), resourceString(need)))
	return target, 0, nil
}

// usage is, for each of nodes, the requests of its pods that are not finished plus the
// reservations of static-IP pods that are absent (the scheduler's staticIPNode cache holds
// those for them). Pods come from the by-node index: no list of every pod.
func (c *Controller) usage(nodes []string) (map[string]corev1.ResourceList, error) {
	out := map[string]corev1.ResourceList{}
	wanted := map[string]bool{}
	var pods []*corev1.Pod
	for _, n := range nodes {
		if n == "" || wanted[n] {
			continue
		}
		wanted[n] = true
		on, err := c.podsOn(n)
		if err != nil {
			return nil, err
		}
		pods = append(pods, on...)
	}
	live := map[string]string{} // namespace/name -> node
	for _, p := range pods {
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		req := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
		req[corev1.ResourcePods] = resource.MustParse("1")
		out[p.Spec.NodeName] = AddResources(out[p.Spec.NodeName], req)
		live[p.Namespace+"/"+p.Name] = p.Spec.NodeName
	}
	sips, err := c.staticIPs.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	for _, s := range sips {
		pod := s.Spec.Pod
		if pod == "" {
			pod = s.Name
		}
		if !wanted[s.Spec.Node] || live[s.Namespace+"/"+pod] == s.Spec.Node {
			continue
		}
		req := s.Spec.Resources.DeepCopy()
		if req == nil {
			req = corev1.ResourceList{}
		}
		req[corev1.ResourcePods] = resource.MustParse("1")
		out[s.Spec.Node] = AddResources(out[s.Spec.Node], req)
	}
	return out, nil
}
