// Package manager runs the staticip controllers in one process: flags, clients, informers,
// Lease leader election, metrics and health endpoints. main only parses flags and calls Run.
package manager

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkescheme "github.com/staticip/staticip/apis/generated/clientset/versioned/scheme"
	"github.com/staticip/staticip/apis/generated/informers/externalversions"
	"github.com/staticip/staticip/controllers/pkg/enhancedstatefulset"
	"github.com/staticip/staticip/controllers/pkg/metrics"
	"github.com/staticip/staticip/controllers/pkg/nodefailover"
	"github.com/staticip/staticip/controllers/pkg/nodegone"
	"github.com/staticip/staticip/internal/app"
	"github.com/staticip/staticip/internal/serving"
)

// ComponentName names the lease, the event source and the user agent.
const ComponentName = "staticip-controller-manager"

// ErrLeaderLost is returned when this replica loses the lease: it must exit so that it never
// acts next to the new leader.
var ErrLeaderLost = errors.New("leader election lost")

// Options are the manager's flags.
type Options struct {
	// Common: the client flags and the status server: /metrics over HTTPS behind delegated
	// authentication and authorization; /healthz, /readyz plain HTTP, open to the kubelet's
	// probes (internal/serving).
	app.Common
	Controllers []string
	Workers     int

	LeaderElect                bool
	LeaderElectNamespace       string
	LeaderElectLeaseName       string
	LeaderElectLeaseDuration   time.Duration
	LeaderElectRenewDeadline   time.Duration
	LeaderElectRetryPeriod     time.Duration
	LeaderElectReleaseOnCancel bool

	// InPlaceUpdateTimeout: EnhancedStatefulSet in-place updates not carried out by then are recreated.
	InPlaceUpdateTimeout time.Duration

	// NodeFailoverWindow: a fenced node must have been NotReady this long before failover moves anything.
	NodeFailoverWindow time.Duration
	// NodeFailoverMaxUnhealthy: above this share of NotReady nodes ("34%") failover stops.
	NodeFailoverMaxUnhealthy string
	// FencedPodDeletionGrace: how long after a node is fenced the pod objects still bound to
	// it that may hold an IP of its ranges are force-deleted.
	FencedPodDeletionGrace time.Duration
	// NodeFailoverMaxMarkedRanges: at most this many moved ranges carry the report-routes mark
	// at once, over all migrations (0: no cap).
	NodeFailoverMaxMarkedRanges int
	// NodeDeletionIsFence: a deleted Node counts as fenced (its machine is known to be off).
	NodeDeletionIsFence bool
	// NodeGoneAfter: a deleted node that shows no sign of life (Lease renewal) this long, and
	// whose pods are all gone, is proven gone: its blocks may leave it (nodefailover, ippool).
	NodeGoneAfter time.Duration
}

// Hooks let tests watch a manager; none is a flag.
type Hooks struct {
	// Identity overrides hostname + unique suffix.
	Identity string
	// OnStartedLeading, when set, is told the identity when this replica starts leading.
	OnStartedLeading func(identity string)
	// OnControllersStopped, when set, is told the identity when the controllers of a leading
	// replica have stopped, before the lease is released.
	OnControllersStopped func(identity string)
}

// Config is the completed Options: what RunConfig needs.
type Config struct {
	*Options
	Rest  *rest.Config
	Hooks Hooks
}

// Ports of the manager on its node (host network).
const (
	DefaultMetricsBindAddress = ":10260"
	DefaultHealthBindAddress  = ":10261"
)

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{
		Common:                      app.NewCommon(50, 100, DefaultMetricsBindAddress, DefaultHealthBindAddress),
		Controllers:                 []string{"*"},
		Workers:                     4,
		LeaderElect:                 true,
		LeaderElectLeaseName:        ComponentName,
		LeaderElectLeaseDuration:    15 * time.Second,
		LeaderElectRenewDeadline:    10 * time.Second,
		LeaderElectRetryPeriod:      2 * time.Second,
		LeaderElectReleaseOnCancel:  true,
		InPlaceUpdateTimeout:        enhancedstatefulset.DefaultInPlaceUpdateTimeout,
		NodeFailoverWindow:          nodefailover.DefaultWindow,
		NodeFailoverMaxUnhealthy:    fmt.Sprintf("%d%%", nodefailover.DefaultMaxUnhealthyPercent),
		FencedPodDeletionGrace:      nodefailover.DefaultFencedPodDeletionGrace,
		NodeFailoverMaxMarkedRanges: nodefailover.DefaultMaxRangesReportingRoutes,
		NodeGoneAfter:               nodegone.DefaultLeaseGoneAfter,
	}
}

// AddFlags registers the flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.Common.AddFlags(fs)
	fs.StringSliceVar(&o.Controllers, "controllers", o.Controllers, fmt.Sprintf("Controllers to run: '*' for all, a name to enable, '-name' to disable. Known: %s.", strings.Join(KnownControllers, ", ")))
	fs.IntVar(&o.Workers, "workers", o.Workers, "Concurrent reconciles per controller.")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "Elect a leader through a Lease before running the controllers (keep it on with more than one replica).")
	fs.StringVar(&o.LeaderElectNamespace, "leader-elect-namespace", o.LeaderElectNamespace, "Namespace of the Lease; default $POD_NAMESPACE, else kube-system.")
	fs.StringVar(&o.LeaderElectLeaseName, "leader-elect-lease-name", o.LeaderElectLeaseName, "Name of the Lease.")
	fs.DurationVar(&o.LeaderElectLeaseDuration, "leader-elect-lease-duration", o.LeaderElectLeaseDuration, "How long a standby waits after the last renewal before taking the lease.")
	fs.DurationVar(&o.LeaderElectRenewDeadline, "leader-elect-renew-deadline", o.LeaderElectRenewDeadline, "How long the leader keeps retrying to renew before it gives up and exits.")
	fs.DurationVar(&o.LeaderElectRetryPeriod, "leader-elect-retry-period", o.LeaderElectRetryPeriod, "How often to try to acquire or renew the lease.")
	fs.BoolVar(&o.LeaderElectReleaseOnCancel, "leader-elect-release-on-cancel", o.LeaderElectReleaseOnCancel, "Release the lease on a clean shutdown so a standby takes over at once.")
	fs.DurationVar(&o.NodeFailoverWindow, "node-failover-window", o.NodeFailoverWindow, "nodefailover: how long a node fenced with the node.kubernetes.io/out-of-service taint (or deleted) must have been NotReady before its IP ranges and static IPs move. bgppeer: a BGPPeer whose hold time is not shorter gets HoldTimeSafe=False.")
	fs.DurationVar(&o.FencedPodDeletionGrace, "fenced-pod-deletion-grace", o.FencedPodDeletionGrace, "nodefailover: once a node is fenced (out-of-service and NotReady for the window), the pod objects still bound to it that may hold an IP of its ranges (pods that tolerate every taint, e.g. DaemonSet pods not on the host network) are force-deleted after this grace, so its ranges can move. Pods on the host network are never deleted.")
	fs.IntVar(&o.NodeFailoverMaxMarkedRanges, "node-failover-max-marked-ranges", o.NodeFailoverMaxMarkedRanges, "nodefailover: at most this many moved IP ranges are marked staticip.jke.jdcloud.com/report-routes at once, over all migrations; every Ready node's agent reports its route to each marked range in its route-report Lease (staticip-node-routes/<node>), so this bounds that report when many nodes fail at once. Migrations whose ranges do not fit wait their turn (WaitingForRouteTurn), in the order they moved their ranges; one migration with more ranges runs alone. 0: no cap.")
	fs.BoolVar(&o.NodeDeletionIsFence, "node-deletion-is-fence", o.NodeDeletionIsFence, "nodefailover: a deleted Node object counts as fenced (its machine is known to be off). Off by default: a deleted node may be partitioned and still run its pods, so its ranges move only once the operator annotates its NodeFailover staticip.jke.jdcloud.com/node-off=true.")
	fs.DurationVar(&o.NodeGoneAfter, "node-gone-after", o.NodeGoneAfter, "nodefailover, ippool: a node whose Node object was deleted counts as gone once its Lease (kube-node-lease/<node>) has not been renewed for this long (counted from the deletion at the earliest) and no pod object holds one of its IPs; only then do its IP ranges leave it (released by the range allocator at ownerGeneration+1, or moved by failover). A node whose Lease is renewed is alive, deleted or not.")
	fs.StringVar(&o.NodeFailoverMaxUnhealthy, "node-failover-max-unhealthy", o.NodeFailoverMaxUnhealthy, "nodefailover: when more than this share of the nodes is NotReady at once, failover stops (condition + Event, nothing moved).")
	fs.DurationVar(&o.InPlaceUpdateTimeout, "inplace-update-timeout", o.InPlaceUpdateTimeout, "An EnhancedStatefulSet in-place update whose new containers the kubelet has not started after this long is given up: Event, pod recreated. 0 waits forever.")
}

// Validate checks the options.
func (o *Options) Validate() error {
	var errs []error
	if _, err := o.EnabledControllers(); err != nil {
		errs = append(errs, err)
	}
	if _, err := nodefailover.ParsePercent(o.NodeFailoverMaxUnhealthy); err != nil {
		errs = append(errs, fmt.Errorf("--node-failover-max-unhealthy: %w", err))
	}
	if o.FencedPodDeletionGrace < 0 {
		errs = append(errs, fmt.Errorf("--fenced-pod-deletion-grace must not be negative, got %v", o.FencedPodDeletionGrace))
	}
	if o.NodeFailoverMaxMarkedRanges < 0 {
		errs = append(errs, fmt.Errorf("--node-failover-max-marked-ranges must not be negative, got %d", o.NodeFailoverMaxMarkedRanges))
	}
	if o.NodeGoneAfter <= 0 {
		errs = append(errs, fmt.Errorf("--node-gone-after must be positive, got %v", o.NodeGoneAfter))
	}
	if o.NodeFailoverWindow < 0 {
		errs = append(errs, fmt.Errorf("--node-failover-window must not be negative, got %v", o.NodeFailoverWindow))
	}
	if o.Serving != nil {
		errs = append(errs, o.Serving.Validate())
	}
	if o.Workers < 1 {
		errs = append(errs, fmt.Errorf("--workers must be at least 1, got %d", o.Workers))
	}
	if o.LeaderElect {
		if o.LeaderElectLeaseDuration <= o.LeaderElectRenewDeadline {
			errs = append(errs, fmt.Errorf("--leader-elect-lease-duration (%v) must be greater than --leader-elect-renew-deadline (%v)", o.LeaderElectLeaseDuration, o.LeaderElectRenewDeadline))
		}
		if o.LeaderElectRenewDeadline <= o.LeaderElectRetryPeriod {
			errs = append(errs, fmt.Errorf("--leader-elect-renew-deadline (%v) must be greater than --leader-elect-retry-period (%v)", o.LeaderElectRenewDeadline, o.LeaderElectRetryPeriod))
		}
	}
	return errors.Join(errs...)
}

// Complete loads the manager's identity (the kubeconfig or the in-cluster service account);
// the delegated authn/authz of /metrics use it too.
func (o *Options) Complete() (*Config, error) {
	cfg, err := o.Load(ComponentName)
	if err != nil {
		return nil, err
	}
	return &Config{Options: o, Rest: cfg}, nil
}

// Identity is the pod's name ($POD_NAME, from the downward API: the manager runs on the host
// network, where the hostname is the node's) or else the hostname, plus a unique suffix, so two
// replicas on one host never share it.
func (c *Config) identity() string {
	if c.Hooks.Identity != "" {
		return c.Hooks.Identity
	}
	if pod := os.Getenv("POD_NAME"); pod != "" {
		return pod + "_" + uuid.NewString()
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return host + "_" + uuid.NewString()
}

func (o *Options) leaseNamespace() string {
	if o.LeaderElectNamespace != "" {
		return o.LeaderElectNamespace
	}
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	return "kube-system"
}

// Scheme knows the core types and ours, for Events about our objects.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(jkescheme.AddToScheme(s))
	return s
}

// Run runs the manager with cfg, without hooks (RunConfig).
func Run(ctx context.Context, o *Options, cfg *rest.Config) error {
	return RunConfig(ctx, &Config{Options: o, Rest: cfg})
}

// RunConfig runs the manager until ctx is done (nil) or the lease is lost (ErrLeaderLost).
func RunConfig(ctx context.Context, c *Config) error {
	o, cfg := c.Options, c.Rest
	if o.Serving == nil {
		o.Serving = serving.NewOptions("0", "0")
	}
	if err := o.Validate(); err != nil {
		return err
	}
	o.Serving.Complete(o.Client.Kubeconfig)
	// JSON, also for built-in APIs: see internal/kubeclient.Kubernetes.
	kubeClient, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	client, err := versioned.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dynamicClient, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kubeClient.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(Scheme(), corev1.EventSource{Component: ComponentName})

	identity := c.identity()
	var electionHealth *leaderelection.HealthzAdaptor
	if o.LeaderElect {
		electionHealth = leaderelection.NewLeaderHealthzAdaptor(20 * time.Second)
	}
	var ready atomic.Bool
	// A standby is ready from the first probe on (below); set before the server starts, so
	// that no probe sees a standby as not ready.
	ready.Store(o.LeaderElect)
	serveCtx, stopServing := context.WithCancel(ctx)
	defer stopServing()
	if _, err := o.Serving.Start(serveCtx, endpoints(electionHealth, &ready)); err != nil {
		return err
	}

	runControllers := func(ctx context.Context) error {
		metrics.IsLeader.Set(1)
		defer metrics.IsLeader.Set(0)
		if c.Hooks.OnStartedLeading != nil {
			c.Hooks.OnStartedLeading(identity)
		}
		ready.Store(false)
		return startControllers(ctx, o, cfg, kubeClient, client, dynamicClient, recorder, &ready)
	}
	if !o.LeaderElect {
		return runControllers(ctx)
	}
	// A standby is ready: it runs no controller and holds no cache (as a standby
	// kube-controller-manager, whose informers also start only once it leads), so a rolling
	// update of the Deployment proceeds through it. On taking the lease it is not ready until
	// its caches have synced (startControllers). (ready was set above, before serving.)
	return runElected(ctx, c, kubeClient, recorder, identity, electionHealth, runControllers)
}

// runElected runs runControllers while this replica holds the Lease, until ctx is done (it
// returns what runControllers returned) or the lease is lost (ErrLeaderLost).
func runElected(ctx context.Context, c *Config, kubeClient kubernetes.Interface, recorder record.EventRecorder,
	identity string, electionHealth *leaderelection.HealthzAdaptor, runControllers func(context.Context) error) error {
	o, logger := c.Options, klog.FromContext(ctx)
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, o.leaseNamespace(), o.LeaderElectLeaseName,
		kubeClient.CoreV1(), kubeClient.CoordinationV1(), resourcelock.ResourceLockConfig{
			Identity: identity, EventRecorder: recorder,
		})
	if err != nil {
		return err
	}
	var lost atomic.Bool
	// Shutdown order: the controllers stop, and are waited for, while this replica still holds
	// the lease; only then is the elector's context cancelled, and with ReleaseOnCancel it
	// releases the lease. A standby taking over therefore never runs next to controllers that
	// are still writing. (client-go starts OnStartedLeading in its own goroutine and cancels its
	// context only together with releasing, so the elector gets a context of its own.)
	electorCtx, cancelElector := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelElector()
	var (
		leadMu    sync.Mutex
		stopping  bool
		leading   bool
		runErr    error
		runDone   = make(chan struct{})
		electDone = make(chan struct{})
	)
	// stopControllers marks the shutdown and waits for the controllers if they started.
	stopControllers := func() {
		leadMu.Lock()
		stopping = true
		wait := leading
		leadMu.Unlock()
		if wait {
			<-runDone
		}
	}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   o.LeaderElectLeaseDuration,
		RenewDeadline:   o.LeaderElectRenewDeadline,
		RetryPeriod:     o.LeaderElectRetryPeriod,
		ReleaseOnCancel: o.LeaderElectReleaseOnCancel,
		Name:            ComponentName,
		WatchDog:        electionHealth,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leaderCtx context.Context) {
				leadMu.Lock()
				if stopping {
					leadMu.Unlock()
					return
				}
				leading = true
				leadMu.Unlock()
				defer close(runDone)
				// The controllers stop when leadership is lost or the manager shuts down.
				runCtx, cancel := context.WithCancel(leaderCtx)
				defer cancel()
				defer context.AfterFunc(ctx, cancel)()
				logger.Info("Started leading", "identity", identity)
				runErr = runControllers(runCtx)
				if c.Hooks.OnControllersStopped != nil {
					c.Hooks.OnControllersStopped(identity)
				}
			},
			OnStoppedLeading: func() {
				// Called on shutdown too; only a loss while we still want to run is fatal.
				if ctx.Err() == nil {
					lost.Store(true)
					logger.Error(nil, "Lost the leader lease; stopping", "identity", identity)
				}
			},
			OnNewLeader: func(current string) {
				if current != identity {
					logger.Info("New leader elected", "leader", current)
				}
			},
		},
	})
	if err != nil {
		return err
	}
	go func() {
		select {
		case <-ctx.Done():
			stopControllers()
			cancelElector() // now the lease may be released
		case <-electDone:
		}
	}()
	le.Run(electorCtx) // returns when the elector's context is done or leadership is lost
	close(electDone)
	stopControllers()
	if lost.Load() {
		return ErrLeaderLost
	}
	return runErr
}

// startControllers creates the informers and runs the enabled controllers until ctx is done;
// ready is set once every informer the controllers use has synced.
func startControllers(ctx context.Context, o *Options, cfg *rest.Config, kubeClient kubernetes.Interface, client versioned.Interface, dynamicClient dynamic.Interface,
	recorder record.EventRecorder, ready *atomic.Bool) error {
	names, err := o.EnabledControllers()
	if err != nil {
		return err
	}
	kubeInformers := informers.NewSharedInformerFactory(kubeClient, 0)
	jkeInformers := externalversions.NewSharedInformerFactory(client, 0)
	runs, err := buildControllers(controllerContext{kube: kubeClient, client: client, dynamic: dynamicClient, kubeInformers: kubeInformers,
		jkeInformers: jkeInformers, recorder: recorder, opts: o, rest: cfg}, names)
	if err != nil {
		return err
	}
	// The state metrics read the caches of the controllers that run (no informer of its own:
	// a disabled controller's kind is not exported); a standby, or a manager between leases,
	// exports none.
	metrics.State.SetSource(stateSource(jkeInformers, names, ready))
	defer metrics.State.SetSource(nil)
	kubeInformers.Start(ctx.Done())
	jkeInformers.Start(ctx.Done())
	defer kubeInformers.Shutdown()
	defer jkeInformers.Shutdown()
	var wg sync.WaitGroup
	wg.Go(func() {
		if allSynced(kubeInformers.WaitForCacheSync(ctx.Done())) && allSynced(jkeInformers.WaitForCacheSync(ctx.Done())) {
			ready.Store(true)
			klog.FromContext(ctx).Info("Caches synced: ready")
		}
	})
	for _, run := range runs {
		wg.Go(func() { run(ctx) })
	}
	klog.FromContext(ctx).Info("Controllers started", "controllers", names)
	wg.Wait()
	return nil
}

// allSynced reports whether every informer of a factory's WaitForCacheSync synced.
func allSynced[T comparable](synced map[T]bool) bool {
	for _, ok := range synced {
		if !ok {
			return false
		}
	}
	return true
}

// endpoints: /metrics from the controllers' registry; /healthz fails when the leader stopped
// renewing its lease; /readyz until the caches of a leading (or unelected) manager synced.
func endpoints(election *leaderelection.HealthzAdaptor, ready *atomic.Bool) serving.Endpoints {
	return serving.Endpoints{Component: ComponentName, Metrics: metrics.Registry,
		Healthz: func(r *http.Request) error {
			if election == nil {
				return nil
			}
			if err := election.Check(r); err != nil {
				return fmt.Errorf("leader election: %w", err)
			}
			return nil
		},
		Readyz: func(*http.Request) error {
			if !ready.Load() {
				return errors.New("not ready")
			}
			return nil
		}}
}
