package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// A node without a usable range takes no pods, whatever the runtime (issue 24): the agent
// reports it on its Node as CNIs do (Calico, Cilium, kube-ovn), with the condition
// NetworkUnavailable — True (StaticIPNoRange) while the node allocates from no range, False
// (StaticIPRangeReady) once it does. The node lifecycle controller taints a node whose
// NetworkUnavailable is True with node.kubernetes.io/network-unavailable:NoSchedule, so the
// scheduler keeps every pod off it that does not tolerate the taint (the DaemonSet controller
// adds that toleration only to host-network pods).

// reportNetwork patches the node's NetworkUnavailable condition (nodes/status, a strategic
// merge on the conditions' type) when its status, reason or message differ from what the node
// carries (or what this agent last wrote, while its cache lags). The transition time moves only
// when the status does.
func (a *Agent) reportNetwork(ctx context.Context, plan rangePlan, current *corev1.NodeCondition) error {
	status, reason, message := networkCondition(a.cfg.NodeName, plan)
	key := string(status) + "/" + reason + "/" + message
	if current != nil && current.Status == status && current.Reason == reason && current.Message == message {
		a.lastNetwork = key
		return nil
	}
	if key == a.lastNetwork {
		return nil
	}
	now := metav1.NewTime(time.Now())
	transition := now
	if current != nil && current.Status == status {
		transition = current.LastTransitionTime
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{{
		Type: corev1.NodeNetworkUnavailable, Status: status, Reason: reason, Message: message,
		LastHeartbeatTime: now, LastTransitionTime: transition}}}})
	if err != nil {
		return err
	}
	if _, err := a.kube.CoreV1().Nodes().Patch(ctx, a.cfg.NodeName, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); apierrors.IsNotFound(err) {
		return nil // no Node object yet: written once it exists
	} else if err != nil {
		return fmt.Errorf("node %s condition %s: %w", a.cfg.NodeName, corev1.NodeNetworkUnavailable, err)
	}
	if current == nil || current.Status != status {
		a.logf("node %s: %s=%s (%s): %s", a.cfg.NodeName, corev1.NodeNetworkUnavailable, status, reason, message)
	}
	a.lastNetwork = key
	return nil
}

// networkConditionOf is the node's NetworkUnavailable condition, or nil.
func networkConditionOf(n *corev1.Node) *corev1.NodeCondition {
	if n == nil {
		return nil
	}
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeNetworkUnavailable {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}
