package main

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

// comparePools measures pod start with a per-workload pool against the default pool (issue 39,
// Measure): pods of namespace "pool" name an IPPool selecting that namespace in their
// staticip.jke.jdcloud.com/ippools annotation (as a workload's template would), pods of namespace
// "default" name none; all pinned to one node, one at a time. A warm-up pod of each kind first
// (the pool's first pod there waits for the allocator's block: reported, not counted); then
// rounds alternating the order (default first in odd rounds), each deleting its pods after.
func comparePools(ctx context.Context, kube kubernetes.Interface, sip versioned.Interface, node, cidr, image string, count, rounds int) error {
	if node == "" {
		return fmt.Errorf("--node is required with --compare-pool")
	}
	prefix, err := netip.ParsePrefix(cidr)
	if err != nil {
		return err
	}
	suffix := rand.String(5)
	label := map[string]string{"staticip-podstartup/pool": suffix}
	bits := int32(28)
	if prefix.Bits() > 28 {
		bits = int32(prefix.Bits())
	}
	pool, err := sip.JkeV1().IPPools().Create(ctx, &jkev1.IPPool{ObjectMeta: metav1.ObjectMeta{Name: "podstartup-" + suffix},
		Spec: jkev1.IPPoolSpec{CIDRs: []string{prefix.String()}, BlockSize: &bits,
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: label},
			ReleaseAfter:      &metav1.Duration{Duration: time.Hour}}}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	var namespaces []string
	defer func() {
		ctx := context.Background()
		for _, ns := range namespaces {
			_ = kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
		}
		// The pool's blocks are released once its pods are gone; the pool goes with them.
		_ = sip.JkeV1().IPPools().Delete(ctx, pool.Name, metav1.DeleteOptions{})
	}()
	nsDefault, err := newNamespace(ctx, kube, "podstartup-default-", nil)
	if nsDefault != "" {
		namespaces = append(namespaces, nsDefault)
	}
	if err != nil {
		return err
	}
	nsPool, err := newNamespace(ctx, kube, "podstartup-pool-", label)
	if nsPool != "" {
		namespaces = append(namespaces, nsPool)
	}
	if err != nil {
		return err
	}
	annotations := map[string]string{jkev1.AnnotationIPPools: `["` + pool.Name + `"]`}

	start := func(ns, name string, ann map[string]string) (time.Duration, string, error) {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann},
			Spec: corev1.PodSpec{
				NodeSelector:                  map[string]string{"kubernetes.io/hostname": node},
				TerminationGracePeriodSeconds: new(int64),
				Containers:                    []corev1.Container{{Name: "c", Image: image, ImagePullPolicy: corev1.PullIfNotPresent, Args: []string{"serve"}}},
			},
		}
		began := time.Now()
		created, err := kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			return 0, "", err
		}
		d, _, err := waitRunning(ctx, kube, ns, created, began)
		if err != nil {
			return 0, "", fmt.Errorf("pod %s/%s: %w", ns, name, err)
		}
		got, err := kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return 0, "", err
		}
		return d, got.Status.PodIP, nil
	}
	inPool := func(ip string) bool {
		a, err := netip.ParseAddr(ip)
		return err == nil && prefix.Contains(a)
	}
	for _, w := range []struct{ ns, name string }{{nsDefault, "warm"}, {nsPool, "warm"}} {
		ann := map[string]string(nil)
		if w.ns == nsPool {
			ann = annotations
		}
		d, ip, err := start(w.ns, w.name, ann)
		if err != nil {
			return err
		}
		fmt.Printf("warm-up %s: Running after %s with %s\n", w.ns, d.Round(time.Millisecond), ip)
	}
	medians := map[string][]time.Duration{}
	for r := range rounds {
		order := []string{"default", "pool"}
		if r%2 == 1 {
			order = []string{"pool", "default"}
		}
		for _, mode := range order {
			ns, ann := nsDefault, map[string]string(nil)
			if mode == "pool" {
				ns, ann = nsPool, annotations
			}
			var ds []time.Duration
			for i := range count {
				name := fmt.Sprintf("r%d-p%02d", r, i)
				d, ip, err := start(ns, name, ann)
				if err != nil {
					return err
				}
				if (mode == "pool") != inPool(ip) {
					return fmt.Errorf("round %d: %s pod %s got %s (pool %s)", r, mode, name, ip, prefix)
				}
				ds = append(ds, d)
			}
			m := median(ds)
			medians[mode] = append(medians[mode], m)
			fmt.Printf("round %d %-7s: %d pods, median %s (min %s, max %s)\n", r, mode, count, m.Round(time.Millisecond),
				minOf(ds).Round(time.Millisecond), maxOf(ds).Round(time.Millisecond))
			if err := kube.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)},
				metav1.ListOptions{FieldSelector: "metadata.name!=warm"}); err != nil {
				return err
			}
			if err := waitPodsGone(ctx, kube, ns, 1); err != nil {
				return err
			}
		}
	}
	var ratios []float64
	for r := range rounds {
		ratios = append(ratios, float64(medians["default"][r])/float64(medians["pool"][r]))
	}
	sort.Float64s(ratios)
	fmt.Printf("pod create -> Running, per-workload pool vs default pool, %d rounds x %d pods on %s: default median of medians %s, pool %s; speed ratio default/pool per round %.3f..%.3f, median %.3f (goal >= 0.95)\n",
		rounds, count, node, median(medians["default"]).Round(time.Millisecond), median(medians["pool"]).Round(time.Millisecond),
		ratios[0], ratios[len(ratios)-1], ratios[len(ratios)/2])
	return nil
}

// newNamespace creates a namespace and waits for its default ServiceAccount (pods need it
// before they can be created). It returns the name whenever the namespace was created.
func newNamespace(ctx context.Context, kube kubernetes.Interface, generateName string, labels map[string]string) (string, error) {
	ns, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: generateName, Labels: labels}}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	for began := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		if _, err := kube.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			return ns.Name, nil
		}
		if time.Since(began) > time.Minute {
			return ns.Name, fmt.Errorf("no default ServiceAccount in %s", ns.Name)
		}
	}
}

// waitPodsGone waits until ns has at most keep pods (the warm-up pod stays).
func waitPodsGone(ctx context.Context, kube kubernetes.Interface, ns string, keep int) error {
	for began := time.Now(); ; time.Sleep(200 * time.Millisecond) {
		pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(pods.Items) <= keep {
			return nil
		}
		if time.Since(began) > 2*time.Minute {
			return fmt.Errorf("%d pods of %s not gone after 2m", len(pods.Items)-keep, ns)
		}
	}
}

// median, minOf and maxOf of durations (ds is not changed).
func median(ds []time.Duration) time.Duration { return sortedAt(ds, len(ds)/2) }

func minOf(ds []time.Duration) time.Duration { return sortedAt(ds, 0) }

func maxOf(ds []time.Duration) time.Duration { return sortedAt(ds, len(ds)-1) }

func sortedAt(ds []time.Duration, i int) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(a, b int) bool { return s[a] < s[b] })
	return s[i]
}
