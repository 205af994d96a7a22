// Package integration runs the staticip controllers against a real etcd + kube-apiserver
// (internal/testenv). There is no kubelet and no kube-controller-manager: a small simulated
// kubelet in this file binds pods, gives them IPs (honouring the ip-address annotation, like
// the CNI), sets Ready/NotReady as each test asks, and finishes graceful deletions. There is
// no garbage collector either, so tests check owner references rather than GC deletions.
package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/apis/podip"
	"github.com/staticip/staticip/controllers/pkg/manager"
	"github.com/staticip/staticip/internal/testenv"
	"github.com/staticip/staticip/internal/testsupport"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type fixture struct {
	t      *testing.T
	ctx    context.Context
	cfg    *rest.Config
	kube   kubernetes.Interface
	client versioned.Interface
	ns     string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	env := testenv.Get(t)
	ctx := testenv.Context(t, 5*time.Minute)
	f := &fixture{t: t, ctx: ctx, cfg: rest.CopyConfig(env.Config)}
	f.kube = kubernetes.NewForConfigOrDie(f.cfg)
	f.client = versioned.NewForConfigOrDie(f.cfg)
	f.ns = "ctrl-" + rand.String(6)
	if _, err := f.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No kube-controller-manager creates the default ServiceAccount.
	if _, err := f.kube.CoreV1().ServiceAccounts(f.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.kube.CoreV1().Namespaces().Delete(context.Background(), f.ns, metav1.DeleteOptions{})
	})
	return f
}

// startManager runs the controllers in-process without leader election until the test ends.
func (f *fixture) startManager(controllers ...string) {
	f.startManagerWith(nil, controllers...)
}

// startManagerWith is startManager with options changed by mutate.
func (f *fixture) startManagerWith(mutate func(*manager.Options), controllers ...string) {
	o := manager.NewOptions()
	o.LeaderElect = false
	o.Serving.MetricsBindAddress, o.Serving.HealthBindAddress = "0", "0"
	o.Workers = 4
	if len(controllers) > 0 {
		o.Controllers = controllers
	}
	if mutate != nil {
		mutate(o)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- manager.Run(ctx, o, f.cfg) }()
	f.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			f.t.Errorf("manager: %v", err)
		}
	})
}

// eventually polls cond until it holds or the timeout passes (testsupport.Eventually).
func (f *fixture) eventually(timeout time.Duration, what string, cond func() (bool, error)) {
	f.t.Helper()
	testsupport.Eventually(f.ctx, f.t, timeout, what, cond)
}

func (f *fixture) pods() map[string]*corev1.Pod {
	list, err := f.kube.CoreV1().Pods(f.ns).List(f.ctx, metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	out := map[string]*corev1.Pod{}
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out
}

// kubelet is the simulated node side: it binds pods, assigns IPs, drives readiness and
// finishes graceful deletions.
type kubelet struct {
	f          *fixture
	node       string // bind pods here when set; pods with a node affinity go to that node
	readyDelay time.Duration

	mu       sync.Mutex
	notReady map[string]bool
	seen     map[string]time.Time // UID -> first seen
	nextIP   int
	subnet   int
	onNewPod func(*corev1.Pod) error
	problems []error
	stopped  chan struct{}
	ipsInUse map[string]string // ip -> pod UID
}

// containerIDs numbers the simulated containers.
var containerIDs atomic.Int64

// subnets gives every simulated node its own addresses: IPs are cluster-wide, and the
// records of earlier tests stay (no namespace controller deletes them).
var subnets atomic.Int32

func (f *fixture) startKubelet(node string, readyDelay time.Duration, onNewPod func(*corev1.Pod) error) *kubelet {
	k := &kubelet{f: f, node: node, readyDelay: readyDelay, notReady: map[string]bool{}, seen: map[string]time.Time{},
		nextIP: 10, subnet: int(subnets.Add(1)), onNewPod: onNewPod, stopped: make(chan struct{}), ipsInUse: map[string]string{}}
	if node != "" {
		// The node's addresses are an IPRange of the node, as the range allocator gives them:
		// the StaticIP controller records only IPs of the pod's node's ranges.
		r := &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-kubelet-%d", f.ns, k.subnet)},
			Spec: jkev1.IPRangeSpec{CIDR: fmt.Sprintf("10.77.%d.0/24", k.subnet), Node: node}}
		if _, err := f.client.JkeV1().IPRanges().Create(f.ctx, r, metav1.CreateOptions{}); err != nil {
			f.t.Fatal(err)
		}
		f.t.Cleanup(func() { _ = f.client.JkeV1().IPRanges().Delete(context.Background(), r.Name, metav1.DeleteOptions{}) })
	}
	ctx, cancel := context.WithCancel(f.ctx)
	go func() {
		defer close(k.stopped)
		_ = wait.PollUntilContextCancel(ctx, 30*time.Millisecond, true, func(context.Context) (bool, error) {
			k.tick(ctx)
			return false, nil
		})
	}()
	f.t.Cleanup(func() {
		cancel()
		<-k.stopped
		k.mu.Lock()
		defer k.mu.Unlock()
		for _, p := range k.problems {
			f.t.Error(p)
		}
	})
	return k
}

func (k *kubelet) setNotReady(name string, notReady bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.notReady[name] = notReady
}

func (k *kubelet) problem(err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.problems = append(k.problems, err)
}

func affinityNode(pod *corev1.Pod) string {
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ""
	}
	for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, m := range t.MatchFields {
			if m.Key == "metadata.name" && len(m.Values) == 1 {
				return m.Values[0]
			}
		}
	}
	return ""
}

func (k *kubelet) tick(ctx context.Context) {
	kube := k.f.kube
	list, err := kube.CoreV1().Pods(k.f.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for i := range list.Items {
		pod := &list.Items[i]
		if pod.DeletionTimestamp != nil {
			_ = kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0)),
				Preconditions: &metav1.Preconditions{UID: &pod.UID}})
			k.mu.Lock()
			for ip, uid := range k.ipsInUse {
				if uid == string(pod.UID) {
					delete(k.ipsInUse, ip)
				}
			}
			k.mu.Unlock()
			continue
		}
		k.mu.Lock()
		first, seen := k.seen[string(pod.UID)]
		if !seen {
			first = time.Now()
			k.seen[string(pod.UID)] = first
		}
		notReady := k.notReady[pod.Name]
		k.mu.Unlock()
		if !seen && k.onNewPod != nil {
			if err := k.onNewPod(pod); err != nil {
				k.problem(err)
			}
		}
		if k.node != "" && pod.Spec.NodeName == "" {
			node := k.node
			if n := affinityNode(pod); n != "" {
				node = n
			}
			err := kube.CoreV1().Pods(pod.Namespace).Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, UID: pod.UID},
				Target: corev1.ObjectReference{Kind: "Node", Name: node}}, metav1.CreateOptions{})
			if err != nil {
				continue
			}
			if pod, err = kube.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{}); err != nil {
				continue
			}
		}
		ready := !notReady && time.Since(first) >= k.readyDelay
		k.setStatus(ctx, pod, ready)
	}
}

// brokenImage: the simulated kubelet cannot pull an image whose name contains "broken": the
// container waits in ErrImagePull (no container ID), the pod stays Pending (or, once it ran,
// Running and not Ready), as on a real node.
func brokenImage(image string) bool { return strings.Contains(image, "broken") }

// setStatus writes what a kubelet would: Pending/Running, Ready (or not: the test asks, a
// container cannot start, or a readiness gate is not True), per-container image, state and
// container ID (a new ID whenever the container is restarted with another image, as the
// kubelet does for an in-place update) and, on a node, the pod IP (the annotated one, like the
// CNI, else a fresh one).
func (k *kubelet) setStatus(ctx context.Context, cached *corev1.Pod, ready bool) {
	pod := cached.DeepCopy()
	var statuses []corev1.ContainerStatus
	running := 0
	for i, c := range pod.Spec.Containers {
		st := corev1.ContainerStatus{Name: c.Name, Image: c.Image}
		if brokenImage(c.Image) {
			st.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: "pull " + c.Image + ": not found"}
			// Like the kubelet, a container that cannot be restarted is reported with the ID
			// and image of the last container that ran.
			if i < len(pod.Status.ContainerStatuses) && pod.Status.ContainerStatuses[i].ContainerID != "" {
				st.ContainerID, st.Image = pod.Status.ContainerStatuses[i].ContainerID, pod.Status.ContainerStatuses[i].Image
			}
		} else {
			st.State.Running = &corev1.ContainerStateRunning{}
			running++
			if prev := pod.Status.ContainerStatuses; i < len(prev) && prev[i].Image == c.Image && prev[i].ContainerID != "" && prev[i].State.Running != nil {
				st.ContainerID = pod.Status.ContainerStatuses[i].ContainerID
				st.State.Running.StartedAt = pod.Status.ContainerStatuses[i].State.Running.StartedAt
			} else {
				st.ContainerID = fmt.Sprintf("sim://%s-%d", pod.UID, containerIDs.Add(1))
				st.State.Running.StartedAt = metav1.Now()
			}
		}
		statuses = append(statuses, st)
	}
	ready = ready && running == len(pod.Spec.Containers)
	for _, g := range pod.Spec.ReadinessGates {
		found := false
		for _, c := range pod.Status.Conditions {
			found = found || (c.Type == g.ConditionType && c.Status == corev1.ConditionTrue)
		}
		ready = ready && found
	}
	for i := range statuses {
		statuses[i].Ready = ready && statuses[i].State.Running != nil
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	phase := corev1.PodRunning
	if running == 0 && pod.Status.Phase != corev1.PodRunning {
		phase = corev1.PodPending
	}
	changed := pod.Status.Phase != phase
	pod.Status.Phase = phase
	found := false
	for i := range pod.Status.Conditions {
		c := &pod.Status.Conditions[i]
		if c.Type == corev1.PodReady {
			found = true
			if c.Status != status {
				c.Status, c.LastTransitionTime, changed = status, metav1.Now(), true
			}
		}
	}
	if !found {
		pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()})
		changed = true
	}
	if !apiequality.Semantic.DeepEqual(statuses, pod.Status.ContainerStatuses) {
		changed = true
	}
	pod.Status.ContainerStatuses = statuses
	if pod.Spec.NodeName != "" && pod.Status.PodIP == "" {
		k.mu.Lock()
		ip := pod.Annotations[podip.AnnotationIPAddress]
		if owner, used := k.ipsInUse[ip]; ip == "" || (used && owner != string(pod.UID)) {
			for {
				k.nextIP++
				ip = fmt.Sprintf("10.77.%d.%d", k.subnet, k.nextIP)
				if _, used := k.ipsInUse[ip]; !used {
					break
				}
			}
		}
		k.ipsInUse[ip] = string(pod.UID)
		k.mu.Unlock()
		pod.Status.PodIP, pod.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
		changed = true
	}
	if !changed {
		return
	}
	if _, err := k.f.kube.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil &&
		!apierrors.IsConflict(err) && !apierrors.IsNotFound(err) && !errors.Is(err, context.Canceled) {
		k.problem(fmt.Errorf("kubelet: update status of %s: %w", pod.Name, err))
	}
}

func (f *fixture) kubeFor(cfg *rest.Config) kubernetes.Interface {
	return kubernetes.NewForConfigOrDie(cfg)
}
