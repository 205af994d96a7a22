package manager

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	"github.com/staticip/staticip/apis/generated/informers/externalversions"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
	superedgev1 "github.com/staticip/staticip/apis/superedge/v1"
	"github.com/staticip/staticip/controllers/pkg/bgppeer"
	"github.com/staticip/staticip/controllers/pkg/enhancedstatefulset"
	"github.com/staticip/staticip/controllers/pkg/grid"
	"github.com/staticip/staticip/controllers/pkg/ippool"
	"github.com/staticip/staticip/controllers/pkg/metrics"
	"github.com/staticip/staticip/controllers/pkg/nodefailover"
	"github.com/staticip/staticip/controllers/pkg/staticip"
)

// controllerContext is what a controller's constructor gets: the clients, the shared informer
// factories (a constructor asks them for the informers it uses; they are started after every
// enabled controller is built), the Event recorder and the options.
type controllerContext struct {
	kube          kubernetes.Interface
	client        versioned.Interface
	dynamic       dynamic.Interface // workloads staticip does not depend on (OpenKruise's); nil: none
	kubeInformers informers.SharedInformerFactory
	jkeInformers  externalversions.SharedInformerFactory
	recorder      record.EventRecorder
	opts          *Options
	// rest, when set, gives every controller clients of its own (controllerClients); nil (unit
	// tests): the controllers share kube, client and dynamic.
	rest *rest.Config
}

// controllerClients are a controller's own API clients, as kube-controller-manager's
// ClientBuilder gives each of its controllers: their own rate limiter (--kube-api-qps and
// --kube-api-burst apply per controller, so one controller's burst of writes — node failover
// re-pointing a node's StaticIPs, the EnhancedStatefulSet controller recreating its pods — does
// not queue behind another's) and the user agent <manager>/<controller>, so the API server's
// audit log and metrics tell them apart. The informers keep the manager's shared client.
func controllerClients(cfg *rest.Config, name string, withDynamic bool) (kubernetes.Interface, versioned.Interface, dynamic.Interface, error) {
	c := rest.CopyConfig(cfg)
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	c.UserAgent += "/" + name
	c.RateLimiter = nil // a limiter of its own from QPS and Burst
	// JSON, also for built-in APIs: see internal/kubeclient.Kubernetes.
	kube, err := kubernetes.NewForConfig(c)
	if err != nil {
		return nil, nil, nil, err
	}
	client, err := versioned.NewForConfig(c)
	if err != nil {
		return nil, nil, nil, err
	}
	var dyn dynamic.Interface
	if withDynamic {
		if dyn, err = dynamic.NewForConfig(c); err != nil {
			return nil, nil, nil, err
		}
	}
	return kube, client, dyn, nil
}

// controllerDescriptor describes one controller of the manager, as kube-controller-manager's
// ControllerDescriptor does: adding a controller is one entry in controllerDescriptors.
type controllerDescriptor struct {
	// name is the controller's name in --controllers, logs and metrics.
	name string
	// disabledByDefault: '*' in --controllers does not enable it; only its name does.
	disabledByDefault bool
	// informers are the types whose informers the constructor takes from the factories
	// (TestControllerDescriptors checks that it takes exactly these).
	informers []runtime.Object
	// constructor builds the controller and returns how to run it until ctx is done.
	constructor func(cc controllerContext) (run func(ctx context.Context), err error)
}

// controllerDescriptors are the manager's controllers, in the order --controllers lists them.
func controllerDescriptors() []controllerDescriptor {
	return []controllerDescriptor{
		{name: enhancedstatefulset.Name, constructor: newEnhancedStatefulSetController,
			informers: []runtime.Object{&jkev1alpha1.EnhancedStatefulSet{}, &corev1.Pod{}, &appsv1.ControllerRevision{}, &corev1.PersistentVolumeClaim{}, &jkev1.StaticIP{}}},
		{name: staticip.Name, constructor: newStaticIPController,
			informers: []runtime.Object{&jkev1.StaticIP{}, &corev1.Pod{}, &jkev1alpha1.EnhancedStatefulSet{}, &appsv1.StatefulSet{}, &jkev1.IPRange{}}},
		{name: grid.DeploymentGridName, constructor: newDeploymentGridController,
			informers: []runtime.Object{&superedgev1.DeploymentGrid{}, &appsv1.Deployment{}, &corev1.Node{}}},
		{name: grid.StatefulSetGridName, constructor: newStatefulSetGridController,
			informers: []runtime.Object{&superedgev1.StatefulSetGrid{}, &appsv1.StatefulSet{}, &corev1.Node{}}},
		{name: grid.ServiceGridName, constructor: newServiceGridController,
			informers: []runtime.Object{&superedgev1.ServiceGrid{}, &corev1.Service{}}},
		{name: nodefailover.Name, constructor: newNodeFailoverController,
			informers: []runtime.Object{&corev1.Node{}, &corev1.Pod{}, &jkev1.IPRange{}, &jkev1.StaticIP{}, &jkev1alpha1.NodeFailover{}}},
		{name: ippool.Name, constructor: newIPPoolController,
			informers: []runtime.Object{&jkev1.IPPool{}, &jkev1.IPRange{}, &corev1.Node{}, &corev1.Pod{}, &jkev1.StaticIP{}, &jkev1alpha1.NodeFailover{}, &jkev1.BGPPeer{}, &corev1.Namespace{}}},
		{name: bgppeer.Name, constructor: newBGPPeerController,
			informers: []runtime.Object{&jkev1.BGPPeer{}, &jkev1.BGPConfiguration{}, &jkev1.BGPNodeStatus{}}},
	}
}

// KnownControllers are the names --controllers accepts.
var KnownControllers = func() []string {
	var names []string
	for _, d := range controllerDescriptors() {
		names = append(names, d.name)
	}
	return names
}()

// EnabledControllers resolves --controllers into controller names: '*' enables every
// controller not disabled by default, a name enables it, '-name' disables it.
func (o *Options) EnabledControllers() ([]string, error) {
	return resolveControllers(controllerDescriptors(), o.Controllers)
}

// resolveControllers resolves the --controllers values against descs, in their order.
func resolveControllers(descs []controllerDescriptor, flags []string) ([]string, error) {
	var known []string
	for _, d := range descs {
		known = append(known, d.name)
	}
	enabled := map[string]bool{}
	star := false
	for _, c := range flags {
		name := strings.TrimPrefix(c, "-")
		switch {
		case c == "*":
			star = true
		case !slices.Contains(known, name):
			return nil, fmt.Errorf("--controllers: unknown controller %q (known: %s)", c, strings.Join(known, ", "))
		case strings.HasPrefix(c, "-"):
			enabled[name] = false
		default:
			enabled[name] = true
		}
	}
	var out []string
	for _, d := range descs {
		on, set := enabled[d.name]
		if (set && on) || (!set && star && !d.disabledByDefault) {
			out = append(out, d.name)
		}
	}
	return out, nil
}

// buildControllers builds the named controllers (their informers are registered with the
// factories of cc, not started) and returns how to run each.
func buildControllers(cc controllerContext, names []string) ([]func(context.Context), error) {
	var runs []func(context.Context)
	for _, d := range controllerDescriptors() {
		if !slices.Contains(names, d.name) {
			continue
		}
		own := cc
		if cc.rest != nil {
			kube, client, dyn, err := controllerClients(cc.rest, d.name, cc.dynamic != nil)
			if err != nil {
				return nil, fmt.Errorf("controller %s: its API clients: %w", d.name, err)
			}
			own.kube, own.client, own.dynamic = kube, client, dyn
		}
		run, err := d.constructor(own)
		if err != nil {
			return nil, fmt.Errorf("controller %s: %w", d.name, err)
		}
		runs = append(runs, run)
	}
	return runs, nil
}

func newEnhancedStatefulSetController(cc controllerContext) (func(context.Context), error) {
	c, err := enhancedstatefulset.NewController(cc.kube, cc.client,
		cc.jkeInformers.Jke().V1alpha1().EnhancedStatefulSets(), cc.kubeInformers.Core().V1().Pods(),
		cc.kubeInformers.Apps().V1().ControllerRevisions(), cc.kubeInformers.Core().V1().PersistentVolumeClaims(),
		cc.jkeInformers.Jke().V1().StaticIPs(), cc.recorder)
	if err != nil {
		return nil, err
	}
	c.InPlaceUpdateTimeout = cc.opts.InPlaceUpdateTimeout
	return func(ctx context.Context) { c.Run(ctx, cc.opts.Workers) }, nil
}

func newStaticIPController(cc controllerContext) (func(context.Context), error) {
	c, err := staticip.NewController(cc.kube, cc.client, cc.jkeInformers.Jke().V1().StaticIPs(),
		cc.kubeInformers.Core().V1().Pods(), cc.jkeInformers.Jke().V1alpha1().EnhancedStatefulSets(),
		cc.kubeInformers.Apps().V1().StatefulSets(), cc.jkeInformers.Jke().V1().IPRanges(), cc.dynamic, cc.recorder)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) { c.Run(ctx, cc.opts.Workers) }, nil
}

func newDeploymentGridController(cc controllerContext) (func(context.Context), error) {
	c, err := grid.NewDeploymentGridController(cc.kube, cc.client, cc.jkeInformers.Superedge().V1().DeploymentGrids(),
		cc.kubeInformers.Apps().V1().Deployments(), cc.kubeInformers.Core().V1().Nodes(), cc.recorder)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) { c.Run(ctx, cc.opts.Workers) }, nil
}

func newStatefulSetGridController(cc controllerContext) (func(context.Context), error) {
	c, err := grid.NewStatefulSetGridController(cc.kube, cc.client, cc.jkeInformers.Superedge().V1().StatefulSetGrids(),
		cc.kubeInformers.Apps().V1().StatefulSets(), cc.kubeInformers.Core().V1().Nodes(), cc.recorder)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) { c.Run(ctx, cc.opts.Workers) }, nil
}

func newServiceGridController(cc controllerContext) (func(context.Context), error) {
	c, err := grid.NewServiceGridController(cc.kube, cc.client, cc.jkeInformers.Superedge().V1().ServiceGrids(),
		cc.kubeInformers.Core().V1().Services(), cc.recorder)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) { c.Run(ctx, cc.opts.Workers) }, nil
}

func newNodeFailoverController(cc controllerContext) (func(context.Context), error) {
	c, err := nodefailover.NewController(cc.kube, cc.client, cc.kubeInformers.Core().V1().Nodes(),
		cc.kubeInformers.Core().V1().Pods(), cc.jkeInformers.Jke().V1().IPRanges(), cc.jkeInformers.Jke().V1().StaticIPs(),
		cc.jkeInformers.Jke().V1alpha1().NodeFailovers(), cc.recorder)
	if err != nil {
		return nil, err
	}
	c.Window = cc.opts.NodeFailoverWindow
	c.FencedPodDeletionGrace = cc.opts.FencedPodDeletionGrace
	c.MaxRangesReportingRoutes = cc.opts.NodeFailoverMaxMarkedRanges
	c.NodeDeletionIsFence = cc.opts.NodeDeletionIsFence
	c.NodeGoneAfter = cc.opts.NodeGoneAfter
	enabled, _ := cc.opts.EnabledControllers() // checked by Validate
	c.AllocatorRuns = slices.Contains(enabled, ippool.Name)
	c.MaxUnhealthyPercent, _ = nodefailover.ParsePercent(cc.opts.NodeFailoverMaxUnhealthy) // checked by Validate
	// One worker: migrations are few, and one at a time keeps two of them from racing for the
	// same spare inside this process (the claim's optimistic lock covers the rest).
	return func(ctx context.Context) { c.Run(ctx, 1) }, nil
}

func newIPPoolController(cc controllerContext) (func(context.Context), error) {
	c, err := ippool.NewController(cc.kube, cc.client, cc.jkeInformers.Jke().V1().IPPools(),
		cc.jkeInformers.Jke().V1().IPRanges(), cc.kubeInformers.Core().V1().Nodes(), cc.kubeInformers.Core().V1().Pods(),
		cc.jkeInformers.Jke().V1().StaticIPs(), cc.jkeInformers.Jke().V1alpha1().NodeFailovers(),
		cc.jkeInformers.Jke().V1().BGPPeers(), cc.kubeInformers.Core().V1().Namespaces(), cc.recorder)
	if err != nil {
		return nil, err
	}
	c.NodeGoneAfter, c.NodeDeletionIsFence = cc.opts.NodeGoneAfter, cc.opts.NodeDeletionIsFence
	// One worker whatever --workers says: one key plans every pool.
	return c.Run, nil
}

func newBGPPeerController(cc controllerContext) (func(context.Context), error) {
	c, err := bgppeer.NewController(cc.client, cc.jkeInformers.Jke().V1().BGPPeers(),
		cc.jkeInformers.Jke().V1().BGPConfigurations(), cc.jkeInformers.Jke().V1().BGPNodeStatuses(), cc.opts.NodeFailoverWindow)
	if err != nil {
		return nil, err
	}
	return c.Run, nil
}

// stateSource is what metrics.State reads: the EnhancedStatefulSet and NodeFailover listers of
// jkeInformers when a controller that watches that kind is enabled (the factory then holds the
// informer already), exported once every cache synced.
func stateSource(jkeInformers externalversions.SharedInformerFactory, names []string, ready *atomic.Bool) *metrics.StateSource {
	src := &metrics.StateSource{Synced: ready.Load}
	for _, d := range controllerDescriptors() {
		if !slices.Contains(names, d.name) {
			continue
		}
		for _, o := range d.informers {
			switch o.(type) {
			case *jkev1alpha1.EnhancedStatefulSet:
				src.EnhancedStatefulSets = jkeInformers.Jke().V1alpha1().EnhancedStatefulSets().Lister()
			case *jkev1alpha1.NodeFailover:
				src.NodeFailovers = jkeInformers.Jke().V1alpha1().NodeFailovers().Lister()
			}
		}
	}
	return src
}
