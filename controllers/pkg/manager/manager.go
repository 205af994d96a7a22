// Package manager runs the staticip controllers in one process: flags, clients, informers,
// Lease leader election, metrics and health endpoints. main only parses flags and calls Run.
package manager

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
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
	"github.com/staticip/staticip/internal/secureserving"
)

// ComponentName names the lease, the event source and the user agent.
const ComponentName = "staticip-controller-manager"

// ErrLeaderLost is returned when this replica loses the lease: it must exit so that it never
// acts next to the new leader.
var ErrLeaderLost = errors.New("leader election lost")

// Options are the manager's flags.
type Options struct {
	Kubeconfig  string
	Controllers []string
	Workers     int

	LeaderElect                bool
	LeaderElectNamespace       string
	LeaderElectLeaseName       string
	LeaderElectLeaseDuration   time.Duration
	LeaderElectRenewDeadline   time.Duration
	LeaderElectRetryPeriod     time.Duration
	LeaderElectReleaseOnCancel bool

	MetricsBindAddress string
	HealthBindAddress  string
	// Metrics: /metrics is served over HTTPS behind delegated authentication and authorization
	// (internal/secureserving); health stays plain HTTP, open to the kubelet's probes.
	Metrics *secureserving.Options

	// InPlaceUpdateTimeout: EnhancedStatefulSet in-place updates not carried out by then are recreated.
	InPlaceUpdateTimeout time.Duration

	// NodeFailoverWindow: a fenced node must have been NotReady this long before failover moves anything.
	NodeFailoverWindow time.Duration
	// NodeFailoverMaxUnhealthy: above this share of NotReady nodes ("34%") failover stops.
	NodeFailoverMaxUnhealthy string
	// FencedPodDeletionGrace: how long after a node is fenced the pod objects still bound to
	// it that may hold an IP of its ranges are force-deleted.
	FencedPodDeletionGrace time.Duration
	// NodeDeletionIsFence: a deleted Node counts as fenced (its machine is known to be off).
	NodeDeletionIsFence bool

	// Identity overrides hostname + unique suffix (tests).
	Identity string
	// OnStartedLeading, when set, is told the identity when this replica starts leading (tests).
	OnStartedLeading func(identity string)
	// OnControllersStopped, when set, is told the identity when the controllers of a leading
	// replica have stopped, before the lease is released (tests).
	OnControllersStopped func(identity string)
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{
		Controllers:                []string{"*"},
		Workers:                    4,
		LeaderElect:                true,
		LeaderElectLeaseName:       ComponentName,
		LeaderElectLeaseDuration:   15 * time.Second,
		LeaderElectRenewDeadline:   10 * time.Second,
		LeaderElectRetryPeriod:     2 * time.Second,
		LeaderElectReleaseOnCancel: true,
		MetricsBindAddress:         ":10260",
		HealthBindAddress:          ":10261",
		Metrics:                    secureserving.NewOptions(),
		InPlaceUpdateTimeout:       enhancedstatefulset.DefaultInPlaceUpdateTimeout,
		NodeFailoverWindow:         nodefailover.DefaultWindow,
		NodeFailoverMaxUnhealthy:   fmt.Sprintf("%d%%", nodefailover.DefaultMaxUnhealthyPercent),
		FencedPodDeletionGrace:     nodefailover.DefaultFencedPodDeletionGrace,
	}
}

// AddFlags registers the flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Path to a kubeconfig; empty means in-cluster configuration.")
	fs.StringSliceVar(&o.Controllers, "controllers", o.Controllers, fmt.Sprintf("Controllers to run: '*' for all, a name to enable, '-name' to disable. Known: %s.", strings.Join(KnownControllers, ", ")))
	fs.IntVar(&o.Workers, "workers", o.Workers, "Concurrent reconciles per controller.")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "Elect a leader through a Lease before running the controllers (keep it on with more than one replica).")
	fs.StringVar(&o.LeaderElectNamespace, "leader-elect-namespace", o.LeaderElectNamespace, "Namespace of the Lease; default $POD_NAMESPACE, else kube-system.")
	fs.StringVar(&o.LeaderElectLeaseName, "leader-elect-lease-name", o.LeaderElectLeaseName, "Name of the Lease.")
	fs.DurationVar(&o.LeaderElectLeaseDuration, "leader-elect-lease-duration", o.LeaderElectLeaseDuration, "How long a standby waits after the last renewal before taking the lease.")
	fs.DurationVar(&o.LeaderElectRenewDeadline, "leader-elect-renew-deadline", o.LeaderElectRenewDeadline, "How long the leader keeps retrying to renew before it gives up and exits.")
	fs.DurationVar(&o.LeaderElectRetryPeriod, "leader-elect-retry-period", o.LeaderElectRetryPeriod, "How often to try to acquire or renew the lease.")
	fs.BoolVar(&o.LeaderElectReleaseOnCancel, "leader-elect-release-on-cancel", o.LeaderElectReleaseOnCancel, "Release the lease on a clean shutdown so a standby takes over at once.")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", o.MetricsBindAddress, "Address of the Prometheus /metrics endpoint (HTTPS; callers authenticated and authorized by the API server: ClusterRole staticip-metrics-reader); empty or 0 disables it.")
	fs.StringVar(&o.HealthBindAddress, "health-bind-address", o.HealthBindAddress, "Address of /healthz and /readyz (plain HTTP, no credentials); empty or 0 disables it.")
	o.Metrics.AddFlags(fs)
	fs.DurationVar(&o.NodeFailoverWindow, "node-failover-window", o.NodeFailoverWindow, "nodefailover: how long a node fenced with the node.kubernetes.io/out-of-service taint (or deleted) must have been NotReady before its IP ranges and static IPs move.")
	fs.DurationVar(&o.FencedPodDeletionGrace, "fenced-pod-deletion-grace", o.FencedPodDeletionGrace, "nodefailover: once a node is fenced (out-of-service and NotReady for the window), the pod objects still bound to it that may hold an IP of its ranges (pods that tolerate every taint, e.g. DaemonSet pods not on the host network) are force-deleted after this grace, so its ranges can move. Pods on the host network are never deleted.")
	fs.BoolVar(&o.NodeDeletionIsFence, "node-deletion-is-fence", o.NodeDeletionIsFence, "nodefailover: a deleted Node object counts as fenced (its machine is known to be off). Off by default: a deleted node may be partitioned and still run its pods, so its ranges move only once the operator annotates its NodeFailover staticip.jke.jdcloud.com/node-off=true.")
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
	if o.NodeFailoverWindow < 0 {
		errs = append(errs, fmt.Errorf("--node-failover-window must not be negative, got %v", o.NodeFailoverWindow))
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

// RestConfig loads the kubeconfig (or the in-cluster config).
func (o *Options) RestConfig() (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = ComponentName
	if cfg.QPS == 0 {
		cfg.QPS, cfg.Burst = 50, 100
	}
	return cfg, nil
}

// Identity is the pod's name ($POD_NAME, from the downward API: the manager runs on the host
// network, where the hostname is the node's) or else the hostname, plus a unique suffix, so two
// replicas on one host never share it.
func (o *Options) identity() string {
	if o.Identity != "" {
		return o.Identity
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

// Run runs the manager until ctx is done (nil) or the lease is lost (ErrLeaderLost).
func Run(ctx context.Context, o *Options, cfg *rest.Config) error {
	if err := o.Validate(); err != nil {
		return err
	}
	kubeClient, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	client, err := versioned.NewForConfig(cfg)
	if err != nil {
		return err
	}
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kubeClient.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(Scheme(), corev1.EventSource{Component: ComponentName})

	identity := o.identity()
	var electionHealth *leaderelection.HealthzAdaptor
	if o.LeaderElect {
		electionHealth = leaderelection.NewLeaderHealthzAdaptor(20 * time.Second)
	}
	var ready atomic.Bool
	serveCtx, stopServing := context.WithCancel(ctx)
	defer stopServing()
	servers, err := serve(serveCtx, o, electionHealth, &ready)
	if err != nil {
		return err
	}
	defer func() {
		for _, s := range servers {
			_ = s.Close()
		}
	}()

	runControllers := func(ctx context.Context) error {
		metrics.IsLeader.Set(1)
		defer metrics.IsLeader.Set(0)
		if o.OnStartedLeading != nil {
			o.OnStartedLeading(identity)
		}
		ready.Store(false)
		return startControllers(ctx, o, kubeClient, client, recorder, &ready)
	}
	if !o.LeaderElect {
		return runControllers(ctx)
	}
	// A standby is ready: it runs no controller and holds no cache (as a standby
	// kube-controller-manager, whose informers also start only once it leads), so a rolling
	// update of the Deployment proceeds through it. On taking the lease it is not ready until
	// its caches have synced (startControllers).
	ready.Store(true)
	return runElected(ctx, o, kubeClient, recorder, identity, electionHealth, runControllers)
}

// runElected runs runControllers while this replica holds the Lease, until ctx is done (it
// returns what runControllers returned) or the lease is lost (ErrLeaderLost).
func runElected(ctx context.Context, o *Options, kubeClient kubernetes.Interface, recorder record.EventRecorder,
	identity string, electionHealth *leaderelection.HealthzAdaptor, runControllers func(context.Context) error) error {
	logger := klog.FromContext(ctx)
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
				if o.OnControllersStopped != nil {
					o.OnControllersStopped(identity)
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
func startControllers(ctx context.Context, o *Options, kubeClient kubernetes.Interface, client versioned.Interface,
	recorder record.EventRecorder, ready *atomic.Bool) error {
	names, err := o.EnabledControllers()
	if err != nil {
		return err
	}
	kubeInformers := informers.NewSharedInformerFactory(kubeClient, 0)
	jkeInformers := externalversions.NewSharedInformerFactory(client, 0)
	runs, err := buildControllers(controllerContext{kube: kubeClient, client: client, kubeInformers: kubeInformers,
		jkeInformers: jkeInformers, recorder: recorder, opts: o}, names)
	if err != nil {
		return err
	}
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

// serve starts /metrics (HTTPS, delegated authentication and authorization, until ctx ends)
// and /healthz, /readyz (plain HTTP, open; closed by the caller).
func serve(ctx context.Context, o *Options, election *leaderelection.HealthzAdaptor, ready *atomic.Bool) ([]*http.Server, error) {
	var servers []*http.Server
	enabled := func(addr string) bool { return addr != "" && addr != "0" }
	listen := func(addr string, mux *http.ServeMux) error {
		if !enabled(addr) {
			return nil
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("listen %s: %w", addr, err)
		}
		s := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		servers = append(servers, s)
		go func() {
			if err := s.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				klog.FromContext(ctx).Error(err, "HTTP server stopped", "address", addr)
			}
		}()
		return nil
	}
	listenSecure := func(addr string, mux *http.ServeMux) error {
		if !enabled(addr) {
			return nil
		}
		metricsAuth := o.Metrics
		if metricsAuth == nil {
			metricsAuth = secureserving.NewOptions()
		}
		metricsAuth.DefaultKubeconfig(o.Kubeconfig)
		bound, _, err := metricsAuth.Serve(ctx, addr, mux)
		if err != nil {
			return fmt.Errorf("metrics on %s: %w", addr, err)
		}
		klog.FromContext(ctx).Info("Serving /metrics over HTTPS with delegated authentication and authorization", "address", bound.String())
		return nil
	}
	metricsMux := http.NewServeMux()
	metricsMux.Handle("/metrics", promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{}))
	healthMux := http.NewServeMux()
	healthMux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if election != nil {
			if err := election.Check(r); err != nil {
				http.Error(w, "leader election: "+err.Error(), http.StatusInternalServerError)
				return
			}
		}
		_, _ = w.Write([]byte("ok"))
	})
	healthMux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if !ready.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	if o.MetricsBindAddress == o.HealthBindAddress && enabled(o.MetricsBindAddress) {
		// One port: HTTPS for all; the health paths are always allowed (secureserving).
		healthMux.Handle("/metrics", metricsMux)
		return servers, listenSecure(o.HealthBindAddress, healthMux)
	}
	if err := listenSecure(o.MetricsBindAddress, metricsMux); err != nil {
		return servers, err
	}
	if err := listen(o.HealthBindAddress, healthMux); err != nil {
		for _, s := range servers {
			_ = s.Close()
		}
		return nil, err
	}
	return servers, nil
}
