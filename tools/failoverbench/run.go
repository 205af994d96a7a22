package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/tools/localcluster/cluster"
)

// Labels that place the workloads. The EnhancedStatefulSet's pods may run on the failed node
// and the spare (the spare taint keeps them off it until failover opens it); the native
// StatefulSet's on the failed node only until they run, then on every worker.
const (
	labelESTSPool   = "failoverbench.staticip.jke.jdcloud.com/ests"
	labelNativePool = "failoverbench.staticip.jke.jdcloud.com/native"
	setLabel        = "failoverbench.staticip.jke.jdcloud.com/set"
	nameESTS        = "ests"
	nameNative      = "native"
	nameDaemonSet   = "logship"
)

// Config is one benchmark run.
type Config struct {
	Rounds, Replicas int
	Node             string
	Image            string
	Timeout          time.Duration
	// DaemonSet: also run a DaemonSet on the failed node that tolerates every taint and is not
	// on the host network (a log shipper's shape): nothing in Kubernetes deletes its pod from a
	// fenced node, the failover controller does (issue 25).
	DaemonSet bool
}

// Runner drives the cluster.
type Runner struct {
	Kube     kubernetes.Interface
	Staticip versioned.Interface
	Nodes    cluster.Options
	Log      io.Writer
	// Router is the local cluster's datacenter router (nil: none, no route figures), Dialer
	// dials from its outside namespace.
	Router *cluster.Router
	Dialer *outsideDialer
}

func (r *Runner) logf(format string, args ...any) {
	fmt.Fprintf(r.Log, "%s "+format+"\n", append([]any{time.Now().UTC().Format("15:04:05")}, args...)...)
}

// roles are the nodes of a run.
type roles struct {
	failed, spare string
	others        []string
}

// Run runs every round; it returns the rounds measured so far with the first error.
func (r *Runner) Run(ctx context.Context, cfg Config) ([]Round, error) {
	ro, err := r.roles(ctx, cfg.Node)
	if err != nil {
		return nil, err
	}
	r.logf("failing %s; spare %s; native pods move to %v", ro.failed, ro.spare, ro.others)
	var out []Round
	for i := 1; i <= cfg.Rounds; i++ {
		round, err := r.round(ctx, cfg, ro, i)
		if err != nil {
			return out, fmt.Errorf("round %d: %w", i, err)
		}
		r.logf("round %d: ests %s, native %s", i, round.ESTS.Round(10*time.Millisecond), round.Native.Round(10*time.Millisecond))
		out = append(out, round)
	}
	return out, nil
}

// roles picks the spare (labelled, unclaimed), the node to fail (a schedulable Ready worker in
// the spare's zone, the last by name unless named) and the other schedulable workers.
func (r *Runner) roles(ctx context.Context, want string) (roles, error) {
	list, err := r.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return roles{}, err
	}
	var ro roles
	zone := map[string]string{}
	var workers []string
	for _, n := range list.Items {
		zone[n.Name] = n.Labels[corev1.LabelTopologyZone]
		switch {
		case n.Labels[jkev1alpha1.LabelSpare] == "true":
			if n.Labels[jkev1alpha1.LabelFailoverFor] == "" && ro.spare == "" {
				ro.spare = n.Name
			}
		case ready(&n) && !slices.ContainsFunc(n.Spec.Taints, blocking):
			workers = append(workers, n.Name)
		}
	}
	if ro.spare == "" {
		return roles{}, errors.New("no unclaimed spare node (localcluster up --spare-nodes=1)")
	}
	sort.Strings(workers)
	for i := len(workers) - 1; i >= 0; i-- {
		if ro.failed == "" && (workers[i] == want || (want == "" && zone[workers[i]] == zone[ro.spare])) {
			ro.failed = workers[i]
			continue
		}
		ro.others = append(ro.others, workers[i])
	}
	if ro.failed == "" || len(ro.others) == 0 {
		return roles{}, fmt.Errorf("needs a schedulable worker in the spare %s's zone %q (or --node) and another worker; workers: %v", ro.spare, zone[ro.spare], workers)
	}
	return ro, nil
}

func blocking(t corev1.Taint) bool {
	return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
}

func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (r *Runner) round(ctx context.Context, cfg Config, ro roles, i int) (Round, error) {
	ns, err := r.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "failoverbench-"}}, metav1.CreateOptions{})
	if err != nil {
		return Round{}, err
	}
	defer func() { _ = r.Kube.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{}) }()
	if err := r.poll(ctx, time.Minute, "default ServiceAccount", func(ctx context.Context) (bool, error) {
		_, err := r.Kube.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		return Round{}, err
	}
	labels := []struct{ node, key string }{{ro.failed, labelESTSPool}, {ro.spare, labelESTSPool}, {ro.failed, labelNativePool}}
	for _, l := range labels {
		if err := r.label(ctx, l.node, l.key, ns.Name); err != nil {
			return Round{}, err
		}
	}
	defer func() {
		for _, n := range append([]string{ro.failed, ro.spare}, ro.others...) {
			_ = r.label(context.Background(), n, labelESTSPool, "")
			_ = r.label(context.Background(), n, labelNativePool, "")
		}
	}()

	r.logf("round %d: namespace %s, %d static-IP pods and %d native pods on %s", i, ns.Name, cfg.Replicas, cfg.Replicas, ro.failed)
	if err := r.createWorkloads(ctx, ns.Name, cfg, ro.failed); err != nil {
		return Round{}, err
	}
	want := 2 * cfg.Replicas
	if cfg.DaemonSet {
		want++
	}
	var before []*corev1.Pod
	if err := r.poll(ctx, cfg.Timeout, "every pod Ready on "+ro.failed, func(ctx context.Context) (bool, error) {
		before, err = r.pods(ctx, ns.Name)
		if err != nil {
			return false, err
		}
		return AllReadyOn(before, ro.failed, want), nil
	}); err != nil {
		return Round{}, err
	}
	// Every pod event of the cluster, from here to the end of the round, is checked for an IP
	// held by two live pods.
	watchCtx, stopWatch := context.WithCancel(ctx)
	watcher := newDuplicateWatcher(r.Kube)
	watchDone := make(chan error, 1)
	go func() { watchDone <- watcher.run(watchCtx) }()
	defer stopWatch()
	ips := StaticIPs(before, nameESTS)
	// From now on the native pods may be placed on the other workers.
	for _, n := range ro.others {
		if err := r.label(ctx, n, labelNativePool, ns.Name); err != nil {
			return Round{}, err
		}
	}

	// The failed node's ranges, for the router's side (routes.go).
	var moved []jkev1.IPRange
	if r.Router != nil {
		list, err := r.Staticip.JkeV1().IPRanges().List(ctx, metav1.ListOptions{})
		if err != nil {
			return Round{}, err
		}
		for _, rg := range list.Items {
			if rg.Spec.Node == ro.failed {
				moved = append(moved, rg)
			}
		}
	}

	// Power-off, then the operator's fence once the node is NotReady.
	stopped := time.Now()
	if err := cluster.NodeStop(r.Nodes, ro.failed); err != nil {
		return Round{}, err
	}
	booted := false
	defer func() {
		if !booted {
			_ = cluster.NodeStart(context.Background(), r.Nodes, ro.failed, cfg.Timeout)
		}
	}()
	if err := r.poll(ctx, cfg.Timeout, ro.failed+" NotReady", func(ctx context.Context) (bool, error) {
		n, err := r.Kube.CoreV1().Nodes().Get(ctx, ro.failed, metav1.GetOptions{})
		return err == nil && !ready(n), nil
	}); err != nil {
		return Round{}, err
	}
	res := Round{N: i, NotReady: time.Since(stopped), Phases: map[jkev1alpha1.NodeFailoverPhase]time.Duration{}}
	if err := r.setOutOfService(ctx, ro.failed, true); err != nil {
		return Round{}, err
	}
	fenced := time.Now()
	defer func() { _ = r.setOutOfService(context.Background(), ro.failed, false) }()
	var routes *routeTracker
	if r.Router != nil {
		spareIP, err := r.nodeIP(ctx, ro.spare)
		if err != nil {
			return res, err
		}
		trackCtx, stopTracking := context.WithCancel(ctx)
		defer stopTracking()
		routes = r.trackRoutes(trackCtx, *r.Router, r.Dialer, fenced, moved, ips, ro.spare, spareIP)
	}
	if err := r.poll(ctx, cfg.Timeout, "both workloads back", func(ctx context.Context) (bool, error) {
		now := time.Since(fenced)
		if rec, err := r.Staticip.JkeV1alpha1().NodeFailovers().Get(ctx, ro.failed, metav1.GetOptions{}); err == nil {
			if _, seen := res.Phases[rec.Status.Phase]; !seen && rec.Status.Phase != "" {
				res.Phases[rec.Status.Phase] = now
			}
		}
		pods, err := r.pods(ctx, ns.Name)
		if err != nil {
			return false, err
		}
		if res.PodsGone == 0 && OldPodsGone(pods, before) {
			res.PodsGone = now
		}
		if res.ESTS == 0 && MovedWithIPs(pods, ips, ro.spare) {
			res.ESTS = now
		}
		if res.Native == 0 && NativeBack(pods, before, nameNative, ro.failed, cfg.Replicas) {
			res.Native = now
		}
		return res.ESTS > 0 && res.Native > 0 && res.PodsGone > 0 && (routes == nil || routes.result().Complete()), nil
	}); err != nil {
		// Say what was still missing (0: not seen).
		if routes != nil {
			res.Routes = routes.result()
		}
		return res, fmt.Errorf("%w; seen after the fence: ests %s, native %s, old pods gone %s, routes %+v", err, res.ESTS, res.Native, res.PodsGone, res.Routes)
	}
	if routes != nil {
		res.Routes = routes.result()
		r.logf("round %d: range served on %s %s after the fence; FRR's best path via it %s later, the outside's first answer %s later (%s after the pod ran)", i, ro.spare,
			res.Routes.Served.Round(time.Millisecond), res.Routes.FRRAfterServed().Round(time.Millisecond), res.Routes.OutsideAfterServed().Round(time.Millisecond), res.Routes.OutsideAfterPod().Round(time.Millisecond))
	}
	booted = true
	err = r.restore(ctx, cfg, ro, ns.Name)
	stopWatch()
	if werr := <-watchDone; werr != nil && err == nil {
		err = fmt.Errorf("duplicate-IP watch: %w", werr)
	}
	res.Events, res.Duplicates = watcher.result()
	for _, d := range res.Duplicates {
		r.logf("round %d: DUPLICATE IP %s", i, d)
	}
	return res, err
}

// restore gives the cluster its shape back: workloads and their StaticIPs gone, the node
// booted and unfenced, the record deleted, the moved ranges back on the node (a plain move at
// the same generation: the spare drains, the node serves them afresh), the spare unclaimed and
// tainted again.
func (r *Runner) restore(ctx context.Context, cfg Config, ro roles, ns string) error {
	r.logf("restore: deleting the workloads, booting %s", ro.failed)
	_ = r.Staticip.JkeV1alpha1().EnhancedStatefulSets(ns).Delete(ctx, nameESTS, metav1.DeleteOptions{})
	_ = r.Kube.AppsV1().StatefulSets(ns).Delete(ctx, nameNative, metav1.DeleteOptions{})
	_ = r.Kube.AppsV1().DaemonSets(ns).Delete(ctx, nameDaemonSet, metav1.DeleteOptions{})
	if err := cluster.NodeStart(ctx, r.Nodes, ro.failed, cfg.Timeout); err != nil {
		return err
	}
	if err := r.setOutOfService(ctx, ro.failed, false); err != nil {
		return err
	}
	if err := r.poll(ctx, cfg.Timeout, "pods and StaticIPs gone", func(ctx context.Context) (bool, error) {
		pods, err := r.pods(ctx, ns)
		if err != nil {
			return false, err
		}
		sips, err := r.Staticip.JkeV1().StaticIPs(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(pods) == 0 && len(sips.Items) == 0, nil
	}); err != nil {
		return err
	}
	rec, err := r.Staticip.JkeV1alpha1().NodeFailovers().Get(ctx, ro.failed, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("NodeFailover %s: %w", ro.failed, err)
	}
	if err := r.Staticip.JkeV1alpha1().NodeFailovers().Delete(ctx, ro.failed, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if err := r.poll(ctx, cfg.Timeout, "NodeFailover deleted", func(ctx context.Context) (bool, error) {
		_, err := r.Staticip.JkeV1alpha1().NodeFailovers().Get(ctx, ro.failed, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		return err
	}
	for _, mv := range rec.Status.MovedRanges {
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			rg, err := r.Staticip.JkeV1().IPRanges().Get(ctx, mv.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if rg.Spec.Node != "" && rg.Spec.Node != ro.failed {
				// Not straight from the spare to the failed node at the same generation: the
				// API server refuses that (issue 24). Unassigned first, the failed node serves
				// it once the spare has drained it.
				rg.Spec.Node = ""
				if rg, err = r.Staticip.JkeV1().IPRanges().Update(ctx, rg, metav1.UpdateOptions{}); err != nil {
					return err
				}
			}
			if rg.Labels[jkev1.LabelIPPool] != "" {
				// An IPPool's block stays unassigned: the failed node got a fresh block when it
				// owned none, and the allocator returns this one to the pool.
				return nil
			}
			rg.Spec.Node = ro.failed
			_, err = r.Staticip.JkeV1().IPRanges().Update(ctx, rg, metav1.UpdateOptions{})
			return err
		}); err != nil {
			return fmt.Errorf("IPRange %s back to %s: %w", mv.Name, ro.failed, err)
		}
	}
	patch, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"labels": map[string]any{jkev1alpha1.LabelFailoverFor: nil}},
		"spec":     map[string]any{"taints": []corev1.Taint{{Key: jkev1alpha1.TaintSpare, Value: "true", Effect: corev1.TaintEffectNoSchedule}}},
	})
	if _, err := r.Kube.CoreV1().Nodes().Patch(ctx, ro.spare, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("spare %s back to the pool: %w", ro.spare, err)
	}
	return r.poll(ctx, cfg.Timeout, "ranges served by "+ro.failed, func(ctx context.Context) (bool, error) {
		list, err := r.Staticip.JkeV1().IPRanges().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		serves := false
		for i := range list.Items {
			rg := &list.Items[i]
			if rg.Spec.Node == ro.failed {
				if !Served(rg) {
					return false, nil
				}
				serves = true
			}
		}
		return serves, nil
	})
}

// Served: the owner's agent reported the range Synced at its current generation.
func Served(r *jkev1.IPRange) bool {
	if r.Status.ObservedGeneration != r.Generation {
		return false
	}
	for _, c := range r.Status.Conditions {
		if c.Type == "Synced" && c.ObservedGeneration == r.Generation {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

func (r *Runner) createWorkloads(ctx context.Context, ns string, cfg Config, failed string) error {
	if cfg.DaemonSet {
		tmpl := podTemplate(nameDaemonSet, corev1.LabelHostname, failed, cfg.Image)
		tmpl.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
		ds := &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Name: nameDaemonSet},
			Spec: appsv1.DaemonSetSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{setLabel: nameDaemonSet}},
				Template: tmpl,
			},
		}
		if _, err := r.Kube.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	replicas := int32(cfg.Replicas)
	ests := &jkev1alpha1.EnhancedStatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: nameESTS, Annotations: map[string]string{jkev1.AnnotationEnable: "true"}},
		Spec: jkev1alpha1.EnhancedStatefulSetSpec{
			Replicas: &replicas, ServiceName: nameESTS, PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{setLabel: nameESTS}},
			Template: podTemplate(nameESTS, labelESTSPool, ns, cfg.Image),
		},
	}
	if _, err := r.Staticip.JkeV1alpha1().EnhancedStatefulSets(ns).Create(ctx, ests, metav1.CreateOptions{}); err != nil {
		return err
	}
	native := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: nameNative},
		Spec: appsv1.StatefulSetSpec{
			Replicas: &replicas, ServiceName: nameNative, PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{setLabel: nameNative}},
			Template: podTemplate(nameNative, labelNativePool, ns, cfg.Image),
		},
	}
	_, err := r.Kube.AppsV1().StatefulSets(ns).Create(ctx, native, metav1.CreateOptions{})
	return err
}

// podTemplate is the same for both workloads: one testserver, a readiness probe, a small CPU
// request, a short grace period; only the node pool label differs.
func podTemplate(set, poolKey, pool, image string) corev1.PodTemplateSpec {
	grace := int64(1)
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{setLabel: set}},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{poolKey: pool},
			TerminationGracePeriodSeconds: &grace,
			AutomountServiceAccountToken:  new(bool),
			EnableServiceLinks:            new(bool),
			Containers: []corev1.Container{{
				Name: "testserver", Image: image, ImagePullPolicy: corev1.PullNever,
				Args:      []string{"serve", "--listen=:8080"},
				Ports:     []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8080)}},
					PeriodSeconds: 1,
				},
			}},
		},
	}
}

func (r *Runner) pods(ctx context.Context, ns string) ([]*corev1.Pod, error) {
	list, err := r.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := make([]*corev1.Pod, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	return out, nil
}

// label sets (value != "") or removes a node label.
func (r *Runner) label(ctx context.Context, node, key, value string) error {
	var v any
	if value != "" {
		v = value
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{key: v}}})
	_, err := r.Kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// setOutOfService adds or removes node.kubernetes.io/out-of-service=nodeshutdown:NoExecute,
// keeping the node's other taints.
func (r *Runner) setOutOfService(ctx context.Context, node string, on bool) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := r.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		has := slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == jkev1alpha1.TaintOutOfService })
		if has == on {
			return nil
		}
		if on {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: jkev1alpha1.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
		} else {
			n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == jkev1alpha1.TaintOutOfService })
		}
		_, err = r.Kube.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

// poll checks done every 200 ms until it holds or timeout passes.
func (r *Runner) poll(ctx context.Context, timeout time.Duration, what string, done func(context.Context) (bool, error)) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ok, err := done(ctx)
		if err != nil {
			last = err
			return false, nil
		}
		return ok, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %s: %w (last error: %v)", what, err, last)
	}
	return nil
}
