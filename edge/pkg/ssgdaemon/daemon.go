// Package ssgdaemon is statefulset-grid-daemon: on each node it keeps a CoreDNS hosts file
// with {ssg}-{ordinal}.{service}.{ns}.svc.{domain} -> the IP of the pod of this node's unit,
// for every StatefulSetGrid. Informers (scoped to grid objects and this node) feed a single
// coalescing work item; a sync computes the records (gridhosts.Compute, pure) and rewrites the
// whole file atomically (hostsfile.Writer) only when its content changes. See edge/README.md.
package ssgdaemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	seinformers "github.com/staticip/staticip/apis/generated/informers/externalversions"
	superedgev1 "github.com/staticip/staticip/apis/superedge/v1"
	"github.com/staticip/staticip/edge/pkg/gridhosts"
	"github.com/staticip/staticip/edge/pkg/hostsfile"
	"github.com/staticip/staticip/internal/app"
	"github.com/staticip/staticip/internal/kubeclient"
	"github.com/staticip/staticip/internal/serving"
)

// ComponentName is the binary's name.
const ComponentName = "statefulset-grid-daemon"

// Event reasons on this node.
const (
	ReasonWriteFailed = "HostsFileNotWritten"
	ReasonSkipped     = "GridRecordSkipped"
)

// Options are the daemon's flags.
type Options struct {
	// Common: the client flags and the status server: /metrics on the node's address (HTTPS,
	// delegated authn/authz), /healthz and /readyz on loopback for the kubelet's probes.
	app.Common
	NodeName      string
	HostsDir      string
	HostsFile     string
	ClusterDomain string
	Resync        time.Duration
}

// Ports of the daemon on the node (host network): health (loopback) and /metrics.
const (
	DefaultHealthBindAddress  = "127.0.0.1:10268"
	DefaultMetricsBindAddress = ":10270"
)

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{
		Common:        app.NewCommon(20, 40, DefaultMetricsBindAddress, DefaultHealthBindAddress),
		NodeName:      os.Getenv("NODE_NAME"),
		HostsDir:      "/var/lib/statefulset-grid-daemon",
		HostsFile:     "hosts",
		ClusterDomain: "cluster.local",
		Resync:        10 * time.Minute,
	}
}

// AddFlags registers the flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.Common.AddFlags(fs)
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "this node's name (default $NODE_NAME)")
	fs.StringVar(&o.HostsDir, "hosts-dir", o.HostsDir, "directory of the hosts file, shared with CoreDNS (mount the directory, not the file: a file mount never sees the rename)")
	fs.StringVar(&o.HostsFile, "hosts-file", o.HostsFile, "name of the hosts file in --hosts-dir")
	fs.StringVar(&o.ClusterDomain, "cluster-domain", o.ClusterDomain, "cluster domain of the records: the kubelet's clusterDomain")
	fs.DurationVar(&o.Resync, "resync", o.Resync, "recompute (and rewrite if different) this often as a safety net; updates are event-driven (0: off)")
}

// Validate checks the flags.
func (o *Options) Validate() error {
	var errs []error
	if o.NodeName == "" {
		errs = append(errs, errors.New("--node-name (or $NODE_NAME) is required"))
	}
	if o.HostsDir == "" || o.HostsFile == "" || strings.Contains(o.HostsFile, "/") {
		errs = append(errs, fmt.Errorf("--hosts-dir must be set and --hosts-file a plain file name, got %q and %q", o.HostsDir, o.HostsFile))
	}
	if d := strings.TrimSuffix(o.ClusterDomain, "."); len(validation.IsDNS1123Subdomain(d)) > 0 {
		errs = append(errs, fmt.Errorf("--cluster-domain %q is not a DNS name", o.ClusterDomain))
	}
	errs = append(errs, o.Common.Validate())
	return errors.Join(errs...)
}

// Config is the completed Options: what Run needs.
type Config struct {
	*Options
	Rest *rest.Config
	// Ready, if not nil, is told the status server's addresses once it listens (tests).
	Ready func(*serving.Server)
}

// Complete loads the daemon's identity; the delegated authn/authz of /metrics use it too.
func (o *Options) Complete() (*Config, error) {
	cfg, err := o.Load(ComponentName)
	if err != nil {
		return nil, err
	}
	return &Config{Options: o, Rest: cfg}, nil
}

// Daemon is one node's daemon.
type Daemon struct {
	opts    *Options
	client  kubernetes.Interface
	writer  *hostsfile.Writer
	metrics *Metrics
	queue   workqueue.TypedRateLimitingInterface[string]

	nodes   cache.SharedIndexInformer
	grids   cache.SharedIndexInformer
	sets    cache.SharedIndexInformer
	pods    cache.SharedIndexInformer
	svcs    cache.SharedIndexInformer
	synced  []cache.InformerSynced
	start   []func(<-chan struct{})
	ready   atomic.Bool
	lastErr string
	skips   map[string]bool
	rec     events.EventRecorder
}

// the one work item: every change leads to one recomputation of the whole file.
const syncKey = "hosts"

// New builds the daemon's informers:
//   - its own Node only (field selector metadata.name);
//   - StatefulSetGrids (the keys and UIDs of the owners);
//   - StatefulSets and pods carrying superedge.io/grid-selector (what grids generate), not
//     every pod of the cluster; their caches are trimmed to the fields the records need;
//   - Services, trimmed to publishNotReadyAddresses.
func New(o *Options, client kubernetes.Interface, gridClient versioned.Interface, m *Metrics) (*Daemon, error) {
	gridSelector, err := labels.NewRequirement(superedgev1.LabelGridSelector, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	d := &Daemon{
		opts:    o,
		client:  client,
		writer:  &hostsfile.Writer{Dir: o.HostsDir, Name: o.HostsFile},
		metrics: m,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](200*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: ComponentName}),
		skips: map[string]bool{},
	}
	nodeFactory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
		lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", o.NodeName).String()
	}))
	gridObjects := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
		lo.LabelSelector = labels.NewSelector().Add(*gridSelector).String()
	}))
	all := informers.NewSharedInformerFactory(client, 0)
	gridFactory := seinformers.NewSharedInformerFactory(gridClient, 0)

	d.nodes = nodeFactory.Core().V1().Nodes().Informer()
	d.sets = gridObjects.Apps().V1().StatefulSets().Informer()
	d.pods = gridObjects.Core().V1().Pods().Informer()
	d.svcs = all.Core().V1().Services().Informer()
	d.grids = gridFactory.Superedge().V1().StatefulSetGrids().Informer()
	for inf, trim := range map[cache.SharedIndexInformer]cache.TransformFunc{
		d.sets: trimStatefulSet, d.pods: trimPod, d.svcs: trimService, d.nodes: trimNode,
	} {
		if err := inf.SetTransform(trim); err != nil {
			return nil, err
		}
	}
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { d.queue.Add(syncKey) },
		UpdateFunc: func(_, _ any) { d.queue.Add(syncKey) },
		DeleteFunc: func(any) { d.queue.Add(syncKey) },
	}
	for _, inf := range []cache.SharedIndexInformer{d.nodes, d.grids, d.sets, d.pods, d.svcs} {
		if _, err := inf.AddEventHandler(h); err != nil {
			return nil, err
		}
		d.synced = append(d.synced, inf.HasSynced)
	}
	d.start = []func(<-chan struct{}){nodeFactory.Start, gridObjects.Start, all.Start, gridFactory.Start}
	return d, nil
}

// Synced reports whether the caches have synced and the file was written once.
func (d *Daemon) Synced() bool { return d.ready.Load() }

// Run starts the informers and the sync loop; it returns when ctx ends.
func (d *Daemon) Run(ctx context.Context) error {
	defer utilruntime.HandleCrash()
	defer d.queue.ShutDown()
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: d.client.EventsV1()})
	broadcaster.StartRecordingToSink(ctx.Done())
	defer broadcaster.Shutdown()
	d.rec = broadcaster.NewRecorder(scheme.Scheme, ComponentName)

	if err := d.writer.RemoveStaleTemps(); err != nil {
		klog.ErrorS(err, "Cannot clean the hosts directory", "dir", d.opts.HostsDir)
	}
	for _, s := range d.start {
		s(ctx.Done())
	}
	klog.InfoS("Waiting for caches", "node", d.opts.NodeName)
	if !cache.WaitForCacheSync(ctx.Done(), d.synced...) {
		return ctx.Err()
	}
	klog.InfoS("Caches synced", "node", d.opts.NodeName, "file", d.writer.Path())
	d.queue.Add(syncKey)
	if d.opts.Resync > 0 {
		go func() {
			t := time.NewTicker(d.opts.Resync)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					d.queue.Add(syncKey)
				}
			}
		}()
	}
	go func() {
		<-ctx.Done()
		d.queue.ShutDown()
	}()
	for d.processNext(ctx) {
	}
	return nil
}

func (d *Daemon) processNext(ctx context.Context) bool {
	key, quit := d.queue.Get()
	if quit {
		return false
	}
	defer d.queue.Done(key)
	if err := d.sync(ctx); err != nil {
		d.queue.AddRateLimited(key)
		return true
	}
	d.queue.Forget(key)
	return true
}

// Input is what the records of this node depend on, from the informers' caches.
func (d *Daemon) Input() gridhosts.Input {
	in := gridhosts.Input{ClusterDomain: d.opts.ClusterDomain, PublishNotReady: map[types.NamespacedName]bool{}}
	for _, o := range d.nodes.GetStore().List() {
		if n := o.(*corev1.Node); n.Name == d.opts.NodeName {
			in.Node = n
		}
	}
	for _, o := range d.grids.GetStore().List() {
		in.Grids = append(in.Grids, o.(*superedgev1.StatefulSetGrid))
	}
	for _, o := range d.sets.GetStore().List() {
		in.StatefulSets = append(in.StatefulSets, o.(*appsv1.StatefulSet))
	}
	for _, o := range d.pods.GetStore().List() {
		in.Pods = append(in.Pods, o.(*corev1.Pod))
	}
	for _, o := range d.svcs.GetStore().List() {
		if s := o.(*corev1.Service); s.Spec.PublishNotReadyAddresses {
			in.PublishNotReady[types.NamespacedName{Namespace: s.Namespace, Name: s.Name}] = true
		}
	}
	return in
}

// sync recomputes the records and rewrites the file if its content differs. Without this
// node's Node object (not yet known, deleted) nothing is written: the file keeps its records.
func (d *Daemon) sync(ctx context.Context) error {
	start := time.Now()
	in := d.Input()
	if in.Node == nil {
		klog.InfoS("This node's Node object is not known; the hosts file is left as it is", "node", d.opts.NodeName)
		return nil
	}
	records, skips := gridhosts.Compute(in)
	d.reportSkips(in.Node, skips)
	data := gridhosts.Render(d.opts.NodeName, records)
	// As of start: another daemon of this node that wrote content computed later wins.
	wrote, err := d.writer.WriteIfNewer(data, start)
	d.metrics.syncSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		reason := "Other"
		var de *hostsfile.DirError
		if errors.As(err, &de) {
			reason = de.Reason
		}
		d.metrics.writeErrors.WithLabelValues(reason).Inc()
		klog.ErrorS(err, "Hosts file not written; the previous file is left as it was", "file", d.writer.Path(), "records", len(records))
		if msg := err.Error(); msg != d.lastErr {
			d.lastErr = msg
			d.rec.Eventf(nodeRef(in.Node), nil, corev1.EventTypeWarning, ReasonWriteFailed, "WriteHosts", "%s: %v", d.writer.Path(), err)
		}
		return err
	}
	if d.lastErr != "" {
		klog.InfoS("Hosts file written again", "file", d.writer.Path())
		d.lastErr = ""
	}
	d.metrics.records.Set(float64(len(records)))
	d.metrics.skipped.Set(float64(len(skips)))
	if wrote {
		d.metrics.writes.Inc()
		d.metrics.lastWrite.SetToCurrentTime()
		klog.V(2).InfoS("Hosts file written", "file", d.writer.Path(), "records", len(records), "took", time.Since(start))
	}
	d.ready.Store(true)
	return nil
}

// reportSkips logs (and records as an Event on the Node) each skip once while it lasts.
func (d *Daemon) reportSkips(node *corev1.Node, skips []gridhosts.Skip) {
	now := map[string]bool{}
	for _, s := range skips {
		k := s.Reason + " " + s.Object
		now[k] = true
		if !d.skips[k] {
			klog.InfoS("No record for a grid StatefulSet", "reason", s.Reason, "object", s.Object)
			d.rec.Eventf(nodeRef(node), nil, corev1.EventTypeWarning, ReasonSkipped, "Compute", "%s: %s", s.Reason, s.Object)
		}
	}
	d.skips = now
}

func nodeRef(n *corev1.Node) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: n.Name, UID: n.UID}
}

// Run runs the daemon and its status server until ctx ends.
func Run(ctx context.Context, c *Config) error {
	o := c.Options
	client, err := kubeclient.Kubernetes(c.Rest)
	if err != nil {
		return err
	}
	gridClient, err := versioned.NewForConfig(c.Rest)
	if err != nil {
		return err
	}
	m := NewMetrics()
	d, err := New(o, client, gridClient, m)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	status, err := o.Serving.Start(ctx, serving.Endpoints{Component: ComponentName, Metrics: m.Registry,
		Readyz: func(*http.Request) error {
			if !d.Synced() {
				return errors.New("caches not synced or hosts file not written")
			}
			return nil
		}})
	if err != nil {
		return err
	}
	if c.Ready != nil {
		c.Ready(status)
	}
	klog.InfoS("Starting", "node", o.NodeName, "file", d.writer.Path(), "clusterDomain", o.ClusterDomain, "metrics", status.MetricsAddr, "health", status.HealthAddr)
	err = d.Run(ctx)
	cancel()
	<-status.Stopped()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}
