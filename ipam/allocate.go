// Allocate, Get, Release: the per-attachment operations of the CNI ADD, CHECK and DEL, each
// one transaction.

package ipam

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

// requestedQuarantined refuses an explicitly requested IP released less than the quarantine
// ago, unless the requesting pod holds it already (a repeated ADD) or it is reserved for that
// pod (its StaticIP names it): asking for an address must not bypass what next-free honours.
func (d *DB) requestedQuarantined(t *txn, req AllocateRequest, now time.Time) error {
	if !t.quarantined(req.IP, now, d.quarantine) {
		return nil
	}
	if key := req.Pod.Key(); key != "" && !req.SkipPodReservation {
		if cur, ok := indexedOf(t.byPod, []byte(key), family(req.IP)); ok && cur == req.IP {
			return nil
		}
		if holder, err := t.alloc(req.IP); err != nil {
			return err
		} else if holder != nil && holder.Pod.Key() == key {
			return nil
		}
	}
	released, _ := t.releasedAt(req.IP) // present: quarantined said so
	return &QuarantinedError{IP: req.IP, Until: released.Add(d.quarantine)}
}

func rangeFor(rs []Range, ip netip.Addr) (Range, bool) {
	for _, r := range rs {
		if r.Subnet.Contains(ip) {
			return r, true
		}
	}
	return Range{}, false
}

func subnets(rs []Range) []netip.Prefix {
	ps := make([]netip.Prefix, len(rs))
	for i, r := range rs {
		ps[i] = r.Subnet
	}
	return ps
}

// Allocate gives the attachment an IP (the README's contract). Repeating it for the same
// attachment returns the same allocation with created=false.
func (d *DB) Allocate(req AllocateRequest) (Allocation, bool, error) {
	req, attachmentFamily, err := normalizeRequest(req)
	if err != nil {
		return Allocation{}, false, err
	}
	var result Allocation
	created := false
	err = d.update(func(tx *bolt.Tx) error {
		var err error
		result, created, err = d.allocateIn(d.txn(tx), req, attachmentFamily)
		return err
	})
	if err != nil {
		return Allocation{}, false, err
	}
	return result, created, nil
}

// normalizeRequest checks req and unmaps its IP. attachmentFamily is the family whose address
// of the attachment a repeated call is answered with: a single-stack caller (no Family) gets the
// attachment's one address, whatever it asks for now (ErrAttachmentHasIP when it differs), as
// before dual-stack; a dual-stack caller the attachment's address of the family it asks for.
func normalizeRequest(req AllocateRequest) (AllocateRequest, int, error) {
	if req.Attachment.ContainerID == "" || req.Attachment.IfName == "" {
		return req, 0, invalidf("allocation needs a container ID and an interface name")
	}
	attachmentFamily := req.Family
	if req.IP.IsValid() {
		req.IP = req.IP.Unmap()
		if req.Family == 0 {
			req.Family = family(req.IP)
		} else if req.Family != family(req.IP) {
			return req, 0, invalidf("an IPv%d address was asked for, but %s was requested", req.Family, req.IP)
		}
	}
	if req.Family != 0 && req.Family != 4 && req.Family != 6 {
		return req, 0, invalidf("IP family %d: want 4 or 6", req.Family)
	}
	return req, attachmentFamily, nil
}

// allocateIn is one allocation inside t.
func (d *DB) allocateIn(t *txn, req AllocateRequest, attachmentFamily int) (Allocation, bool, error) {
	if cur, ok := indexedOf(t.attach, req.Attachment.key(), attachmentFamily); ok {
		a, err := t.alloc(cur)
		if err != nil {
			return Allocation{}, false, err
		}
		if a != nil && a.Attachment == req.Attachment {
			if req.IP.IsValid() && req.IP != a.IP {
				return Allocation{}, false, fmt.Errorf("%w: container %s interface %s holds %s, %s was requested",
					ErrAttachmentHasIP, shortID(req.Attachment.ContainerID), req.Attachment.IfName, a.IP, req.IP)
			}
			return *a, false, nil
		}
		// Dangling index entry (cannot happen through this API): drop it and go on.
		if err := deleteIndexed(t.attach, req.Attachment.key(), cur); err != nil {
			return Allocation{}, false, err
		}
	}
	if st, ok, err := recovering(t.tx); err != nil {
		return Allocation{}, false, err
	} else if ok {
		return Allocation{}, false, &RecoveringError{Path: d.path, State: st}
	}
	ranges, err := t.loadRanges()
	if err != nil {
		return Allocation{}, false, err
	}
	now := d.now()
	ip, rng, err := d.choose(t, ranges, req, now)
	if err != nil {
		return Allocation{}, false, err
	}
	// The same pod name holding the IP through another attachment is a stale attachment of
	// an earlier incarnation (pod names are unique within a namespace) whose sandbox is gone
	// (choose asked req.Alive): take it over, remembering it for Unallocate.
	var previous *Allocation
	if old, err := t.alloc(ip); err != nil {
		return Allocation{}, false, err
	} else if old != nil {
		if err := t.deleteAlloc(*old); err != nil {
			return Allocation{}, false, err
		}
		old.Previous = nil
		previous = old
	}
	result := Allocation{IP: ip, Subnet: rng.Subnet, Attachment: req.Attachment, Pod: req.Pod, AllocatedAt: now.UTC(), Previous: previous}
	return result, true, t.putAlloc(result)
}

// Allocated is one address AllocatePod gave: Created is false when the attachment held it
// already (a repeated ADD), so that a rollback undoes only what this call did.
type Allocated struct {
	Allocation
	Created bool
}

// AllocatePod gives an attachment an address of every IP family the pod takes addresses of on
// this node, in one transaction: both or none. The families (PodFamilies): those of the
// requested addresses (req.IP, the primary, and second, of the other family), of the pod's
// reservations, and of the ranges next free may take its address from (its pools, or every
// range of no namespace pool) — a node with ranges of both families gives a dual-stack pod.
// The primary comes first: req.IP's family, else its first reservation's, else IPv4 when the
// node has it. req.Family must be 0.
func (d *DB) AllocatePod(req AllocateRequest, second netip.Addr) ([]Allocated, error) {
	if req.Family != 0 {
		return nil, invalidf("AllocatePod decides the families itself")
	}
	req, _, err := normalizeRequest(req)
	if err != nil {
		return nil, err
	}
	second = second.Unmap()
	if second.IsValid() && (!req.IP.IsValid() || family(second) == req.Family) {
		return nil, invalidf("the second address %s must be of the other IP family than the first (%s)", second, req.IP)
	}
	var out []Allocated
	err = d.update(func(tx *bolt.Tx) error {
		out = nil
		t := d.txn(tx)
		ranges, err := t.loadRanges()
		if err != nil {
			return err
		}
		families, err := d.podFamilies(t, ranges, req, second)
		if err != nil {
			return err
		}
		for _, f := range families {
			sub := req
			sub.Family, sub.IP = f, netip.Addr{}
			for _, ip := range []netip.Addr{req.IP, second} {
				if family(ip) == f {
					sub.IP = ip
				}
			}
			a, created, err := d.allocateIn(t, sub, f)
			if err != nil {
				if len(families) > 1 {
					return fmt.Errorf("the pod's IPv%d address: %w", f, err)
				}
				return err
			}
			out = append(out, Allocated{Allocation: a, Created: created})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// podFamilies are the IP families AllocatePod gives req's attachment addresses of, the
// primary's first.
func (d *DB) podFamilies(t *txn, ranges []Range, req AllocateRequest, second netip.Addr) ([]int, error) {
	has := map[int]bool{}
	var order []int
	add := func(f int) {
		if f != 0 && !has[f] {
			has[f] = true
			order = append(order, f)
		}
	}
	add(family(req.IP))
	add(family(second))
	for _, ip := range indexed(t.attach, req.Attachment.key()) {
		add(family(ip)) // a repeated ADD keeps what the attachment holds
	}
	if key := req.Pod.Key(); key != "" && !req.SkipPodReservation {
		for _, ip := range indexed(t.byPod, []byte(key)) {
			add(family(ip))
		}
	}
	usable, err := d.nextFreeRanges(t, activeRanges(ranges), req)
	if err != nil {
		return nil, err
	}
	for _, f := range []int{4, 6} {
		if slices.ContainsFunc(usable, func(r Range) bool { return family(r.Subnet.Addr()) == f }) {
			add(f)
		}
	}
	if req.Pools != nil {
		for _, f := range req.PoolFamilies { // its pools' families, their blocks here or not
			add(f)
		}
	}
	if len(order) == 0 {
		add(4) // nothing usable: the allocation reports what is missing
	}
	return order, nil
}

// choose picks the IP for req: the requested one, else the pod's reservation, else next free.
// Nothing comes from a draining range.
func (d *DB) choose(t *txn, ranges []Range, req AllocateRequest, now time.Time) (netip.Addr, Range, error) {
	active := activeRanges(ranges)
	if req.Family != 0 && !req.IP.IsValid() {
		active = slices.DeleteFunc(active, func(r Range) bool { return family(r.Subnet.Addr()) != req.Family })
	}
	if req.IP.IsValid() {
		rng, ok := rangeFor(ranges, req.IP)
		if !ok {
			return netip.Addr{}, Range{}, &OutOfRangeError{IP: req.IP, Ranges: subnets(active)}
		}
		if rng.Draining {
			return netip.Addr{}, Range{}, &DrainingError{IP: req.IP, Subnet: rng.Subnet}
		}
		if err := d.usableBy(t, rng, req.IP, req); err != nil {
			return netip.Addr{}, Range{}, err
		}
		if err := d.requestedQuarantined(t, req, now); err != nil {
			return netip.Addr{}, Range{}, err
		}
		return req.IP, rng, nil
	}
	if key := req.Pod.Key(); key != "" && !req.SkipPodReservation {
		if ip, ok := indexedOf(t.byPod, []byte(key), req.Family); ok {
			if rng, ok := rangeFor(ranges, ip); ok {
				if rng.Draining {
					return netip.Addr{}, Range{}, &DrainingError{IP: ip, Subnet: rng.Subnet, Reserved: true}
				}
				if err := d.usableBy(t, rng, ip, req); err != nil {
					return netip.Addr{}, Range{}, fmt.Errorf("the IP reserved for pod %s: %w", req.Pod, err)
				}
				return ip, rng, nil
			}
			// Reserved in a range this node no longer owns: the pod belongs elsewhere.
			return netip.Addr{}, Range{}, &OutOfRangeError{IP: ip, Ranges: subnets(active),
				OwnerHint: fmt.Sprintf("it is reserved for pod %s", req.Pod)}
		}
	}
	if req.Pools == nil && req.NamespacePoolsFromStore && req.Pod.Namespace != "" {
		// Offline: its namespace's, as the agent last recorded them.
		pools, err := t.namespacePools(req.Pod.Namespace)
		if err != nil {
			return netip.Addr{}, Range{}, err
		}
		req.Pools = pools
	}
	active, err := d.nextFreeRanges(t, active, req)
	if err != nil {
		return netip.Addr{}, Range{}, err
	}
	if len(active) == 0 {
		return netip.Addr{}, Range{}, &ExhaustedError{Pools: req.Pools}
	}
	// Two passes: first skip recently released IPs; only when nothing else is free, take one.
	for _, honorQuarantine := range []bool{true, false} {
		for _, rng := range active {
			ip, ok, err := d.nextFree(t, rng, now, honorQuarantine)
			if err != nil {
				return netip.Addr{}, Range{}, err
			}
			if ok {
				if err := t.cursors.Put([]byte(rng.Subnet.String()), ipKey(ip)); err != nil {
					return netip.Addr{}, Range{}, err
				}
				return ip, rng, nil
			}
		}
		if d.quarantine <= 0 {
			break
		}
	}
	return netip.Addr{}, Range{}, &ExhaustedError{Ranges: subnets(active), Pools: req.Pools}
}

// nextFreeRanges are the ranges of active next free may give req's pod an address of: those
// of its pools (req.Pools, or offline its namespace's as the store recorded them), else every
// range of no namespace pool (not Restricted).
func (d *DB) nextFreeRanges(t *txn, active []Range, req AllocateRequest) ([]Range, error) {
	if req.Pools == nil && req.NamespacePoolsFromStore && req.Pod.Namespace != "" {
		pools, err := t.namespacePools(req.Pod.Namespace)
		if err != nil {
			return nil, err
		}
		req.Pools = pools
	}
	if req.Pools != nil {
		return ofPools(active, req.Pools), nil
	}
	return slices.DeleteFunc(slices.Clone(active), func(r Range) bool { return r.Restricted }), nil
}

// ofPools are the ranges of pools, in the order of pools (a request's preference), then of
// the ranges.
func ofPools(rs []Range, pools []string) []Range {
	var out []Range
	for _, p := range pools {
		for _, r := range rs {
			if r.Pool == p && p != "" {
				out = append(out, r)
			}
		}
	}
	return out
}

func activeRanges(rs []Range) []Range {
	out := make([]Range, 0, len(rs))
	for _, r := range rs {
		if !r.Draining {
			out = append(out, r)
		}
	}
	return out
}

// usableBy checks that ip (inside rng) may be given to req's pod.
func (d *DB) usableBy(t *txn, rng Range, ip netip.Addr, req AllocateRequest) error {
	pod := req.Pod
	switch {
	case !rng.Contains(ip):
		return fmt.Errorf("%w: %s is outside %s-%s of range %s", ErrNotAllocatable, ip, rng.RangeStart, rng.RangeEnd, rng.Subnet)
	case rng.Gateway.IsValid() && ip == rng.Gateway:
		return fmt.Errorf("%w: %s is the gateway of range %s", ErrNotAllocatable, ip, rng.Subnet)
	case !rng.allocatable(ip):
		return fmt.Errorf("%w: %s is excluded in range %s", ErrNotAllocatable, ip, rng.Subnet)
	}
	holder, err := t.alloc(ip)
	if err != nil {
		return err
	}
	if holder != nil && (holder.Pod.Key() == "" || holder.Pod.Key() != pod.Key()) {
		att := holder.Attachment
		return &InUseError{IP: ip, Holder: holder.Pod, Attachment: &att}
	}
	if holder != nil && req.Alive != nil && req.Alive(holder.Attachment) {
		return &TakeoverError{IP: ip, Pod: pod, Previous: holder.Attachment}
	}
	res, err := t.reservation(ip)
	if err != nil {
		return err
	}
	if res != nil && res.Pod.Key() != pod.Key() {
		return &InUseError{IP: ip, Holder: res.Pod}
	}
	if res != nil && req.SkipPodReservation {
		return &InUseError{IP: ip, Holder: res.Pod, OtherWorkload: true}
	}
	return nil
}

// nextFree walks rng round-robin from the address after its cursor.
func (d *DB) nextFree(t *txn, rng Range, now time.Time, honorQuarantine bool) (netip.Addr, bool, error) {
	start := rng.RangeStart
	if cur := t.cursors.Get([]byte(rng.Subnet.String())); cur != nil {
		if last := keyIP(cur); rng.Contains(last) && last != rng.RangeEnd {
			start = last.Next()
		}
	}
	ip := start
	for {
		if rng.allocatable(ip) && t.allocs.Get(ipKey(ip)) == nil && t.reserved.Get(ipKey(ip)) == nil &&
			!(honorQuarantine && t.quarantined(ip, now, d.quarantine)) {
			return ip, true, nil
		}
		if ip == rng.RangeEnd {
			ip = rng.RangeStart
		} else {
			ip = ip.Next()
		}
		if ip == start {
			return netip.Addr{}, false, nil
		}
	}
}

// Get returns the allocation of an attachment: its first address (a dual-stack attachment's
// primary; GetAll returns both).
func (d *DB) Get(a Attachment) (Allocation, bool, error) {
	all, err := d.GetAll(a)
	if err != nil || len(all) == 0 {
		return Allocation{}, false, err
	}
	return all[0], true, nil
}

// GetAll returns every allocation of an attachment, one per IP family, the first indexed first.
func (d *DB) GetAll(a Attachment) ([]Allocation, error) {
	var out []Allocation
	err := d.view(func(tx *bolt.Tx) error {
		t := d.txn(tx)
		for _, ip := range indexed(t.attach, a.key()) {
			al, err := t.alloc(ip)
			if err != nil {
				return err
			}
			if al != nil && al.Attachment == a {
				out = append(out, *al)
			}
		}
		return nil
	})
	return out, err
}

// Release frees the attachment's addresses (both of a dual-stack attachment), or with
// keepReserved turns each into a reservation for the pod. It returns the first; releasing an
// unknown attachment is not an error (found=false).
func (d *DB) Release(a Attachment, keepReserved bool) (Allocation, bool, error) {
	all, err := d.ReleaseAll(a, keepReserved)
	if err != nil || len(all) == 0 {
		return Allocation{}, false, err
	}
	return all[0], true, nil
}

// ReleaseAll is Release returning every address it released, in one transaction.
func (d *DB) ReleaseAll(a Attachment, keepReserved bool) ([]Allocation, error) {
	var out []Allocation
	err := d.update(func(tx *bolt.Tx) error {
		out = nil
		t := d.txn(tx)
		for _, ip := range indexed(t.attach, a.key()) {
			al, err := t.alloc(ip)
			if err != nil {
				return err
			}
			if al == nil || al.Attachment != a {
				if err := deleteIndexed(t.attach, a.key(), ip); err != nil {
					return err
				}
				continue
			}
			if err := t.deleteAlloc(*al); err != nil {
				return err
			}
			out = append(out, *al)
			if err := d.afterRelease(t, *al, keepReserved); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// afterRelease either leaves a reservation for the pod or quarantines the freed IP.
func (d *DB) afterRelease(t *txn, al Allocation, keepReserved bool) error {
	if keepReserved && al.Pod.Key() != "" {
		res, err := t.reservation(al.IP)
		if err != nil {
			return err
		}
		if res != nil {
			return nil // already reserved (by its StaticIP, normally for this very pod)
		}
		// Never displace the StaticIP reservation the pod has for another IP of this family.
		if prev, ok := indexedOf(t.byPod, []byte(al.Pod.Key()), family(al.IP)); ok {
			old, err := t.reservation(prev)
			if err != nil {
				return err
			}
			if old != nil && old.Source == SourceStaticIP {
				return t.putQuarantine(al.IP, d.now())
			}
		}
		return t.putReservation(Reservation{IP: al.IP, Pod: PodRef{Namespace: al.Pod.Namespace, Name: al.Pod.Name, UID: al.Pod.UID}, Source: SourceRelease})
	}
	// Not kept: a reservation an earlier Release left for this pod goes too (its caller has
	// just learned that the pod's StaticIP is gone). StaticIP-synced ones stay: only the sync
	// removes them.
	if res, err := t.reservation(al.IP); err != nil {
		return err
	} else if res != nil && res.Source == SourceRelease && res.Pod.Key() == al.Pod.Key() {
		if err := t.deleteReservation(*res); err != nil {
			return err
		}
	}
	return t.putQuarantine(al.IP, d.now())
}

// Allocations lists the allocations, ordered by IP.
func (d *DB) Allocations() ([]Allocation, error) {
	var out []Allocation
	err := d.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketAllocs).ForEach(func(k, v []byte) error {
			var a Allocation
			if err := json.Unmarshal(v, &a); err != nil {
				return decodeErr("allocation", k, err)
			}
			out = append(out, a)
			return nil
		})
	})
	return out, err
}

// Unallocate undoes one Allocate that returned created=true (a failed ADD's rollback): it
// removes exactly that allocation, puts back the allocation it took over, and touches no
// reservation.
func (d *DB) Unallocate(a Allocation) error {
	return d.update(func(tx *bolt.Tx) error {
		t := d.txn(tx)
		cur, err := t.alloc(a.IP)
		if err != nil || cur == nil || cur.Attachment != a.Attachment || !cur.AllocatedAt.Equal(a.AllocatedAt) {
			return err // not (or no longer) the allocation that call made
		}
		if err := t.deleteAlloc(*cur); err != nil {
			return err
		}
		if prev := cur.Previous; prev != nil && !hasIndexedOf(t.attach, prev.Attachment.key(), family(prev.IP)) {
			return t.putAlloc(*prev)
		}
		return nil
	})
}
