package enhancedstatefulset

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
)

func TestWithOutOfServiceToleration(t *testing.T) {
	outOfService := func(effect corev1.TaintEffect, seconds *int64) corev1.Toleration {
		return corev1.Toleration{Key: jkev1alpha1.TaintOutOfService, Operator: corev1.TolerationOpExists, Effect: effect, TolerationSeconds: seconds}
	}
	other := corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "db", Effect: corev1.TaintEffectNoSchedule}
	for _, tc := range []struct {
		name string
		own  []corev1.Toleration
		d    time.Duration
		want []corev1.Toleration
	}{
		{"off (no node failover beside the controller)", nil, 0, nil},
		{"added for the duration, in whole seconds", nil, 185 * time.Second, []corev1.Toleration{outOfService(corev1.TaintEffectNoExecute, ptr.To[int64](185))}},
		{"beside the template's other tolerations", []corev1.Toleration{other}, time.Minute,
			[]corev1.Toleration{other, outOfService(corev1.TaintEffectNoExecute, ptr.To[int64](60))}},
		{"the template's own out-of-service toleration wins", []corev1.Toleration{outOfService(corev1.TaintEffectNoExecute, ptr.To[int64](10))}, time.Minute,
			[]corev1.Toleration{outOfService(corev1.TaintEffectNoExecute, ptr.To[int64](10))}},
		{"a template that tolerates every taint needs none", []corev1.Toleration{{Operator: corev1.TolerationOpExists}}, time.Minute,
			[]corev1.Toleration{{Operator: corev1.TolerationOpExists}}},
		{"a NoSchedule-only toleration of the key does not cover NoExecute", []corev1.Toleration{outOfService(corev1.TaintEffectNoSchedule, nil)}, time.Minute,
			[]corev1.Toleration{outOfService(corev1.TaintEffectNoSchedule, nil), outOfService(corev1.TaintEffectNoExecute, ptr.To[int64](60))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{Tolerations: append([]corev1.Toleration(nil), tc.own...)}}
			WithOutOfServiceToleration(pod, tc.d)
			if len(pod.Spec.Tolerations) != len(tc.want) {
				t.Fatalf("tolerations %+v, want %+v", pod.Spec.Tolerations, tc.want)
			}
			for i := range tc.want {
				got, want := pod.Spec.Tolerations[i], tc.want[i]
				if got.Key != want.Key || got.Operator != want.Operator || got.Effect != want.Effect || got.Value != want.Value ||
					ptr.Deref(got.TolerationSeconds, -1) != ptr.Deref(want.TolerationSeconds, -1) {
					t.Errorf("toleration %d: %+v (seconds %v), want %+v (seconds %v)", i, got, ptr.Deref(got.TolerationSeconds, -1), want, ptr.Deref(want.TolerationSeconds, -1))
				}
			}
		})
	}
}

// TestCreatedPodsTolerateOutOfServiceWhenFailoverRuns: the pods the controller creates carry
// the toleration when OutOfServiceToleration is set (the manager sets it where node failover
// runs) and none otherwise; the set's template is not changed.
func TestCreatedPodsTolerateOutOfServiceWhenFailoverRuns(t *testing.T) {
	for _, d := range []time.Duration{0, 3 * time.Minute} {
		f := newStaleCacheFixture(t, 0, 1) // web-2 is missing: the sync creates it
		f.c.OutOfServiceToleration = d
		f.sync(t)
		var created *corev1.Pod
		for _, a := range f.kube.Actions() {
			if c, ok := a.(k8stesting.CreateAction); ok && a.GetResource().Resource == "pods" {
				created = c.GetObject().(*corev1.Pod)
			}
		}
		if created == nil {
			t.Fatalf("d=%v: no pod created (writes %v)", d, f.podWrites())
		}
		var seconds []int64
		for _, tol := range created.Spec.Tolerations {
			if tol.Key == jkev1alpha1.TaintOutOfService && tol.Effect == corev1.TaintEffectNoExecute && tol.TolerationSeconds != nil {
				seconds = append(seconds, *tol.TolerationSeconds)
			}
		}
		switch {
		case d == 0 && len(seconds) != 0:
			t.Errorf("without node failover the created pod %s tolerates out-of-service for %v s", created.Name, seconds)
		case d > 0 && (len(seconds) != 1 || seconds[0] != int64(d/time.Second)):
			t.Errorf("with OutOfServiceToleration %v the created pod %s's out-of-service tolerations: %v s (%+v)", d, created.Name, seconds, created.Spec.Tolerations)
		}
	}
}
