package agent

import (
	"context"
	"fmt"
	"net/netip"
	"reflect"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	sipscheme "github.com/staticip/staticip/apis/generated/clientset/versioned/scheme"
	sipinformers "github.com/staticip/staticip/apis/generated/informers/externalversions"
	jkelisters "github.com/staticip/staticip/apis/generated/listers/jke/v1"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

// view is the agent's picture of the API: informer caches, so that a sync costs the API
// server nothing. Listing IPRanges, every StaticIP of the cluster, this node's pods and the
// other nodes on each sync (the agent syncs on every pod deletion) made the agents of a
// cluster a LIST load proportional to nodes x pod churn.
//
// Of the Nodes it reads only its own (its address, its report, its condition) and those whose
// agent does not claim in status.holders (no jkev1.LabelClaimsInStatus: their claims, during an
// upgrade — an old agent is read from its first claim on, no controller has to label it); the
// other nodes' claims and addresses come with the IPRanges (status.holders), so that nothing an
// agent watches grows with the number of nodes beyond the ranges themselves.
type view struct {
	ranges jkelisters.IPRangeLister
	// staticIPs: the StaticIPs of the ranges this node holds and the unlabelled ones (scopes.go).
	staticIPs *staticIPScopes
	pods      corelisters.PodLister
	self      corelisters.NodeLister
	legacy    corelisters.NodeLister
	synced    []cache.InformerSynced
	// bgpConfigs, bgpPeers and secrets (the one password Secret) are nil unless BGP is on
	// (Config.BGP.Enabled).
	bgpConfigs jkelisters.BGPConfigurationLister
	bgpPeers   jkelisters.BGPPeerLister
	secrets    corelisters.SecretLister
	// pools and namespaces: which pools the pods of each namespace take addresses of when they
	// name none (namespacePools, pools.go).
	pools      jkelisters.IPPoolLister
	namespaces corelisters.NamespaceLister
}

// Start starts the informers the sync reads from; Synced (or WaitForCaches) tells when they
// hold the API's state. Changes that matter to the node (a pod of this node deleted; a
// StaticIP, IPRange or node address that changed) call a.trigger, which Run turns into a sync.
// Status-only updates — every agent writing its IPRange counts — do not.
func (a *Agent) Start(ctx context.Context) error {
	if a.view != nil {
		return nil
	}
	if a.recorder == nil && a.kube != nil {
		// Events on the IPRanges and StaticIPs the agent leaves out. The broadcaster sends
		// them in the background (retrying, then dropping them offline): recording never blocks.
		b := record.NewBroadcaster(record.WithContext(ctx))
		b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: a.kube.CoreV1().Events("")})
		a.recorder = b.NewRecorder(sipscheme.Scheme, corev1.EventSource{Component: "staticip-agent", Host: a.cfg.NodeName})
		go func() {
			<-ctx.Done()
			b.Shutdown()
		}()
	}
	self := informers.NewSharedInformerFactoryWithOptions(a.kube, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = "metadata.name=" + a.cfg.NodeName
	}))
	legacy := informers.NewSharedInformerFactoryWithOptions(a.kube, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = jkev1.LabelClaimsInStatus + "!=true"
	}))
	pods := informers.NewSharedInformerFactoryWithOptions(a.kube, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = "spec.nodeName=" + a.cfg.NodeName
	}))
	sips := sipinformers.NewSharedInformerFactory(a.sip, 0)
	cluster := informers.NewSharedInformerFactory(a.kube, 0)

	podInf := pods.Core().V1().Pods().Informer()
	selfInf := self.Core().V1().Nodes().Informer()
	legacyInf := legacy.Core().V1().Nodes().Informer()
	rangeInf := sips.Jke().V1().IPRanges().Informer()
	scopes, err := newStaticIPScopes(ctx, a.sip, a.trigger)
	if err != nil {
		return err
	}
	poolInf := sips.Jke().V1().IPPools().Informer()
	nsInf := cluster.Core().V1().Namespaces().Informer()
	if err := nsInf.SetTransform(trimNamespace); err != nil {
		return err
	}
	// The agent reads a pod's identity and a node's addresses and report only: keep nothing else.
	if err := podInf.SetTransform(trimPod); err != nil {
		return err
	}
	if err := legacyInf.SetTransform(trimNode); err != nil {
		return err
	}
	if err := selfInf.SetTransform(trimSelfNode); err != nil {
		return err
	}
	register := []struct {
		inf     cache.SharedIndexInformer
		changed func(old, new any) bool
		onAdd   bool
	}{
		{podInf, func(any, any) bool { return false }, false}, // GC cares about pods that are gone
		// This node's address (its claims carry it); a legacy node's address (routes) or its
		// report of the ranges it holds (a range assigned here waits until the node it left
		// has drained it).
		// Its labels: the BGPPeers' node selectors.
		{selfInf, func(o, n any) bool {
			return !reflect.DeepEqual(nodeAddresses(o), nodeAddresses(n)) || !reflect.DeepEqual(nodeLabels(o), nodeLabels(n))
		}, true},
		{legacyInf, func(o, n any) bool {
			return !reflect.DeepEqual(nodeAddresses(o), nodeAddresses(n)) || observedOf(o) != observedOf(n)
		}, true},
		// A range's spec, its claims (status.holders) and whether node failover waits for the
		// routes to it; not its counts, which its owner rewrites as pods come and go.
		{rangeInf, func(o, n any) bool {
			or, nr := o.(*jkev1.IPRange), n.(*jkev1.IPRange)
			return !reflect.DeepEqual(or.Spec, nr.Spec) || !reflect.DeepEqual(or.Status.Holders, nr.Status.Holders) ||
				or.Annotations[jkev1.AnnotationReportRoutes] != nr.Annotations[jkev1.AnnotationReportRoutes] ||
				or.Labels[jkev1.LabelIPPoolRestricted] != nr.Labels[jkev1.LabelIPPoolRestricted]
		}, true},
		// Which pools a namespace's pods take addresses of (namespacePools).
		{poolInf, func(o, n any) bool { return !reflect.DeepEqual(o.(*jkev1.IPPool).Spec, n.(*jkev1.IPPool).Spec) }, true},
		{nsInf, func(o, n any) bool {
			on, nn := o.(*corev1.Namespace), n.(*corev1.Namespace)
			return !reflect.DeepEqual(on.Labels, nn.Labels) || !reflect.DeepEqual(on.Annotations, nn.Annotations)
		}, true},
	}
	for _, r := range register {
		_, err := r.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(any) {
				if r.onAdd {
					a.trigger()
				}
			},
			UpdateFunc: func(o, n any) {
				if r.changed(o, n) {
					a.trigger()
				}
			},
			DeleteFunc: func(any) { a.trigger() },
		})
		if err != nil {
			return err
		}
	}
	v := &view{
		ranges:     sips.Jke().V1().IPRanges().Lister(),
		staticIPs:  scopes,
		pods:       pods.Core().V1().Pods().Lister(),
		self:       self.Core().V1().Nodes().Lister(),
		legacy:     legacy.Core().V1().Nodes().Lister(),
		pools:      sips.Jke().V1().IPPools().Lister(),
		namespaces: cluster.Core().V1().Namespaces().Lister(),
		synced: []cache.InformerSynced{podInf.HasSynced, selfInf.HasSynced, legacyInf.HasSynced, rangeInf.HasSynced, scopes.unlabelled.HasSynced,
			poolInf.HasSynced, nsInf.HasSynced},
	}
	if a.cfg.BGP.Enabled {
		// BGP: the one BGPConfiguration and the BGPPeers (cluster-scoped, few), and the one
		// Secret the passwords come from (a field selector on its name: RBAC grants that
		// name alone). Any change of them triggers a pass.
		cfgInf := sips.Jke().V1().BGPConfigurations().Informer()
		peerInf := sips.Jke().V1().BGPPeers().Informer()
		infs := []cache.SharedIndexInformer{cfgInf, peerInf}
		v.bgpConfigs = sips.Jke().V1().BGPConfigurations().Lister()
		v.bgpPeers = sips.Jke().V1().BGPPeers().Lister()
		if c := a.cfg.BGP; c.PasswordSecretName != "" {
			secrets := informers.NewSharedInformerFactoryWithOptions(a.kube, 0, informers.WithNamespace(c.PasswordSecretNamespace),
				informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + c.PasswordSecretName }))
			secInf := secrets.Core().V1().Secrets().Informer()
			v.secrets = secrets.Core().V1().Secrets().Lister()
			infs = append(infs, secInf)
			defer secrets.Start(ctx.Done())
		}
		for _, inf := range infs {
			if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
				AddFunc: func(any) { a.trigger() }, UpdateFunc: func(any, any) { a.trigger() }, DeleteFunc: func(any) { a.trigger() },
			}); err != nil {
				return err
			}
			v.synced = append(v.synced, inf.HasSynced)
		}
	}
	self.Start(ctx.Done())
	legacy.Start(ctx.Done())
	pods.Start(ctx.Done())
	sips.Start(ctx.Done())
	cluster.Start(ctx.Done())
	a.view = v
	return nil
}

// Synced reports whether every cache has delivered its initial list.
func (a *Agent) Synced() bool {
	if a.view == nil {
		return false
	}
	for _, s := range a.view.synced {
		if !s() {
			return false
		}
	}
	return true
}

// WaitForCaches blocks until the caches are synced or ctx ends.
func (a *Agent) WaitForCaches(ctx context.Context) error {
	if a.view == nil {
		return fmt.Errorf("agent: Start was not called")
	}
	if !cache.WaitForCacheSync(ctx.Done(), a.view.synced...) {
		return fmt.Errorf("agent: caches not synced: %w", ctx.Err())
	}
	return nil
}

// snapshot is one consistent-enough reading of the caches for a sync; the caller owns none of
// the objects (they are the informers'): copy before changing any.
type snapshot struct {
	ranges    []*jkev1.IPRange
	staticIPs []*jkev1.StaticIP
	pods      []*corev1.Pod
	// legacy are the ObservedAnnotation values of the nodes whose agent predates
	// status.holders, by node name; legacyAddresses their InternalIPs.
	legacy          map[string]string
	legacyAddresses map[string][]netip.Addr
	// ownReport is this node's ObservedAnnotation.
	ownReport string
	// selfAddrs are every InternalIP of this node (its claims carry the one of each range's
	// family; the BGP next hops, one per family) and selfLabels its labels (the BGPPeers' node
	// selectors).
	selfAddrs  []netip.Addr
	selfLabels map[string]string
	// selfUID is this node's UID ("" while the cache lacks the Node): the route-report Lease's
	// owner, so that the garbage collector removes the report with the Node.
	selfUID types.UID
	// nodeAddrs are the node addresses outgoing NAT leaves alone: this node's InternalIPs and
	// ExternalIPs, the holders' addresses of every range and the legacy nodes' addresses. The
	// agent does not watch every Node (issue 37: that grows with the square of the cluster), so
	// a node that holds no range and runs no legacy agent is not in it: nonMasqueradeCIDRs covers
	// such nodes (cni/README "Outgoing NAT").
	nodeAddrs []netip.Addr
	// namespacePools: the pools of each namespace whose pods name none (namespacePools).
	namespacePools map[string][]string
}

func (v *view) snapshot(self string) (*snapshot, error) {
	ranges, err := v.ranges.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	sort.Slice(ranges, func(i, j int) bool { return ranges[i].Name < ranges[j].Name })
	// The StaticIPs of the ranges this node holds: a pass waits until they are all in.
	scopes := StaticIPScopes(ranges, self)
	ctx, cancel := context.WithTimeout(v.staticIPs.ctx, apiTimeout)
	defer cancel()
	if !v.staticIPs.ensure(scopes) && !v.staticIPs.waitSynced(ctx) {
		return nil, fmt.Errorf("%w: the StaticIPs of IPRanges %v", errNotSynced, scopes)
	}
	var held []netip.Prefix
	for _, r := range ranges {
		if p, err := netip.ParsePrefix(r.Spec.CIDR); err == nil && holds(r, self) {
			held = append(held, p.Masked())
		}
	}
	sips := v.staticIPs.withVanished(ctx, v.staticIPs.list(), scopes, held)
	pods, err := v.pods.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	legacyNodes, err := v.legacy.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	snap := &snapshot{ranges: ranges, staticIPs: sips, pods: pods, legacy: map[string]string{}, legacyAddresses: map[string][]netip.Addr{}}
	for _, n := range legacyNodes {
		if a := n.Annotations[ObservedAnnotation]; a != "" {
			snap.legacy[n.Name] = a
		}
		if ips := internalIPs(n); len(ips) > 0 {
			snap.legacyAddresses[n.Name] = ips
		}
	}
	var selfNode []*corev1.Node
	if n, err := v.self.Get(self); err == nil {
		snap.ownReport = n.Annotations[ObservedAnnotation]
		snap.selfLabels = n.Labels
		snap.selfAddrs = internalIPs(n)
		snap.selfUID = n.UID
		selfNode = []*corev1.Node{n}
	}
	snap.nodeAddrs = natNodeAddresses(ranges, selfNode, legacyNodes)
	pools, err := v.pools.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	namespaces, err := v.namespaces.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	snap.namespacePools = namespacePools(pools, namespaces)
	return snap, nil
}

// internalIPs are the node's InternalIPs (a dual-stack node has one per family), in its order.
func internalIPs(n *corev1.Node) []netip.Addr {
	var out []netip.Addr
	for _, addr := range n.Status.Addresses {
		if a, err := netip.ParseAddr(addr.Address); err == nil && addr.Type == corev1.NodeInternalIP {
			out = append(out, a.Unmap())
		}
	}
	return out
}

func nodeLabels(obj any) map[string]string {
	if n, ok := obj.(*corev1.Node); ok {
		return n.Labels
	}
	return nil
}

// trimSelfNode is trimNode for the agent's own Node, keeping every label: the BGPPeers'
// node selectors choose nodes by them.
func trimSelfNode(obj any) (any, error) {
	t, err := trimNode(obj)
	if n, ok := obj.(*corev1.Node); ok && err == nil && len(n.Labels) > 0 {
		tn := t.(*corev1.Node)
		tn.Labels = n.Labels
	}
	return t, err
}

func nodeAddresses(obj any) []corev1.NodeAddress {
	if n, ok := obj.(*corev1.Node); ok {
		return n.Status.Addresses
	}
	return nil
}

// trimPod keeps what GC reads: namespace, name, UID, its IPs (to name the holders of the IPs
// found on the host when a corrupt database is rebuilt), whether it is a static pod's mirror (the
// kubelet's UID of a static pod is not the mirror pod's, so GC matches those by name), and the
// node, for clarity in dumps.
func trimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // a DeletedFinalStateUnknown tombstone
	}
	t := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, UID: p.UID, ResourceVersion: p.ResourceVersion},
		Spec:       corev1.PodSpec{NodeName: p.Spec.NodeName},
		Status:     corev1.PodStatus{PodIPs: p.Status.PodIPs},
	}
	if v, ok := p.Annotations[corev1.MirrorPodAnnotationKey]; ok {
		t.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: v}
	}
	return t, nil
}

// trimNode keeps the node's name and addresses (routes go via the InternalIP), the agent's
// report (ObservedAnnotation, and whether it claims in status.holders) and its condition.
func trimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	t := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion},
		Status:     corev1.NodeStatus{Addresses: n.Status.Addresses},
	}
	if v, ok := n.Annotations[ObservedAnnotation]; ok { // what the node reported (fence.go)
		t.Annotations = map[string]string{ObservedAnnotation: v}
	}
	if v, ok := n.Labels[jkev1.LabelClaimsInStatus]; ok {
		t.Labels = map[string]string{jkev1.LabelClaimsInStatus: v}
	}
	if c := networkConditionOf(n); c != nil { // what the agent reported (network.go)
		t.Status.Conditions = []corev1.NodeCondition{*c}
	}
	return t, nil
}

// networkCondition is the node's NetworkUnavailable condition as the cache has it, or nil.
func (v *view) networkCondition(node string) *corev1.NodeCondition {
	n, err := v.self.Get(node)
	if err != nil {
		return nil
	}
	return networkConditionOf(n)
}

// ownReport is the node's ObservedAnnotation and LabelClaimsInStatus as the cache has them.
func (v *view) ownReport(node string) (observed, claimsInStatus string) {
	n, err := v.self.Get(node)
	if err != nil {
		return "", ""
	}
	return n.Annotations[ObservedAnnotation], n.Labels[jkev1.LabelClaimsInStatus]
}

func observedOf(obj any) string {
	if n, ok := obj.(*corev1.Node); ok {
		return n.Annotations[ObservedAnnotation]
	}
	return ""
}

// legacyNodes are the Nodes whose agent does not claim in status.holders (agents of the previous
// release, Nodes whose agent has not started yet or that run none), as the cache has them.
func (v *view) legacyNodes() []*corev1.Node {
	ns, _ := v.legacy.List(labels.Everything())
	return ns
}
