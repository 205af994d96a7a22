package bench

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/staticip/staticip/apis/ordinal"
)

// live reports whether a pod counts as present: not terminating and not finished.
func live(p *corev1.Pod) bool {
	return p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded
}

func ready(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// runsImage reports whether every container of the pod runs image, by what the kubelet
// reports (the spec alone says nothing about an in-place update that has not happened yet).
func runsImage(p *corev1.Pod, image string) bool {
	if len(p.Status.ContainerStatuses) != len(p.Spec.Containers) || len(p.Spec.Containers) == 0 {
		return false
	}
	for _, c := range p.Spec.Containers {
		if c.Image != image {
			return false
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Image != image || cs.State.Running == nil {
			return false
		}
	}
	return true
}

// Unavailable is the number of ordinals in [0, replicas) of set setName without a live,
// Ready pod — the count a maxUnavailable budget bounds (minReadySeconds 0). Pods of other
// names are ignored.
func Unavailable(setName string, replicas int, pods []*corev1.Pod) int {
	return len(UnavailablePods(setName, replicas, pods))
}

// UnavailablePods names the ordinals Unavailable counts, in order, each with why:
// "web-3 missing", "web-4 terminating", "web-5 not ready".
func UnavailablePods(setName string, replicas int, pods []*corev1.Pod) []string {
	why := make(map[int]string, replicas)
	up := make(map[int]bool, replicas)
	for _, p := range pods {
		n := ordinal.Of(setName, p.Name)
		if n < 0 || n >= replicas {
			continue
		}
		switch {
		case live(p) && ready(p):
			up[n] = true
		case p.DeletionTimestamp != nil:
			why[n] = "terminating"
		case !live(p):
			why[n] = string(p.Status.Phase)
		default:
			why[n] = "not ready"
		}
	}
	var out []string
	for n := range replicas {
		if up[n] {
			continue
		}
		reason := why[n]
		if reason == "" {
			reason = "missing"
		}
		out = append(out, fmt.Sprintf("%s-%d %s", setName, n, reason))
	}
	return out
}

// RolledOut reports whether every ordinal in [0, replicas) has a live, Ready pod whose
// containers run image, and no pod of the set is left over at a higher ordinal or
// terminating.
func RolledOut(setName string, replicas int, image string, pods []*corev1.Pod) bool {
	done := make(map[int]bool, replicas)
	for _, p := range pods {
		n := ordinal.Of(setName, p.Name)
		if n < 0 {
			continue
		}
		if n >= replicas || !live(p) {
			return false
		}
		if ready(p) && runsImage(p, image) {
			done[n] = true
		}
	}
	return len(done) == replicas
}
