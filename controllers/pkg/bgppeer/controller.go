package bgppeer

import (
	"context"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1informers "github.com/staticip/staticip/apis/generated/informers/externalversions/jke/v1"
	jkev1listers "github.com/staticip/staticip/apis/generated/listers/jke/v1"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

// Name is the controller's name in --controllers.
const Name = "bgppeer"

// Controller writes the BGPPeers' status conditions.
type Controller struct {
	client  versioned.Interface
	peers   jkev1listers.BGPPeerLister
	configs jkev1listers.BGPConfigurationLister
	nodes   jkev1listers.BGPNodeStatusLister
	synced  []cache.InformerSynced
	queue   workqueue.TypedRateLimitingInterface[string]
	// FailoverWindow is the manager's --node-failover-window, which HoldTimeSafe compares with.
	FailoverWindow time.Duration
}

// NewController builds the controller; a peer is looked at again when it, the
// BGPConfiguration or any BGPNodeStatus changes.
func NewController(client versioned.Interface, peerInformer jkev1informers.BGPPeerInformer,
	configInformer jkev1informers.BGPConfigurationInformer, nodeStatusInformer jkev1informers.BGPNodeStatusInformer,
	failoverWindow time.Duration) (*Controller, error) {
	c := &Controller{client: client, peers: peerInformer.Lister(), configs: configInformer.Lister(),
		nodes: nodeStatusInformer.Lister(), FailoverWindow: failoverWindow,
		synced: []cache.InformerSynced{peerInformer.Informer().HasSynced, configInformer.Informer().HasSynced,
			nodeStatusInformer.Informer().HasSynced},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: Name}),
	}
	one := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	if _, err := peerInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: one, UpdateFunc: func(_, cur any) { one(cur) }}); err != nil {
		return nil, err
	}
	all := func(any) { c.enqueueAll() }
	for _, inf := range []cache.SharedIndexInformer{configInformer.Informer(), nodeStatusInformer.Informer()} {
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: all, DeleteFunc: all,
			UpdateFunc: func(_, cur any) { all(cur) }}); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (c *Controller) enqueueAll() {
	peers, err := c.peers.List(labels.Everything())
	if err != nil {
		return
	}
	for _, p := range peers {
		c.queue.Add(p.Name)
	}
}

// Run runs one worker until ctx is done (the peers are few; one is enough).
func (c *Controller) Run(ctx context.Context) {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return
	}
	go wait.UntilWithContext(ctx, func(ctx context.Context) {
		for c.processNext(ctx) {
		}
	}, time.Second)
	<-ctx.Done()
}

func (c *Controller) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	if err := c.sync(ctx, key); err != nil {
		klog.FromContext(ctx).Error(err, "BGPPeer status", "peer", key)
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

// sync writes the peer's conditions when they change.
func (c *Controller) sync(ctx context.Context, name string) error {
	cur, err := c.peers.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	cfg, err := c.configs.Get(jkev1.BGPConfigurationName)
	if apierrors.IsNotFound(err) {
		cfg, err = nil, nil
	}
	if err != nil {
		return err
	}
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		return err
	}
	p := cur.DeepCopy()
	for _, cond := range Conditions(cur, cfg, nodes, c.FailoverWindow) {
		cond.ObservedGeneration = p.Generation
		meta.SetStatusCondition(&p.Status.Conditions, cond)
	}
	p.Status.ObservedGeneration = p.Generation
	if apiequality.Semantic.DeepEqual(p.Status, cur.Status) {
		return nil
	}
	_, err = c.client.JkeV1().BGPPeers().UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		c.queue.AddAfter(name, time.Second)
		return nil
	}
	return err
}
