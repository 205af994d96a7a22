package v1alpha1

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestNodeOutOfService(t *testing.T) {
	for _, tc := range []struct {
		name   string
		taints []corev1.Taint
		want   bool
	}{
		{"no taints", nil, false},
		{"unreachable is not out-of-service", []corev1.Taint{{Key: "node.kubernetes.io/unreachable", Effect: corev1.TaintEffectNoExecute}}, false},
		{"NoExecute", []corev1.Taint{{Key: TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}}, true},
		{"any effect counts", []corev1.Taint{{Key: "other", Effect: corev1.TaintEffectNoSchedule}, {Key: TaintOutOfService, Effect: corev1.TaintEffectNoSchedule}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := NodeOutOfService(&corev1.Node{Spec: corev1.NodeSpec{Taints: tc.taints}}); got != tc.want {
				t.Errorf("NodeOutOfService = %v, want %v", got, tc.want)
			}
		})
	}
}
