package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

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
	return skel.CNIFuncs{Add: p.Add, Del: p.Del, Check: p.Check, GC: p.GC, Status: p.Status}
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
	db, err := ipam.Open(ipam.Options{Path: conf.DBPath(), OpenTimeout: conf.dbTimeout(), Quarantine: conf.quarantine()})
	if err != nil {
		return nil, ipamError(err)
	}
	return db, nil
}

func (p *Plugin) kube(conf *NetConf) *kubeClient {
	if conf.Kubeconfig == "" {
		return nil
	}
	kc, err := newKubeClient(conf.Kubeconfig, conf.apiTimeout())
	if err != nil {
		p.logf("cannot use the API server: %v", err)
		return nil
	}
	return kc
}

// request is what ADD decided to ask the allocator for.
type request struct {
	IP netip.Addr
	// WriteBack: the pod has static IPs enabled but no IP annotation yet; the chosen IP is
	// written back to it.
	WriteBack bool
}

// requestedIP resolves the IP the pod must get. The annotation wins; it comes from the
// runtime's pod-annotations capability when passed, otherwise from the API server. CNI_ARGS
// IP= and runtimeConfig ips are the non-Kubernetes way to ask.
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
	if known {
		if v, ok := annotations[AnnotationIPAddress]; ok && strings.TrimSpace(v) != "" {
			a, err := netip.ParseAddr(strings.TrimSpace(v))
			if err != nil {
				return req, types.NewError(ErrCodeBadAnnotation,
					fmt.Sprintf("staticip: pod %s: annotation %s=%q is not an IP address", pod, AnnotationIPAddress, v), "")
			}
			a = a.Unmap()
			if len(explicit) == 1 && explicit[0] != a {
				return req, types.NewError(ErrCodeBadRequestedIP,
					fmt.Sprintf("staticip: pod %s: annotation %s=%s conflicts with requested IP %s", pod, AnnotationIPAddress, a, explicit[0]), "")
			}
			req.IP = a
			return req, nil
		}
		req.WriteBack = strings.EqualFold(annotations[AnnotationEnable], "true")
	}
	if len(explicit) == 1 {
		req.IP = explicit[0]
	}
	return req, nil
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
// no veth, no route, no allocation made by this call.
func (p *Plugin) Add(args *skel.CmdArgs) error {
	ctx := context.Background()
	conf, err := LoadConf(args.StdinData)
	if err != nil {
		return err
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

	kc := p.kube(conf)
	req, err := p.requestedIP(ctx, conf, kargs, pod, kc)
	if err != nil {
		return err
	}
	att := ipam.Attachment{ContainerID: args.ContainerID, IfName: args.IfName}

	db, err := openDB(conf)
	if err != nil {
		return err
	}
	if kept, err := db.SyncRanges(conf.ranges); err != nil {
		db.Close()
		return ipamError(err)
	} else if len(kept) > 0 {
		p.logf("ranges %v are no longer configured but still have allocations; kept until they drain", kept)
	}
	alloc, created, err := db.Allocate(ipam.AllocateRequest{Attachment: att, Pod: pod, IP: req.IP})
	ranges, _ := db.Ranges()
	db.Close()
	if err != nil {
		var oor *ipam.OutOfRangeError
		if errors.As(err, &oor) && oor.OwnerHint == "" {
			oor.OwnerHint = ownerHint(ctx, kc, oor.IP)
		}
		if pod.Name != "" {
			err = fmt.Errorf("pod %s: %w", pod, err)
		}
		return ipamError(err)
	}

	rng, _ := findRange(ranges, alloc.IP)
	pn := podNetwork{IP: alloc.IP, Gateway: gatewayFor(rng, alloc.IP), IfName: args.IfName,
		HostVeth: HostVethName(args.ContainerID, args.IfName), MTU: conf.MTU}
	if !created {
		// A repeated ADD (the runtime retrying): rebuild the attachment from scratch around the
		// IP it already holds.
		_ = pn.tearDown(netns)
	}
	result, err := pn.setUp(netns)
	if err != nil {
		if created {
			if rerr := p.release(conf, att, false); rerr != nil {
				p.logf("rollback: releasing %s of %s: %v", alloc.IP, args.ContainerID, rerr)
			}
		}
		return types.NewError(ErrCodeNetwork, fmt.Sprintf("staticip: setting up %s in %s failed (rolled back): %v", args.IfName, args.Netns, err), "")
	}
	if req.WriteBack && kc != nil {
		// Not fatal: the StaticIP controller also learns the IP from the pod's status.
		if err := kc.annotatePod(ctx, pod.Namespace, pod.Name, pod.UID, AnnotationIPAddress, alloc.IP.String()); err != nil {
			p.logf("pod %s: writing back %s=%s: %v", pod, AnnotationIPAddress, alloc.IP, err)
		}
	}
	return types.PrintResult(result, conf.CNIVersion)
}

func findRange(rs []ipam.Range, ip netip.Addr) (ipam.Range, bool) {
	for _, r := range rs {
		if r.Subnet.Contains(ip) {
			return r, true
		}
	}
	return ipam.Range{}, false
}

func (p *Plugin) release(conf *NetConf, att ipam.Attachment, keep bool) error {
	db, err := openDB(conf)
	if err != nil {
		return err
	}
	defer db.Close()
	_, _, err = db.Release(att, keep)
	return err
}

// keepReserved decides on DEL whether the pod's IP stays reserved: while its StaticIP exists.
// When the API server cannot be asked, the IP is kept: a wrongly kept reservation is undone
// by the node agent's next StaticIP sync, a wrongly freed one may go to another pod for good.
func (p *Plugin) keepReserved(ctx context.Context, kc *kubeClient, alloc ipam.Allocation) bool {
	if kc == nil || alloc.Pod.Name == "" {
		return false
	}
	sip, err := kc.getStaticIP(ctx, alloc.Pod.Namespace, alloc.Pod.Name)
	switch {
	case errors.Is(err, errNotFound):
		return false
	case err != nil:
		p.logf("pod %s: cannot ask the API server for its StaticIP (%v); keeping %s reserved", alloc.Pod, err, alloc.IP)
		return true
	case sip.Spec.IP != "" && sip.Spec.IP != alloc.IP.String():
		return false // the record holds another IP; this one is not the pod's fixed IP
	}
	return true
}

// Del removes the attachment; it is idempotent (unknown container, missing netns: fine).
func (p *Plugin) Del(args *skel.CmdArgs) error {
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
	kc := p.kube(conf)
	if kc == nil {
		return p.releaseOrErr(conf, att, false)
	}
	db, err := openDB(conf)
	if err != nil {
		return err
	}
	alloc, found, err := db.Get(att)
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
	return p.releaseOrErr(conf, att, p.keepReserved(ctx, kc, alloc))
}

func (p *Plugin) releaseOrErr(conf *NetConf, att ipam.Attachment, keep bool) error {
	if err := p.release(conf, att, keep); err != nil {
		return ipamError(err)
	}
	return nil
}

// Check verifies the attachment against the database and prevResult.
func (p *Plugin) Check(args *skel.CmdArgs) error {
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
	alloc, found, err := db.Get(ipam.Attachment{ContainerID: args.ContainerID, IfName: args.IfName})
	ranges, _ := db.Ranges()
	db.Close()
	if err != nil {
		return ipamError(err)
	}
	if !found {
		return types.NewError(ErrCodeCheckFailed, fmt.Sprintf("staticip: no IP is allocated to container %s interface %s", args.ContainerID, args.IfName), "")
	}
	inPrev := false
	for _, ipc := range prev.IPs {
		if a, ok := netip.AddrFromSlice(ipc.Address.IP); ok && a.Unmap() == alloc.IP {
			inPrev = true
		}
	}
	if !inPrev {
		return types.NewError(ErrCodeCheckFailed, fmt.Sprintf("staticip: prevResult lacks the allocated IP %s", alloc.IP), "")
	}
	netns, err := ns.GetNS(args.Netns)
	if err != nil {
		return types.NewError(types.ErrInvalidNetNS, fmt.Sprintf("staticip: cannot open netns %q: %v", args.Netns, err), "")
	}
	defer netns.Close()
	rng, _ := findRange(ranges, alloc.IP)
	pn := podNetwork{IP: alloc.IP, Gateway: gatewayFor(rng, alloc.IP), IfName: args.IfName,
		HostVeth: HostVethName(args.ContainerID, args.IfName), MTU: conf.MTU}
	if err := pn.check(netns); err != nil {
		return types.NewError(ErrCodeCheckFailed, "staticip: "+err.Error(), "")
	}
	return nil
}

// GC releases the IPs of every attachment not in cni.dev/valid-attachments and removes their
// host veths if they linger. With a kubeconfig, the IP of a pod whose StaticIP exists stays
// reserved (and every one does if the API server cannot be asked).
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
	if kc := p.kube(conf); kc != nil {
		sips, err := kc.listStaticIPs(ctx)
		if err != nil {
			p.logf("GC: cannot list StaticIPs (%v); IPs of gone pods stay reserved", err)
			keep = func(a ipam.Allocation) bool { return a.Pod.Name != "" }
		} else {
			owned := map[string]string{}
			for _, s := range sips {
				owned[s.Metadata.Namespace+"/"+s.Metadata.Name] = s.Spec.IP
			}
			keep = func(a ipam.Allocation) bool {
				ip, ok := owned[a.Pod.Key()]
				return ok && (ip == "" || ip == a.IP.String())
			}
		}
	}
	db, err := openDB(conf)
	if err != nil {
		return err
	}
	freed, err := db.GC(ipam.GCOptions{Live: live, KeepReserved: keep})
	db.Close()
	if err != nil {
		return ipamError(err)
	}
	for _, a := range freed {
		if link, err := netlink.LinkByName(HostVethName(a.Attachment.ContainerID, a.Attachment.IfName)); err == nil {
			_ = netlink.LinkDel(link)
		}
		p.logf("GC: released %s of container %s (%s)", a.IP, a.Attachment.ContainerID, a.Pod)
	}
	return nil
}

// Status reports whether ADD can succeed: the database opens and some range has a free IP.
func (p *Plugin) Status(args *skel.CmdArgs) error {
	conf, err := LoadConf(args.StdinData)
	if err != nil {
		return err
	}
	if len(conf.ranges) == 0 {
		return types.NewError(types.ErrPluginNotAvailable, "staticip: no IP ranges configured (staticip-agent fills them from this node's IPRanges)", "")
	}
	db, err := openDB(conf)
	if err != nil {
		var te *types.Error
		errors.As(err, &te)
		return types.NewError(types.ErrPluginNotAvailable, te.Msg, "")
	}
	defer db.Close()
	if _, err := db.SyncRanges(conf.ranges); err != nil {
		return types.NewError(types.ErrPluginNotAvailable, "staticip: "+err.Error(), "")
	}
	usage, err := db.Usage()
	if err != nil {
		return types.NewError(types.ErrPluginNotAvailable, "staticip: "+err.Error(), "")
	}
	free := 0
	for _, u := range usage {
		free += u.Free
	}
	if free == 0 {
		return types.NewError(types.ErrPluginNotAvailable, "staticip: every IP range of this node is exhausted", "")
	}
	return nil
}
