package agent

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/apis/podip"
	"github.com/staticip/staticip/cni/plugin"
	"github.com/staticip/staticip/ipam"
)

// syncDB brings the database in line with the API: ranges, reservations, GC, each one
// transaction, all under the database lock (no CNI call commits in between). The agent is the
// only one that changes the node's ranges (SetNodeRanges): ranges that left the node drain. It
// drops from plan the ranges the database cannot take yet (dropSkipped).
func (a *Agent) syncDB(plan *rangePlan, held map[string][]heldBy, sips []*jkev1.StaticIP, pods []*corev1.Pod) (*Stats, reservationPlan, error) {
	var rp reservationPlan
	db, err := ipam.Open(ipam.ForNetwork(a.cfg.DataDir, NetworkName))
	if errors.Is(err, ipam.ErrCorrupt) {
		db, err = a.rebuild(plan, sips, pods)
	}
	if err != nil {
		return nil, rp, err
	}
	defer db.Close()
	if _, recovering, err := db.Recovering(); err != nil {
		return nil, rp, err
	} else if recovering { // an agent died half-way through a rebuild: do it again
		if err := a.finishRebuild(db, plan, sips, pods); err != nil {
			return nil, rp, err
		}
	}
	// Forced moves first (fence.go): a range this node served at an older ownership generation
	// goes before anything else reads or applies the node's ranges. Should that fail, nothing
	// of this pass is applied: a revoked range must never be served, nor its generation
	// recorded as newly served.
	served, err := db.Served()
	if err != nil {
		return nil, rp, err
	}
	// Only now is it known which ranges this node holds already: another node's claim makes it
	// wait for a range it does not hold yet, never drop one it serves.
	plan.waitForPreviousOwners(held, served)
	if err := a.revoke(db, planRevocations(served, plan.byName)); err != nil {
		return nil, rp, err
	}
	// Recorded before the ranges are applied, so that no range is ever served unrecorded.
	if err := db.RecordServed(servedRecords(plan.mine, plan.ipam)); err != nil {
		return nil, rp, fmt.Errorf("recording served ranges: %w", err)
	}
	allocs, err := db.Allocations()
	if err != nil {
		return nil, rp, err
	}
	a.countAllocations(allocs)
	existing, err := db.Reservations()
	if err != nil {
		return nil, rp, err
	}
	var errs []error
	if changed, err := db.SetNamespacePools(plan.namespacePools); err != nil {
		errs = append(errs, fmt.Errorf("namespace pools: %w", err))
	} else if changed {
		a.logf("namespace pools: %v", plan.namespacePools)
	}
	if rs, err := db.SetNodeRanges(plan.ipam); err != nil {
		errs = append(errs, fmt.Errorf("sync ranges: %w", err))
	} else {
		if d := fmt.Sprint(rs.Draining); len(rs.Draining) > 0 && d != a.draining {
			a.logf("ranges %v moved away but still hold allocations; they drain (nothing new is allocated from them)", rs.Draining)
			a.draining = d
		}
		plan.dropSkipped(rs.Skipped)
		if stored, err := db.Ranges(); err == nil {
			plan.draining = drainingHeld(served, plan.mine, stored, plan.byName)
			if stale := staleServed(served, plan.mine, stored); len(stale) > 0 {
				if err := db.ForgetServed(stale...); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}

	holder := make(map[netip.Addr]string, len(allocs))
	for _, al := range allocs {
		holder[al.IP] = al.Pod.Key()
	}
	reservedFor := make(map[netip.Addr]string, len(existing))
	for _, r := range existing {
		reservedFor[r.IP] = r.Pod.Key()
	}
	rp = planReservations(sips, plan.ipam, holder, reservedFor)
	res, err := db.SyncReservations(rp.reservations)
	if err != nil {
		// A range is reported Synced only once every StaticIP IP in it is reserved (a range
		// that failover just moved here must not look ready before its addresses are held).
		plan.reservationsFailed = true
		errs = append(errs, fmt.Errorf("sync reservations: %w", err))
	}
	for _, c := range res.Conflicts {
		a.logf("StaticIP reserves %s, but pod %s holds it; it goes to its owner once released", c.IP, c.Pod)
	}

	stats := &Stats{Ranges: len(plan.ipam), Reservations: len(rp.reservations)}
	freed, err := a.gc(db, allocs, sips, pods, stats)
	if err != nil {
		errs = append(errs, fmt.Errorf("GC: %w", err))
	}
	stats.Allocations, stats.Freed = len(allocs)-len(freed), len(freed)
	if stats.Usage, err = db.Usage(); err != nil {
		errs = append(errs, err)
	}
	stats.RangeOrigins = rangeOrigins(plan, a.cfg.NodeName)
	if stats.Calls, err = db.CallStats(); err != nil {
		errs = append(errs, fmt.Errorf("CNI call counters: %w", err))
	}
	return stats, rp, errors.Join(errs...)
}

// rebuild replaces a corrupt database: ipam.Recover moves the file aside (never deleting it)
// and opens a fresh store that refuses every allocation; finishRebuild fills it from the API
// and the host and only then lets ADD allocate again. All of it under the database lock.
func (a *Agent) rebuild(plan *rangePlan, sips []*jkev1.StaticIP, pods []*corev1.Pod) (*ipam.DB, error) {
	db, err := ipam.Recover(ipam.ForNetwork(a.cfg.DataDir, NetworkName))
	if err != nil {
		return nil, fmt.Errorf("rebuilding the corrupt IPAM database: %w", err)
	}
	if err := a.finishRebuild(db, plan, sips, pods); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// finishRebuild sets the node's ranges and reservations, imports an allocation for every IP
// the host routes to one of the plugin's veths (named after the pod the cache shows with that
// IP), and ends the recovery. An IP in use on the host is never handed out again: the running
// pods keep theirs, and nothing allocates before the import is complete.
func (a *Agent) finishRebuild(db *ipam.DB, plan *rangePlan, sips []*jkev1.StaticIP, pods []*corev1.Pod) error {
	st, _, err := db.Recovering()
	if err != nil {
		return err
	}
	found, err := hostAttachments(pods)
	if err != nil {
		return fmt.Errorf("rebuild: reading the host's veths and routes: %w", err)
	}
	// What the node held besides the ranges it serves now (claims.go, heldAtRebuild): recorded
	// as served, and held in the store while the host's addresses are imported, so that the
	// ranges it drains stay claimed and those moved away while it was fenced are revoked.
	var imported []netip.Addr
	for _, f := range found {
		imported = append(imported, f.IP)
	}
	restored, held := heldAtRebuild(a.cfg.NodeName, plan.accepted, plan.mine, imported, plan.ownReport)
	if err := db.RecordServed(restored); err != nil {
		return fmt.Errorf("rebuild: restoring the ranges the node held: %w", err)
	}
	if _, err := db.SetNodeRanges(append(append([]ipam.Range(nil), plan.ipam...), held...)); err != nil {
		return fmt.Errorf("rebuild: ranges: %w", err)
	}
	rp := planReservations(sips, plan.ipam, nil, nil)
	if _, err := db.SyncReservations(rp.reservations); err != nil {
		return fmt.Errorf("rebuild: reservations: %w", err)
	}
	res, err := db.Import(found)
	if err != nil {
		return fmt.Errorf("rebuild: import: %w", err)
	}
	// The ranges held only for the import leave the node's ranges: with addresses imported they
	// drain, like any range that moved away.
	if rs, err := db.SetNodeRanges(plan.ipam); err != nil {
		return fmt.Errorf("rebuild: ranges: %w", err)
	} else {
		plan.dropSkipped(rs.Skipped)
	}
	for _, c := range res.Conflicts {
		a.logf("rebuild: %s on %s (pod %s) conflicts with an imported allocation; not imported", c.IP, c.Attachment.ContainerID, c.Pod)
	}
	if err := db.FinishRecovery(); err != nil {
		return err
	}
	a.logf("the IPAM database was corrupt: moved aside to %s; rebuilt from the API (%d range(s), %d reservation(s)) and the host (%d allocation(s) imported, %d already there)",
		st.MovedAside, len(plan.ipam), len(rp.reservations), res.Imported, res.Unchanged)
	a.rebuilds.Add(1)
	return nil
}

// hostAttachments are the allocations the host shows: every /32 (/128) route to one of the
// plugin's veths, with the pod the cache holds with that IP, if any.
func hostAttachments(pods []*corev1.Pod) ([]ipam.Allocation, error) {
	names, err := pluginLinks()
	if err != nil {
		return nil, err
	}
	routes, err := netlink.RouteList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, err
	}
	podOf := map[netip.Addr]ipam.PodRef{}
	for _, p := range pods {
		for _, pip := range p.Status.PodIPs {
			if ip, err := netip.ParseAddr(pip.IP); err == nil {
				podOf[ip.Unmap()] = ipam.PodRef{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID)}
			}
		}
	}
	var out []ipam.Allocation
	for _, r := range routes {
		link, ok := names[r.LinkIndex]
		if !ok || r.Dst == nil {
			continue
		}
		if ones, bits := r.Dst.Mask.Size(); ones != bits {
			continue
		}
		ip, ok := netip.AddrFromSlice(r.Dst.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		out = append(out, ipam.Allocation{IP: ip, Attachment: ipam.RecoveredAttachment(link), Pod: podOf[ip]})
	}
	return out, nil
}

// gc frees the allocations judge finds dead. Without the list of host veths it frees nothing:
// it cannot tell a running sandbox from a gone one.
func (a *Agent) gc(db *ipam.DB, allocs []ipam.Allocation, sips []*jkev1.StaticIP, pods []*corev1.Pod, stats *Stats) ([]ipam.Allocation, error) {
	veths, err := hostVeths()
	if err != nil {
		return nil, fmt.Errorf("listing host veths (nothing freed): %w", err)
	}
	ix := indexPods(pods)
	now := time.Now()
	var live []ipam.Attachment
	for _, al := range allocs {
		free, spared := judge(al, ix, veths, now, a.cfg.GCGrace)
		switch spared {
		case spareYoung:
			stats.SparedYoung++
		case spareSandbox:
			stats.SparedSandbox++
		}
		if !free {
			live = append(live, al.Attachment)
		}
	}
	// A freed IP whose pod still has a StaticIP (recording this IP, or none yet) stays
	// reserved for it.
	staticIPsOf := map[string][]string{}
	for _, s := range sips {
		k := sipPod(s).Key()
		staticIPsOf[k] = append(staticIPsOf[k], s.Spec.Addresses())
	}
	freed, err := db.GC(ipam.GCOptions{Live: live, KeepReserved: func(al ipam.Allocation) bool {
		for _, recorded := range staticIPsOf[al.Pod.Key()] {
			if recorded == "" {
				return true
			}
			if addrs, err := podip.ParseAddresses(recorded); err == nil && slices.Contains(addrs.List(), al.IP) {
				return true
			}
		}
		return false
	}})
	for _, f := range freed {
		a.logf("GC: released %s of gone pod %s (container %s, allocated %s)", f.IP, f.Pod, f.Attachment.ContainerID, f.AllocatedAt.Format(time.RFC3339))
	}
	return freed, err
}

// pluginLinks are the plugin's host-side veths in this network namespace, by link index.
func pluginLinks() (map[int]string, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, err
	}
	names := map[int]string{}
	for _, l := range links {
		if n := l.Attrs().Name; strings.HasPrefix(n, plugin.HostVethPrefix) {
			names[l.Attrs().Index] = n
		}
	}
	return names, nil
}

// hostVeths are the names of the plugin's host-side veths in this network namespace.
func hostVeths() (map[string]bool, error) {
	links, err := pluginLinks()
	names := make(map[string]bool, len(links))
	for _, n := range links {
		names[n] = true
	}
	return names, err
}

// rangeOrigins names the IPRange and IPPool of every subnet the node holds: the ranges it
// serves, and those it still drains (known by name).
func rangeOrigins(plan *rangePlan, node string) map[netip.Prefix]RangeOrigin {
	out := map[netip.Prefix]RangeOrigin{}
	add := func(ir *jkev1.IPRange) {
		subnet, err := netip.ParsePrefix(ir.Spec.CIDR)
		if err != nil {
			return
		}
		if _, ok := out[subnet.Masked()]; !ok {
			out[subnet.Masked()] = RangeOrigin{IPRange: ir.Name, Pool: ir.Labels[jkev1.LabelIPPool]}
		}
	}
	for _, ir := range plan.mine {
		add(ir)
	}
	for name := range plan.draining {
		if ir, ok := plan.byName[name]; ok {
			add(ir)
		}
	}
	for _, ir := range plan.byName { // a range that moved here or away since: still its name
		if ir.Spec.Node == node {
			add(ir)
		}
	}
	return out
}
