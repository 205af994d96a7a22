package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	"github.com/staticip/staticip/controllers/pkg/manager"
	"github.com/staticip/staticip/internal/testenv"
)

type replica struct {
	name    string
	cancel  context.CancelFunc
	done    chan struct{} // closed when Run returned; err is then its result
	err     error
	leading chan time.Time
}

func (f *fixture) startReplica(name string, mutate func(*manager.Config)) *replica {
	o := manager.NewOptions()
	o.LeaderElectNamespace = f.ns
	o.LeaderElectLeaseDuration, o.LeaderElectRenewDeadline, o.LeaderElectRetryPeriod = 3*time.Second, 2*time.Second, 250*time.Millisecond
	o.Serving.MetricsBindAddress, o.Serving.HealthBindAddress = "0", "0"
	r := &replica{name: name, done: make(chan struct{}), leading: make(chan time.Time, 1)}
	c := &manager.Config{Options: o, Rest: f.cfg, Hooks: manager.Hooks{Identity: name,
		OnStartedLeading: func(string) { r.leading <- time.Now() }}}
	if mutate != nil {
		mutate(c)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	r.cancel = cancel
	go func() {
		defer close(r.done)
		r.err = manager.RunConfig(ctx, c)
	}()
	f.t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(30 * time.Second):
			f.t.Errorf("replica %s did not stop", name)
		}
	})
	return r
}

func (f *fixture) leaseHolder() string {
	lease, err := f.kube.CoordinationV1().Leases(f.ns).Get(f.ctx, manager.ComponentName, metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil {
		return ""
	}
	return *lease.Spec.HolderIdentity
}

// TestLeaderFailover: two managers against one API server; one leads; the leader dies in
// the middle of a rollout without releasing the lease (a crash); the other takes over within
// the lease duration (plus one retry period), finishes the rollout, and the maxUnavailable
// budget holds across the handover.
func TestLeaderFailover(t *testing.T) {
	f := newFixture(t)
	f.startKubelet("", 400*time.Millisecond, nil)
	crash := func(c *manager.Config) { c.LeaderElectReleaseOnCancel = false }
	a := f.startReplica("replica-a", crash)
	select {
	case <-a.leading:
	case <-time.After(30 * time.Second):
		t.Fatal("replica-a never became leader")
	}
	b := f.startReplica("replica-b", crash)
	if holder := f.leaseHolder(); holder != "replica-a" {
		t.Fatalf("lease holder %q, want replica-a", holder)
	}
	f.createSet(newSet("lead", 6, func(s *jkev1alpha1.EnhancedStatefulSet) {
		s.Spec.PodManagementPolicy = appsv1.ParallelPodManagement
		s.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable = ptr.To(intstr.FromInt32(2))
	}))
	v1 := f.waitSettled("lead", time.Minute)
	select {
	case <-b.leading:
		t.Fatal("replica-b leads while replica-a holds the lease")
	default:
	}

	mon := f.monitorBudget("lead", 6)
	f.updateSet("lead", func(s *jkev1alpha1.EnhancedStatefulSet) { s.Spec.Template.Spec.Containers[0].Image = "app:v2" })
	f.eventually(time.Minute, "rollout under way", func() (bool, error) {
		for _, rev := range podRevisions(f.pods(), "lead", 6) {
			if rev != v1.Status.UpdateRevision && rev != "<none>" {
				return true, nil
			}
		}
		return false, nil
	})

	// Crash the leader mid-rollout: its lease stays until it expires.
	a.cancel()
	killed := time.Now()
	<-a.done
	if a.err != nil {
		t.Fatalf("replica-a stop: %v", a.err)
	}
	var took time.Time
	select {
	case took = <-b.leading:
	case <-time.After(30 * time.Second):
		t.Fatal("replica-b never took over")
	}
	lease := 3 * time.Second
	t.Logf("replica-b took over %v after replica-a crashed (lease duration %v)", took.Sub(killed).Round(time.Millisecond), lease)
	// The standby may take the lease once leaseDuration has passed since it last saw a
	// renewal (at most one retry period, jittered, before the crash) and it looks every retry
	// period: lease + 2 × 1.2 × retry, plus API latency on a loaded machine.
	if d := took.Sub(killed); d > lease+1500*time.Millisecond {
		t.Errorf("takeover after %v; want within the lease duration %v (+ retry slack)", d, lease)
	}
	if holder := f.leaseHolder(); holder != "replica-b" {
		t.Errorf("lease holder %q after failover", holder)
	}
	set := f.waitSettled("lead", time.Minute)
	if set.Status.UpdatedReplicas != 6 || set.Status.UpdateRevision == v1.Status.UpdateRevision {
		t.Errorf("rollout not finished by the new leader: %+v", set.Status)
	}
	if m := mon.maxUnavailable(); m > 2 {
		t.Errorf("budget exceeded across the failover: %d unavailable, maxUnavailable 2", m)
	}
}

// TestLeaderLostExits: a leader that cannot renew (someone else holds the lease) stops at
// once and returns ErrLeaderLost, so the process exits non-zero.
func TestLeaderLostExits(t *testing.T) {
	f := newFixture(t)
	a := f.startReplica("replica-a", nil)
	select {
	case <-a.leading:
	case <-time.After(30 * time.Second):
		t.Fatal("replica-a never became leader")
	}
	// Steal the lease as another holder would after a partition.
	for range 20 {
		lease, err := f.kube.CoordinationV1().Leases(f.ns).Get(f.ctx, manager.ComponentName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		lease.Spec = coordinationv1.LeaseSpec{HolderIdentity: ptr.To("intruder"), LeaseDurationSeconds: ptr.To[int32](600),
			AcquireTime: &metav1.MicroTime{Time: time.Now()}, RenewTime: &metav1.MicroTime{Time: time.Now()}}
		if _, err = f.kube.CoordinationV1().Leases(f.ns).Update(f.ctx, lease, metav1.UpdateOptions{}); err == nil {
			break
		}
	}
	select {
	case <-a.done:
		if !errors.Is(a.err, manager.ErrLeaderLost) {
			t.Fatalf("Run returned %v, want ErrLeaderLost", a.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("leader kept running after losing the lease")
	}
}

// TestHealthAndMetricsEndpoints checks /healthz, /readyz and /metrics of a running manager.
func TestHealthAndMetricsEndpoints(t *testing.T) {
	f := newFixture(t)
	addr := freeAddr(t)
	// One port for both: HTTPS behind delegated authentication and authorization (the health
	// paths always allowed); the manager asks the API server with the test's credentials, the
	// test reads as the admin (system:masters).
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := testenv.WriteKubeconfig(f.cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	r := f.startReplica("replica-h", func(o *manager.Config) {
		o.Serving.MetricsBindAddress, o.Serving.HealthBindAddress = addr, addr
		o.Serving.Complete(kubeconfig)
	})
	client := metricsClient(t, f.cfg)
	select {
	case <-r.leading:
	case <-time.After(30 * time.Second):
		t.Fatal("never became leader")
	}
	f.createSet(newSet("m", 1, func(s *jkev1alpha1.EnhancedStatefulSet) {}))
	var mu sync.Mutex
	get := func(path string) (int, string) {
		mu.Lock()
		defer mu.Unlock()
		resp, err := client.Get("https://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != 200 {
		t.Errorf("/healthz: %d %s", code, body)
	}
	// Ready once the leader's caches have synced (not before: TestReadyzWaitsForCaches).
	f.eventually(30*time.Second, "/readyz 200", func() (bool, error) {
		code, _ := get("/readyz")
		return code == 200, nil
	})
	f.eventually(30*time.Second, "sync metrics", func() (bool, error) {
		code, body := get("/metrics")
		if code != 200 {
			return false, fmt.Errorf("metrics: %d", code)
		}
		return strings.Contains(body, `staticip_controller_syncs_total{controller="enhancedstatefulset",result="success"}`) &&
			strings.Contains(body, "staticip_controller_manager_leader 1") &&
			strings.Contains(body, `staticip_enhancedstatefulset_pod_actions_total{action="Create"`) &&
			strings.Contains(body, `workqueue_adds_total{name="enhancedstatefulset"}`) &&
			strings.Contains(body, `workqueue_depth{name="staticip"}`), nil
	})
}

// TestShutdownStopsControllersBeforeReleasingTheLease: on a clean shutdown the controllers
// stop, and are waited for, while this replica still holds the lease; the lease is released
// only after that, so a standby never runs next to controllers that are still writing.
func TestShutdownStopsControllersBeforeReleasingTheLease(t *testing.T) {
	f := newFixture(t)
	holderAtStop := make(chan string, 1)
	r := f.startReplica("replica-s", func(c *manager.Config) {
		// Controllers that take a second to stop (a sync in flight): the lease must still be
		// held at the end of that second.
		c.Hooks.OnControllersStopped = func(string) {
			time.Sleep(time.Second)
			holderAtStop <- f.leaseHolder()
		}
	})
	select {
	case <-r.leading:
	case <-time.After(30 * time.Second):
		t.Fatal("never became leader")
	}
	r.cancel()
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
	}
	select {
	case h := <-holderAtStop:
		if h != "replica-s" {
			t.Errorf("lease holder %q when the controllers had stopped: the lease was released before them", h)
		}
	default:
		t.Error("Run returned before the controllers stopped")
	}
	if h := f.leaseHolder(); h != "" {
		t.Errorf("lease still held by %q after a clean shutdown (release on cancel)", h)
	}
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
