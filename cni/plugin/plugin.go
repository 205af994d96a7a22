package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/staticip/staticip/apis/podip"
	"github.com/staticip/staticip/apis/workloadref"
	"github.com/staticip/staticip/ipam"
)

// Plugin carries what the CNI commands share. The zero value is not usable; use New.
type Plugin struct {
	// Log receives diagnostics (the runtime keeps the plugin's stderr in its log).
	Log io.Writer
}

// New returns a plugin that logs to stderr.
func New() *Plugin { return &Plugin{Log: os.Stderr} }

// VersionInfo lists the CNI spec versions the plugin speaks.
func VersionInfo() version.PluginInfo {
	return version.PluginSupports("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")
}

// Funcs are the CNI commands for skel.PluginMainFuncs.
func (p *Plugin) Funcs() skel.CNIFuncs {
	return skel.CNIFuncs{Add: p.counted(opAdd, p.Add), Del: p.counted(opDel, p.Del), Check: p.counted(opCheck, p.Check),
		GC: p.GC, Status: p.Status}
}

func (p *Plugin) logf(format string, args ...any) {
	if p.Log != nil {
		fmt.Fprintf(p.Log, "staticip: "+format+"\n", args...)
	}
}

func podRef(a *K8sArgs) ipam.PodRef {
	return ipam.PodRef{Namespace: string(a.K8S_POD_NAMESPACE), Name: string(a.K8S_POD_NAME), UID: string(a.K8S_POD_UID)}
}

func openDB(conf *NetConf) (*ipam.DB, error) {
	db, err := ipam.Open(conf.storeOptions())
	if err != nil {
		return nil, ipamError(err)
	}
	return db, nil
}

// kube returns the API client of a conflist with a kubeconfig. unusable is set when a
// kubeconfig is configured but cannot be used (unreadable, invalid): the plugin then knows it
// runs in Kubernetes but cannot ask the API server, which every caller treats like an
// unreachable API server (keep IPs reserved), never like running without Kubernetes.
func (p *Plugin) kube(conf *NetConf) (kc *kubeClient, unusable bool) {
	if conf.Kubeconfig == "" {
		return nil, false
	}
	kc, err := newKubeClient(conf.Kubeconfig, conf.apiTimeout())
	if err != nil {
		p.logf("cannot use the API server: %v", err)
		return nil, true
	}
	return kc, false
}

// hostLinkAlive reports whether an attachment's host veth exists: the sandbox it belongs to
// has not been torn down. For an allocation imported after corruption the link is recorded
// in the attachment itself.
func hostLinkAlive(a ipam.Attachment) bool {
	_, err := netlink.LinkByName(hostLinkOf(a))
	return err == nil
}

func hostLinkOf(a ipam.Attachment) string {
	if link, ok := a.RecoveredLink(); ok {
		return link
	}
	return HostVethName(a.ContainerID, a.IfName)
}

// lookupAll is lookup returning every address of the attachment (both of a dual-stack one).
func lookupAll(db *ipam.DB, att ipam.Attachment) (ipam.Attachment, []ipam.Allocation, error) {
	allocs, err := db.GetAll(att)
	if err != nil || len(allocs) > 0 {
		return att, allocs, err
	}
	rec := ipam.RecoveredAttachment(HostVethName(att.ContainerID, att.IfName))
	allocs, err = db.GetAll(rec)
	return rec, allocs, err
}

// lookup finds the attachment's allocation, also when it was imported after corruption (keyed
// by the attachment's host veth, the only thing the host shows).
func lookup(db *ipam.DB, att ipam.Attachment) (ipam.Attachment, ipam.Allocation, bool, error) {
	alloc, found, err := db.Get(att)
	if err != nil || found {
		return att, alloc, found, err
	}
	rec := ipam.RecoveredAttachment(HostVethName(att.ContainerID, att.IfName))
	alloc, found, err = db.Get(rec)
	return rec, alloc, found, err
}

// request is what ADD decided to ask the allocator for.
type request struct {
	// IP is the address the pod asks for (its primary), Second its address of the other IP
	// family (a dual-stack annotation or record).
	IP, Second netip.Addr
	// WriteBack: the pod has static IPs enabled but no IP annotation yet; the chosen IP is
	// written back to it.
	WriteBack bool
	// annotation is the pod's ip-address annotation (trimmed; "" when absent or unknown). It
	// decides IP only together with the pod's reservation (podip.Choose, in Add).
	annotation string
	// pools are the IPPools the pod's next free address must come from (poolsOf): its address
	// comes from a range of the first of them this node has one of (ipam.AllocateRequest.Pools).
	pools []string
	// poolsFromStore: the API server could not be asked; the store's copy decides.
	poolsFromStore bool
	// poolFamilies are the IP families of pools (poolFamilies): a dual-stack pod's pools give it
	// an address of each, even of a family whose block has not reached this node yet.
	poolFamilies []int
}

// requestedIP reads what the pod asks for: its ip-address annotation, from the runtime's
// pod-annotations capability when passed, otherwise from the API server; CNI_ARGS IP= and
// runtimeConfig ips are the non-Kubernetes way to ask. An annotation is not resolved here:
// the pod's own StaticIP record (its reservation on this node) goes first (podip.Choose).
func (p *Plugin) requestedIP(ctx context.Context, conf *NetConf, args *K8sArgs, pod ipam.PodRef, kc *kubeClient) (request, error) {
	var req request
	explicit, err := explicitIPs(conf, args)
	if err != nil {
		return req, err
	}
	if len(explicit) > 1 {
		return req, types.NewError(ErrCodeBadRequestedIP, fmt.Sprintf("staticip gives one IP per interface, but %d were requested (%v)", len(explicit), explicit), "")
	}
	annotations := conf.RuntimeConfig.PodAnnotations
	known := annotations != nil
	// The namespace and the IPPools are read while the pod is (poolsOf needs both).
	views := make(chan poolView, 1)
	if kc != nil && pod.Name != "" {
		go func() { views <- kc.readPoolView(ctx, pod.Namespace) }()
	} else {
		views <- poolView{err: fmt.Errorf("no API server configured")}
	}
	if !known && kc != nil && pod.Name != "" {
		obj, err := kc.getPod(ctx, pod.Namespace, pod.Name)
		if err != nil {
			// Offline (edge node cut off from the API server): a reservation synced into the
			// database still gives the pod its IP; see README "Offline".
			p.logf("pod %s: cannot read annotations from the API server (%v); using local reservations", pod, err)
		} else {
			annotations, known = obj.Metadata.Annotations, true
		}
	}
	if pod.Name != "" {
		view := <-views
		if req.pools, req.poolsFromStore, err = p.poolsOf(pod, annotations, view); err != nil {
			return req, err
		}
		req.poolFamilies = poolFamilies(req.pools, view)
	}
	if known {
		if v := strings.TrimSpace(annotations[podip.AnnotationIPAddress]); v != "" {
			if a, err := podip.ParseAddresses(v); err == nil && len(explicit) == 1 && a.Of(podip.Family(explicit[0])) != explicit[0] {
				return req, types.NewError(ErrCodeBadRequestedIP,
					fmt.Sprintf("staticip: pod %s: annotation %s=%s conflicts with requested IP %s", pod, podip.AnnotationIPAddress, a, explicit[0]), "")
			}
			req.annotation = v
			return req, nil
		}
		req.WriteBack = strings.EqualFold(annotations[AnnotationEnable], "true")
	}
	if len(explicit) == 1 {
		req.IP = explicit[0]
	}
	return req, nil
}

// resolveAnnotation decides the IP of an annotated pod with podip.Choose, the scheduler's rule
// too: the IP reserved for the pod on this node — the agent's copy of its StaticIP record, or
// the IP its DEL kept while the record existed — over the annotation, which may be a stale
// copy. A reservation kept for another workload's same-name pod is not this pod's record.
func (p *Plugin) resolveAnnotation(req *request, pod ipam.PodRef, reserved []netip.Addr, otherWorkload bool) error {
	if req.annotation == "" {
		return nil
	}
	record := ""
	if len(reserved) > 0 && !otherWorkload {
		var rec podip.Addresses
		rec.Primary = reserved[0]
		if len(reserved) > 1 {
			rec.Secondary = reserved[1]
		}
		record = rec.String()
	}
	choice, err := podip.Choose(record, req.annotation)
	if err != nil {
		return types.NewError(ErrCodeBadAnnotation, fmt.Sprintf("staticip: pod %s: %v", pod, err), "")
	}
	if choice.Overrode.IsValid() {
		p.logf("pod %s: annotation %s=%s disagrees with the IP %s reserved for the pod on this node (its StaticIP); the reservation wins (apis/podip)",
			pod, podip.AnnotationIPAddress, choice.Overrode, choice.IP)
	}
	req.IP, req.Second = choice.IP, choice.Secondary
	return nil
}

// podReservation returns the IP reserved for the pod's name in this node's store, and whether
// that reservation is kept for another workload (reservedForAnotherWorkload). The store is read
// when the API can be asked or the pod is annotated (resolveAnnotation needs the reservation).
func (p *Plugin) podReservation(ctx context.Context, conf *NetConf, kc *kubeClient, pod ipam.PodRef, annotated bool) ([]netip.Addr, bool) {
	if pod.Name == "" || (kc == nil && !annotated) {
		return nil, false
	}
	db, err := openDB(conf)
	if err != nil {
		return nil, false // Allocate reports it
	}
	ips, err := db.PodReservations(pod)
	db.Close()
	if err != nil || len(ips) == 0 {
		return nil, false
	}
	return ips, p.reservedForAnotherWorkload(ctx, kc, pod, ips[0])
}

// reservedForAnotherWorkload: the IP reserved under the pod's name is kept by a StaticIP of
// another workload (spec.apiGroup/kind/ref) than the pod's controller — an EnhancedStatefulSet
// web's record and a StatefulSet web's pod web-0, or apps' StatefulSet web's record and
// OpenKruise's StatefulSet web's pod web-0. The pod name alone is not the key: the StaticIP
// controller refuses such a pod the annotation, and the CNI must not hand it the IP by name.
// Asked only when the store holds a reservation for the pod's name, whether or not the pod
// requests an IP (annotation or CNI_ARGS: the same rule for both paths); when the API server
// cannot answer, the reservation is used as before (offline nodes).
func (p *Plugin) reservedForAnotherWorkload(ctx context.Context, kc *kubeClient, pod ipam.PodRef, ip netip.Addr) bool {
	if kc == nil {
		return false
	}
	// Both objects at once: a restarted static-IP pod always has a reservation, so this is on
	// the path of every same-IP restart, and one round trip less is one less on a loaded API
	// server (the pod is read even when the record turns out to be unowned; it costs nothing
	// extra in time).
	type podResult struct {
		obj *podObject
		err error
	}
	podCh := make(chan podResult, 1)
	go func() {
		obj, err := kc.getPod(ctx, pod.Namespace, pod.Name)
		podCh <- podResult{obj, err}
	}()
	sip, err := kc.getStaticIP(ctx, pod.Namespace, pod.Name)
	pr := <-podCh
	if err != nil || sip.Spec.Ref == "" {
		return false
	}
	obj, err := pr.obj, pr.err
	if err != nil {
		return false
	}
	rec := workloadref.FromRecord(sip.Spec.APIGroup, sip.Spec.Kind, sip.Spec.Ref)
	var owner *workloadref.Ref
	if ref := obj.controller(); ref != nil {
		o := workloadref.FromOwner(ref.APIVersion, ref.Kind, ref.Name)
		owner = &o
	}
	if !workloadref.Belongs(rec, owner) {
		desc := "no controller"
		if owner != nil {
			desc = owner.String()
		}
		p.logf("pod %s (%s): %s is reserved by StaticIP %s for %s; taking a free IP", pod, desc, ip, sip.Metadata.Name, rec)
		return true
	}
	return false
}

// ownerHint asks the API server which node owns ip, for the out-of-range message.
func ownerHint(ctx context.Context, kc *kubeClient, ip netip.Addr) string {
	if kc == nil {
		return ""
	}
	ranges, err := kc.listIPRanges(ctx)
	if err != nil {
		return ""
	}
	for _, r := range ranges {
		if pfx, err := netip.ParsePrefix(r.Spec.CIDR); err == nil && pfx.Contains(ip) {
			if r.Spec.Node == "" {
				return fmt.Sprintf("it belongs to IPRange %s (%s), which no node owns", r.Metadata.Name, r.Spec.CIDR)
			}
			return fmt.Sprintf("it belongs to IPRange %s (%s) owned by node %s", r.Metadata.Name, r.Spec.CIDR, r.Spec.Node)
		}
	}
	return "no IPRange contains it"
}

// Add allocates the IP and configures the attachment. On any failure nothing stays behind:
// no veth, no route, and no change to the database made by this call (a reservation the pod
// had before stays, an IP taken over from its earlier sandbox goes back to it).
func (p *Plugin) Add(args *skel.CmdArgs) error {
	start := time.Now()
	ctx := context.Background()
	conf, err := LoadConf(args.StdinData)
	if err != nil {
		return err
	}
	if conf.rangesErr != nil {
		return conf.rangesErr
	}
	kargs, err := loadArgs(args.Args)
	if err != nil {
		return err
	}
	pod := podRef(kargs)
	netns, err := ns.GetNS(args.Netns)
	if err != nil {
		return types.NewError(types.ErrInvalidNetNS, fmt.Sprintf("staticip: cannot open netns %q: %v", args.Netns, err), "")
	}
	defer netns.Close()

	kc, _ := p.kube(conf)
	req, err := p.requestedIP(ctx, conf, kargs, pod, kc)
	if err != nil {
		return err
	}
	att := ipam.Attachment{ContainerID: args.ContainerID, IfName: args.IfName}
	// Asked whether or not the pod requests an IP: a requested IP that is the reservation of
	// another workload's same-name pod is refused by the IPAM, as a free one would be taken.
	reserved, skipReservation := p.podReservation(ctx, conf, kc, pod, req.annotation != "")
	if err := p.resolveAnnotation(&req, pod, reserved, skipReservation); err != nil {
		return err
	}

	allocs, counted, ranges, served, err := p.allocate(conf, start, ipam.AllocateRequest{Attachment: att, Pod: pod, IP: req.IP,
		SkipPodReservation: skipReservation, Alive: hostLinkAlive, Pools: req.pools, PoolFamilies: req.poolFamilies, NamespacePoolsFromStore: req.poolsFromStore}, req.Second)
	var oe *openError
	if errors.As(err, &oe) {
		return oe.err
	}
	if err == nil {
		for _, a := range allocs {
			if !a.Created {
				continue
			}
			if why := movedWhileFenced(ctx, kc, served, a.IP); why != "" {
				p.rollback(conf, allocs, counted, args.ContainerID)
				return types.NewError(ErrCodeOutOfRange, fmt.Sprintf("staticip: pod %s: %s", pod, why), "")
			}
		}
	}
	if err != nil {
		var oor *ipam.OutOfRangeError
		if errors.As(err, &oor) && oor.OwnerHint == "" {
			oor.OwnerHint = ownerHint(ctx, kc, oor.IP)
		}
		var te *ipam.TakeoverError
		if errors.As(err, &te) {
			te.Link = hostLinkOf(te.Previous)
		}
		if pod.Name != "" {
			err = fmt.Errorf("pod %s: %w", pod, err)
		}
		return ipamError(err)
	}

	held := make([]ipam.Allocation, len(allocs))
	created, repeated := false, false
	for i, a := range allocs {
		held[i], created, repeated = a.Allocation, created || a.Created, repeated || !a.Created
	}
	pn := podNetwork{Addrs: podAddrs(ranges, held), IfName: args.IfName,
		HostVeth: HostVethName(args.ContainerID, args.IfName), MTU: conf.MTU}
	if repeated {
		// A repeated ADD (the runtime retrying): rebuild the attachment from scratch around the
		// addresses it already holds.
		_ = pn.tearDown(netns)
	}
	result, err := pn.setUp(netns)
	if err != nil {
		if created {
			p.rollback(conf, allocs, counted, args.ContainerID)
		}
		return types.NewError(ErrCodeNetwork, fmt.Sprintf("staticip: setting up %s in %s failed (rolled back): %v", args.IfName, args.Netns, err), "")
	}
	if req.WriteBack && kc != nil {
		// Not fatal: the StaticIP controller also learns the IP from the pod's status.
		value := addressesOf(held).String()
		if err := kc.annotatePod(ctx, pod.Namespace, pod.Name, pod.UID, podip.AnnotationIPAddress, value); err != nil {
			p.logf("pod %s: writing back %s=%s: %v", pod, podip.AnnotationIPAddress, value, err)
		}
	}
	return types.PrintResult(result, conf.CNIVersion)
}

// openError is a failure to open or sync the store, returned by Add as it is.
type openError struct{ err error }

func (e *openError) Error() string { return e.err.Error() }

// allocate runs the attachment's allocation in the store: an address of every IP family the
// pod takes addresses of on this node (ipam.AllocatePod; both of a dual-stack pod or none). A
// pod naming pools whose ranges have no free address here waits, up to the conflist's poolWait,
// for one to arrive (the range allocator gives the node a block of the pod's pool once the pod
// is bound here; the agent puts it in the store), trying again every 200 ms with the store
// closed in between (other ADDs and the agent go on); then it fails with the store's message,
// which names the pools.
func (p *Plugin) allocate(conf *NetConf, start time.Time, req ipam.AllocateRequest, second netip.Addr) ([]ipam.Allocated, *time.Duration, []ipam.Range, map[string]ipam.ServedRange, error) {
	deadline := time.Now().Add(conf.poolWait())
	for {
		db, err := openDB(conf)
		if err != nil {
			return nil, nil, nil, nil, &openError{err}
		}
		// A hand-written conflist sets the ranges; on a node whose store staticip-agent manages,
		// only the agent does (a stale conflist never brings back a range that moved away).
		if draining, _, err := db.SyncRanges(conf.ranges); err != nil {
			db.Close()
			return nil, nil, nil, nil, &openError{ipamError(err)}
		} else if len(draining) > 0 {
			p.logf("ranges %v are no longer configured but still have allocations; they drain (nothing new is allocated from them)", draining)
		}
		// Counted in the allocation's own commit; taken back by the caller if the call fails after it.
		db.RecordCallOnCommit(opAdd, start)
		allocs, err := db.AllocatePod(req, second)
		counted := countedCall(db)
		ranges, _ := db.Ranges()
		served, _ := db.Served()
		db.Close()
		if err == nil || len(req.Pools) == 0 || !errors.Is(err, ipam.ErrExhausted) || time.Now().After(deadline) {
			if err != nil && len(req.Pools) > 0 && errors.Is(err, ipam.ErrExhausted) {
				err = fmt.Errorf("%w (waited %s)", err, conf.poolWait())
			}
			return allocs, counted, ranges, served, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// rollback undoes what this ADD allocated (only the addresses it created: a repeated ADD's
// held ones stay), and in the same commits takes back the success the allocation counted.
func (p *Plugin) rollback(conf *NetConf, allocs []ipam.Allocated, counted *time.Duration, containerID string) {
	for _, a := range allocs {
		if !a.Created {
			continue
		}
		if err := p.unallocate(conf, a.Allocation, counted); err != nil {
			p.logf("rollback: undoing the allocation of %s to %s: %v", a.IP, containerID, err)
		}
		counted = nil // retracted once
	}
}

// addressesOf are an attachment's addresses in the annotation's form (primary first).
func addressesOf(allocs []ipam.Allocation) podip.Addresses {
	var a podip.Addresses
	for i, al := range allocs {
		switch i {
		case 0:
			a.Primary = al.IP
		case 1:
			a.Secondary = al.IP
		}
	}
	return a
}

// unallocate undoes an ADD's allocation, and in the same commit takes back the success that
// the allocation's commit counted (the wrapper counts the failure).
func (p *Plugin) unallocate(conf *NetConf, alloc ipam.Allocation, counted *time.Duration) error {
	db, err := openDB(conf)
	if err != nil {
		return err
	}
	defer db.Close()
	if counted != nil {
		db.RetractCallOnCommit(opAdd, *counted)
	}
	return db.Unallocate(alloc)
}

// countedCall is the success db's last commit counted, nil if none.
func countedCall(db *ipam.DB) *time.Duration {
	if took, ok := db.CountedCall(); ok {
		return &took
	}
	return nil
}

// movedWhileFenced guards the window between a fenced node's return and its agent's first
// pass (which revokes what node failover moved away, cni/agent/fence.go): until then the
// database still holds the range, and the plugin would hand out addresses that live on
// another node now. It asks the API server for the IPRange the address came from (by the name
// the agent recorded when it served it) and names the move when the range's ownership
// generation is higher than the one the node served it at. When the API server cannot be
// asked, nothing is refused: a node offline serves its pods from its database.
func movedWhileFenced(ctx context.Context, kc *kubeClient, served map[string]ipam.ServedRange, ip netip.Addr) string {
	if kc == nil {
		return ""
	}
	for name, s := range served {
		if !s.Subnet.Contains(ip) {
			continue
		}
		if s.Revoked { // revoked, its host side not yet withdrawn: never handed out again
			return fmt.Sprintf("%s belongs to IPRange %s, which this node revoked (node failover moved it while this node was fenced); staticip-agent is withdrawing it", ip, name)
		}
		r, err := kc.getIPRange(ctx, name)
		if err != nil || r.Spec.OwnerGeneration <= s.OwnerGeneration {
			return ""
		}
		return fmt.Sprintf("%s belongs to IPRange %s, which node failover moved to node %q (owner generation %d, this node served it at %d) while this node was fenced; staticip-agent withdraws it from this node",
			ip, name, r.Spec.Node, r.Spec.OwnerGeneration, s.OwnerGeneration)
	}
	return ""
}

func findRange(rs []ipam.Range, ip netip.Addr) (ipam.Range, bool) {
	for _, r := range rs {
		if r.Subnet.Contains(ip) {
			return r, true
		}
	}
	return ipam.Range{}, false
}

func (p *Plugin) release(conf *NetConf, att ipam.Attachment, keep bool, start time.Time) error {
	db, err := openDB(conf)
	if err != nil {
		return err
	}
	defer db.Close()
	db.RecordCallOnCommit(opDel, start)
	_, _, err = db.Release(att, keep)
	return err
}

// keepReserved decides on DEL whether the pod's IP stays reserved: while its StaticIP exists.
// Whenever the API server cannot be asked — unreachable, refusing, or the kubeconfig unusable —
// the IP is kept: a wrongly kept reservation is undone by the node agent's next StaticIP
// sync, a wrongly freed one may go to another pod for good. Only a plugin configured without
// a kubeconfig (no Kubernetes) frees it.
func (p *Plugin) keepReserved(ctx context.Context, kc *kubeClient, unusable bool, alloc ipam.Allocation) bool {
	if alloc.Pod.Name == "" {
		return false
	}
	if kc == nil {
		if unusable {
			p.logf("pod %s: no usable kubeconfig to ask for its StaticIP; keeping %s reserved", alloc.Pod, alloc.IP)
		}
		return unusable
	}
	sip, err := kc.getStaticIP(ctx, alloc.Pod.Namespace, alloc.Pod.Name)
	switch {
	case errors.Is(err, errNotFound):
		return false
	case err != nil:
		p.logf("pod %s: cannot ask the API server for its StaticIP (%v); keeping %s reserved", alloc.Pod, err, alloc.IP)
		return true
	case !sip.records(alloc.IP):
		return false // the record holds other IPs; this one is not the pod's fixed IP
	}
	return true
}

// Del removes the attachment; it is idempotent (unknown container, missing netns: fine). It
// needs no valid ranges.
func (p *Plugin) Del(args *skel.CmdArgs) error {
	start := time.Now()
	ctx := context.Background()
	conf, err := LoadConf(args.StdinData)
	if err != nil {
		return err
	}
	kargs, err := loadArgs(args.Args)
	if err != nil {
		return err
	}
	netns, err := openNetNS(args.Netns)
	if err != nil {
		p.logf("netns %s: %v; removing the host side only", args.Netns, err)
	}
	if netns != nil {
		defer netns.Close()
	}
	pn := podNetwork{IfName: args.IfName, HostVeth: HostVethName(args.ContainerID, args.IfName)}
	if err := pn.tearDown(netns); err != nil {
		return types.NewError(ErrCodeNetwork, fmt.Sprintf("staticip: removing %s: %v", args.IfName, err), "")
	}
	att := ipam.Attachment{ContainerID: args.ContainerID, IfName: args.IfName}
	db, err := openDB(conf)
	if err != nil {
		return err
	}
	if conf.Kubeconfig == "" {
		// Not in Kubernetes: nothing to ask, release at once (one transaction, as host-local).
		defer db.Close()
		db.RecordCallOnCommit(opDel, start)
		if _, found, err := db.Release(att, false); err != nil || found {
			return ipamErrorOrNil(err)
		}
		_, _, err := db.Release(ipam.RecoveredAttachment(HostVethName(att.ContainerID, att.IfName)), false)
		return ipamErrorOrNil(err)
	}
	att, alloc, found, err := lookup(db, att)
	db.Close()
	if err != nil {
		return ipamError(err)
	}
	if !found {
		return nil
	}
	if alloc.Pod.Name == "" {
		alloc.Pod = podRef(kargs)
	}
	kc, unusable := p.kube(conf)
	return p.releaseOrErr(conf, att, p.keepReserved(ctx, kc, unusable, alloc), start)
}

func ipamErrorOrNil(err error) error {
	if err != nil {
		return ipamError(err)
	}
	return nil
}

func (p *Plugin) releaseOrErr(conf *NetConf, att ipam.Attachment, keep bool, start time.Time) error {
	if err := p.release(conf, att, keep, start); err != nil {
		return ipamError(err)
	}
	return nil
}

// Check verifies the attachment against the database and prevResult.
func (p *Plugin) Check(args *skel.CmdArgs) error {
	start := time.Now()
	conf, err := LoadConf(args.StdinData)
	if err != nil {
		return err
	}
	if err := version.ParsePrevResult(&conf.PluginConf); err != nil {
		return types.NewError(types.ErrDecodingFailure, "staticip: prevResult: "+err.Error(), "")
	}
	if conf.PrevResult == nil {
		return types.NewError(types.ErrInvalidNetworkConfig, "staticip: CHECK needs a prevResult", "")
	}
	prev, err := current.NewResultFromResult(conf.PrevResult)
	if err != nil {
		return types.NewError(types.ErrDecodingFailure, "staticip: prevResult: "+err.Error(), "")
	}
	db, err := openDB(conf)
	if err != nil {
		return err
	}
	_, allocs, err := lookupAll(db, ipam.Attachment{ContainerID: args.ContainerID, IfName: args.IfName})
	ranges, _ := db.Ranges()
	db.Close()
	if err != nil {
		return ipamError(err)
	}
	if len(allocs) == 0 {
		return types.NewError(ErrCodeCheckFailed, fmt.Sprintf("staticip: no IP is allocated to container %s interface %s", args.ContainerID, args.IfName), "")
	}
	for _, alloc := range allocs {
		inPrev := false
		for _, ipc := range prev.IPs {
			if a, ok := netip.AddrFromSlice(ipc.Address.IP); ok && a.Unmap() == alloc.IP {
				inPrev = true
			}
		}
		if !inPrev {
			return types.NewError(ErrCodeCheckFailed, fmt.Sprintf("staticip: prevResult lacks the allocated IP %s", alloc.IP), "")
		}
	}
	netns, err := ns.GetNS(args.Netns)
	if err != nil {
		return types.NewError(types.ErrInvalidNetNS, fmt.Sprintf("staticip: cannot open netns %q: %v", args.Netns, err), "")
	}
	defer netns.Close()
	pn := podNetwork{Addrs: podAddrs(ranges, allocs), IfName: args.IfName,
		HostVeth: HostVethName(args.ContainerID, args.IfName), MTU: conf.MTU}
	if err := pn.check(netns); err != nil {
		return types.NewError(ErrCodeCheckFailed, "staticip: "+err.Error(), "")
	}
	// CHECK only reads: counting its success costs a commit of its own. Runtimes call CHECK
	// rarely (containerd's CRI never does); a store busy for longer than the CHECK's own
	// timeout leaves it uncounted rather than failing a healthy attachment.
	if db, err := openDB(conf); err == nil {
		if err := db.RecordCall(opCheck, start); err != nil {
			p.logf("CHECK of %s: counting it in the IPAM database: %v", args.ContainerID, err)
		}
		db.Close()
	}
	return nil
}

// GC releases the IPs of every attachment not in cni.dev/valid-attachments whose host veth is
// gone too, and removes lingering host veths of those attachments. With a kubeconfig, the IP
// of a pod whose StaticIP exists stays reserved (and every one does if the API server cannot
// be asked). It needs no valid ranges.
func (p *Plugin) GC(args *skel.CmdArgs) error {
	ctx := context.Background()
	conf, err := LoadConf(args.StdinData)
	if err != nil {
		return err
	}
	live := make([]ipam.Attachment, 0, len(conf.ValidAttachments))
	for _, a := range conf.ValidAttachments {
		live = append(live, ipam.Attachment{ContainerID: a.ContainerID, IfName: a.IfName})
	}
	var keep func(ipam.Allocation) bool
	keepAll := func(a ipam.Allocation) bool { return a.Pod.Name != "" }
	switch kc, unusable := p.kube(conf); {
	case unusable:
		p.logf("GC: no usable kubeconfig; IPs of gone pods stay reserved")
		keep = keepAll
	case kc != nil:
		sips, err := kc.listStaticIPs(ctx)
		if err != nil {
			p.logf("GC: cannot list StaticIPs (%v); IPs of gone pods stay reserved", err)
			keep = keepAll
		} else {
			owned := map[string]*staticIPObject{}
			for i := range sips {
				owned[sips[i].Metadata.Namespace+"/"+sips[i].Metadata.Name] = &sips[i]
			}
			keep = func(a ipam.Allocation) bool {
				sip, ok := owned[a.Pod.Key()]
				return ok && sip.records(a.IP)
			}
		}
	}
	db, err := openDB(conf)
	if err != nil {
		return err
	}
	// An allocation imported after corruption has no runtime attachment ID: it is live while
	// its host veth exists. Runtime attachments are judged by the runtime's list alone (a
	// stale veth of a dead attachment is removed below).
	recoveredAlive := func(a ipam.Allocation) bool {
		_, recovered := a.Attachment.RecoveredLink()
		return recovered && hostLinkAlive(a.Attachment)
	}
	freed, err := db.GC(ipam.GCOptions{Live: live, KeepReserved: keep, Alive: recoveredAlive})
	db.Close()
	if err != nil {
		return ipamError(err)
	}
	for _, a := range freed {
		if link, err := netlink.LinkByName(hostLinkOf(a.Attachment)); err == nil {
			_ = netlink.LinkDel(link)
		}
		p.logf("GC: released %s of container %s (%s)", a.IP, a.Attachment.ContainerID, a.Pod)
	}
	return nil
}

// statusOpenTimeout bounds STATUS's wait for the database: a lock held by another call proves
// the database is in use, not that the node is unready.
const statusOpenTimeout = 500 * time.Millisecond

// Status reports whether ADD can work at all. Not ready only when no range is configured or
// the database is unusable (corrupt, unreadable, being rebuilt) — never because every IP is
// taken (that is one pod's problem, not the node's: the runtime would mark the node NotReady
// and its pods would be evicted) nor because another call holds the database.
func (p *Plugin) Status(args *skel.CmdArgs) error {
	conf, err := LoadConf(args.StdinData)
	if err != nil {
		return err
	}
	notReady := func(format string, args ...any) error {
		return types.NewError(types.ErrPluginNotAvailable, "staticip: "+fmt.Sprintf(format, args...), "")
	}
	opts := conf.storeOptions()
	opts.OpenTimeout = min(opts.OpenTimeout, statusOpenTimeout)
	db, err := ipam.Open(opts)
	if errors.Is(err, ipam.ErrLocked) {
		p.logf("STATUS: %v; the database is in use", err)
		return nil
	} else if err != nil {
		return notReady("%v", err)
	}
	defer db.Close()
	if st, rebuilding, err := db.Recovering(); err != nil {
		return notReady("%v", err)
	} else if rebuilding {
		return notReady("%v", &ipam.RecoveringError{Path: db.Path(), State: st})
	}
	managed, err := db.Managed()
	if err != nil {
		return notReady("%v", err)
	}
	if !managed {
		if conf.rangesErr != nil {
			return conf.rangesErr
		}
		if len(conf.ranges) == 0 {
			return notReady("no IP ranges configured (staticip-agent fills them from this node's IPRanges)")
		}
		return nil
	}
	ranges, err := db.Ranges()
	if err != nil {
		return notReady("%v", err)
	}
	for _, r := range ranges {
		if !r.Draining {
			return nil
		}
	}
	return notReady("no IP range is assigned to this node (staticip-agent sets them from this node's IPRanges)")
}
