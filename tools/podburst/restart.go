package main

import (
	"context"
	"fmt"
	"os"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/tools/podwatch"
)

// restartWorkload is the one workload of the restart measurement.
const restartWorkload = "restart"

// Restarts are the timings of one restart run, one entry per deletion.
type Restarts struct {
	Back []time.Duration // delete call -> the successor (same name, new UID) Running with the same IP
	Gone []time.Duration // delete call -> the old pod object gone
}

// measureRestarts creates one workload of `replicas` pods (the burst's pod template) that
// keeps its pods' IPs across deletion — kind ests: a static-IP EnhancedStatefulSet (staticip);
// kind statefulset: a native StatefulSet (Spiderpool keeps a StatefulSet pod's IP in its
// SpiderEndpoint) — waits until all run, then `count` times deletes the next pod (round the
// ordinals) and times its successor to Running. A successor with another IP than its
// predecessor is an error: the run fails.
func measureRestarts(ctx context.Context, client kubernetes.Interface, sip versioned.Interface, ns, kind, image string, replicas int32, count int) (Restarts, error) {
	var res Restarts
	labels := map[string]string{"podburst": restartWorkload}
	tmpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podSpec(image)}
	selector := &metav1.LabelSelector{MatchLabels: labels}
	switch kind {
	case "ests":
		if _, err := sip.JkeV1alpha1().EnhancedStatefulSets(ns).Create(ctx, &jkev1alpha1.EnhancedStatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: restartWorkload, Annotations: map[string]string{jkev1.AnnotationEnable: "true"}},
			Spec: jkev1alpha1.EnhancedStatefulSetSpec{Replicas: &replicas, Selector: selector, Template: tmpl,
				ServiceName: restartWorkload, PodManagementPolicy: appsv1.ParallelPodManagement},
		}, metav1.CreateOptions{}); err != nil {
			return res, err
		}
	case "statefulset":
		if _, err := client.AppsV1().StatefulSets(ns).Create(ctx, &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: restartWorkload},
			Spec: appsv1.StatefulSetSpec{Replicas: &replicas, Selector: selector, Template: tmpl,
				ServiceName: restartWorkload, PodManagementPolicy: appsv1.ParallelPodManagement},
		}, metav1.CreateOptions{}); err != nil {
			return res, err
		}
	default:
		return res, fmt.Errorf("--restarts with --kind=%s: want ests or statefulset", kind)
	}
	running := func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && p.Status.PodIP != ""
	}
	for i := range replicas {
		if _, err := waitPod(ctx, client, ns, podName(i), "", nil, func(p *corev1.Pod) (bool, error) { return running(p) && podReady(p), nil }); err != nil {
			return res, err
		}
	}
	for i := range count {
		name := podName(int32(i) % replicas)
		old, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return res, err
		}
		start := time.Now()
		if err := client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &old.UID}}); err != nil {
			return res, err
		}
		var goneAt time.Time
		at, err := waitPod(ctx, client, ns, name, old.ResourceVersion, func(t time.Time, p *corev1.Pod) {
			if p.UID == old.UID && goneAt.IsZero() {
				goneAt = t
			}
		}, func(p *corev1.Pod) (bool, error) {
			if p.UID == old.UID || !running(p) {
				return false, nil
			}
			if p.Status.PodIP != old.Status.PodIP {
				return false, fmt.Errorf("deletion %d: %s came back with IP %s, had %s", i+1, name, p.Status.PodIP, old.Status.PodIP)
			}
			return true, nil
		})
		if err != nil {
			return res, err
		}
		if goneAt.IsZero() { // the watch missed the deletion: count it as at the end
			goneAt = at
		}
		res.Back, res.Gone = append(res.Back, at.Sub(start)), append(res.Gone, goneAt.Sub(start))
		// The successor Ready before the next deletion, so each one starts from a settled set.
		if _, err := waitPod(ctx, client, ns, name, "", nil, func(p *corev1.Pod) (bool, error) { return p.UID != old.UID && podReady(p), nil }); err != nil {
			return res, err
		}
		fmt.Fprintf(os.Stderr, "podburst: restart %d/%d: %s back Running with IP %s after %s (old pod gone after %s)\n",
			i+1, count, name, old.Status.PodIP, res.Back[i].Round(10*time.Millisecond), res.Gone[i].Round(10*time.Millisecond))
	}
	return res, nil
}

func podName(ordinal int32) string { return fmt.Sprintf("%s-%d", restartWorkload, ordinal) }

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitPod follows pod name until done says so (podwatch.Until); deleted (if set) gets each
// Deleted event with the time it arrived.
func waitPod(ctx context.Context, client kubernetes.Interface, ns, name, resourceVersion string, deleted func(time.Time, *corev1.Pod), done func(*corev1.Pod) (bool, error)) (time.Time, error) {
	var observe func(time.Time, watch.EventType, *corev1.Pod)
	if deleted != nil {
		observe = func(t time.Time, typ watch.EventType, p *corev1.Pod) {
			if typ == watch.Deleted {
				deleted(t, p)
			}
		}
	}
	return podwatch.Until(ctx, client, ns, name, resourceVersion, observe, done)
}
