package ipam

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"path/filepath"
	"testing"
	"time"
)

// The property: whatever sequence of allocate / release / reserve / sync / GC / reopen runs,
// no IP is ever held by two attachments, no allocation is made against a reservation of another
// pod, and no StaticIP reservation is lost. The same interpreter runs under `go test -fuzz`
// (FuzzOperations) and, deterministically, over many random sequences in a normal `go test`.

const (
	propPods        = 10
	propAttachments = 16
)

var propRanges = []Range{
	{Subnet: netip.MustParsePrefix("10.77.0.0/29"), Gateway: netip.MustParseAddr("10.77.0.1")},
	{Subnet: netip.MustParsePrefix("10.77.1.0/29"), Exclude: []netip.Addr{netip.MustParseAddr("10.77.1.3")}},
}

type propModel struct {
	t       *testing.T
	path    string
	clock   *fakeClock
	db      *DB
	holders map[Attachment]netip.Addr // what the model knows is allocated
	static  map[netip.Addr]PodRef     // StaticIP reservations that must never be lost
	moved   bool                      // propRanges[1] moved away from the node (draining)
	ops     []string
}

func propPod(i int) PodRef {
	return PodRef{Namespace: "ns", Name: fmt.Sprintf("pod-%d", i%propPods), UID: fmt.Sprintf("uid-%d", i)}
}

// Each attachment belongs to one pod for its whole life, as a sandbox does.
func propAttachment(i int) (Attachment, PodRef) {
	i %= propAttachments
	return Attachment{ContainerID: fmt.Sprintf("ctr-%d", i), IfName: "eth0"}, propPod(i)
}

func propIP(b byte) netip.Addr {
	// Mostly inside the ranges, sometimes outside.
	return netip.AddrFrom4([4]byte{10, 77, b % 3, b % 9})
}

func (m *propModel) open() {
	d, err := Open(Options{Path: m.path, Now: m.clock.Now, Quarantine: 3 * time.Second, NoSync: true, OpenTimeout: time.Second})
	if err != nil {
		m.t.Fatalf("open: %v", err)
	}
	m.db = d
}

func (m *propModel) fail(format string, args ...any) {
	m.t.Helper()
	m.t.Fatalf("%s\nafter ops:\n%v", fmt.Sprintf(format, args...), m.ops)
}

func (m *propModel) reservations() map[netip.Addr]PodRef {
	rs, err := m.db.Reservations()
	if err != nil {
		m.fail("Reservations: %v", err)
	}
	out := map[netip.Addr]PodRef{}
	for _, r := range rs {
		out[r.IP] = r.Pod
	}
	return out
}

func (m *propModel) step(op, a, b byte) {
	switch op % 8 {
	case 0, 1: // allocate, sometimes a requested IP
		m.allocate(a, b)
	case 2: // release
		at, _ := propAttachment(int(a))
		keep := b%2 == 0
		rel, found, err := m.db.Release(at, keep)
		m.ops = append(m.ops, fmt.Sprintf("release(%s,keep=%v)=%v,%v,%v", at.ContainerID, keep, rel.IP, found, err))
		if err != nil {
			m.fail("release: %v", err)
		}
		_, held := m.holders[at]
		if found != held {
			m.fail("release found=%v, model holds=%v", found, held)
		}
		delete(m.holders, at)
	case 3: // reserve one IP for a pod
		r := Reservation{IP: propIP(a), Pod: propPod(int(b))}
		err := m.db.Reserve(r)
		m.ops = append(m.ops, fmt.Sprintf("reserve(%s,%s)=%v", r.IP, r.Pod.Name, err))
		if err == nil {
			for ip, p := range m.static {
				if p.Key() == r.Pod.Key() {
					delete(m.static, ip)
				}
			}
			m.static[r.IP] = r.Pod
		} else if !errors.Is(err, ErrInUse) {
			m.fail("reserve: %v", err)
		}
	case 4: // authoritative sync from "StaticIP records": a random consistent set
		var rs []Reservation
		usedPod := map[string]bool{}
		usedIP := map[netip.Addr]bool{}
		for i := range int(a % 5) {
			r := Reservation{IP: propIP(b + byte(i*7)), Pod: propPod(int(b) + i)}
			if usedPod[r.Pod.Key()] || usedIP[r.IP] {
				continue
			}
			usedPod[r.Pod.Key()], usedIP[r.IP] = true, true
			rs = append(rs, r)
		}
		_, err := m.db.SyncReservations(rs)
		m.ops = append(m.ops, fmt.Sprintf("sync(%v)=%v", rs, err))
		if err != nil {
			m.fail("sync: %v", err)
		}
		m.static = map[netip.Addr]PodRef{}
		for _, r := range rs {
			m.static[r.IP] = r.Pod
		}
	case 5: // GC with a random live subset
		m.gc(a, b)
	case 6: // crash and reopen: drop the handle without any clean-up of our own
		m.ops = append(m.ops, "reopen")
		m.db.Close()
		m.open()
	case 7:
		if a%4 == 0 { // the second range moves away from the node, or comes back
			m.moved = !m.moved
			want := propRanges
			if m.moved {
				want = propRanges[:1]
			}
			res, err := m.db.SetNodeRanges(want)
			m.ops = append(m.ops, fmt.Sprintf("setNodeRanges(moved=%v)=%+v,%v", m.moved, res, err))
			if err != nil || len(res.Skipped) > 0 {
				m.fail("SetNodeRanges: %+v %v", res, err)
			}
			break
		}
		m.clock.Advance(time.Duration(a) * 100 * time.Millisecond)
	}
	m.check()
}

// allocate allocates for attachment a, a requested IP when b is even, and checks the answer
// against the model.
func (m *propModel) allocate(a, b byte) {
	at, p := propAttachment(int(a))
	r := AllocateRequest{Attachment: at, Pod: p}
	if b%2 == 0 {
		r.IP = propIP(b / 2)
	}
	before := m.reservations()
	alloc, created, err := m.db.Allocate(r)
	m.ops = append(m.ops, fmt.Sprintf("alloc(%s,%s,%v)=%v,%v,%v", at.ContainerID, p.Name, r.IP, alloc.IP, created, err))
	if err != nil {
		if !errors.Is(err, ErrExhausted) && !errors.Is(err, ErrInUse) && !errors.Is(err, ErrOutOfRange) && // incl. draining
			!errors.Is(err, ErrNotAllocatable) && !errors.Is(err, ErrAttachmentHasIP) && !errors.Is(err, ErrQuarantined) {
			m.fail("unexpected error class: %v", err)
		}
		if _, ok := m.holders[at]; ok && !errors.Is(err, ErrAttachmentHasIP) {
			m.fail("repeated allocation of a held attachment failed: %v", err)
		}
		return
	}
	if held, ok := m.holders[at]; ok {
		if created || held != alloc.IP {
			m.fail("repeat for %v gave %s created=%v, held %s", at, alloc.IP, created, held)
		}
		return
	}
	if owner, ok := before[alloc.IP]; ok && owner.Key() != p.Key() {
		m.fail("%s given to %s although reserved for %s", alloc.IP, p, owner)
	}
	if m.moved && propRanges[1].Subnet.Contains(alloc.IP) {
		m.fail("%s allocated from range %s, which moved away", alloc.IP, propRanges[1].Subnet)
	}
	for other, oip := range m.holders {
		if oip == alloc.IP {
			// Only a stale attachment of the same pod name may be taken over.
			if o, _, _ := m.db.Get(other); o.IP == alloc.IP {
				m.fail("%s held by both %v and %v", alloc.IP, other, at)
			}
			delete(m.holders, other)
		}
	}
	m.holders[at] = alloc.IP
}

// gc garbage-collects with a random live subset of the held attachments.
func (m *propModel) gc(a, b byte) {
	var live []Attachment
	for at := range m.holders {
		if (len(at.ContainerID)+int(a))%2 == 0 || b%3 == 0 {
			live = append(live, at)
		}
	}
	freed, err := m.db.GC(GCOptions{Live: live, KeepReserved: func(al Allocation) bool { return b%2 == 0 }})
	m.ops = append(m.ops, fmt.Sprintf("gc(live=%d)=%d,%v", len(live), len(freed), err))
	if err != nil {
		m.fail("gc: %v", err)
	}
	isLive := map[Attachment]bool{}
	for _, at := range live {
		isLive[at] = true
	}
	for at := range m.holders {
		if !isLive[at] {
			delete(m.holders, at)
		}
	}
}

func (m *propModel) check() {
	m.t.Helper()
	allocs, err := m.db.Allocations()
	if err != nil {
		m.fail("Allocations: %v", err)
	}
	seen := map[netip.Addr]bool{}
	got := map[Attachment]netip.Addr{}
	for _, a := range allocs {
		if seen[a.IP] {
			m.fail("IP %s allocated twice", a.IP)
		}
		seen[a.IP] = true
		if _, dup := got[a.Attachment]; dup {
			m.fail("attachment %v holds two IPs", a.Attachment)
		}
		got[a.Attachment] = a.IP
		rng, ok := rangeFor(mustCanonical(propRanges), a.IP)
		if !ok || !rng.allocatable(a.IP) {
			m.fail("allocated %s is not allocatable", a.IP)
		}
		if g, found, err := m.db.Get(a.Attachment); err != nil || !found || g.IP != a.IP {
			m.fail("attachment index disagrees for %v: %v %v %v", a.Attachment, g.IP, found, err)
		}
	}
	if len(got) != len(m.holders) {
		m.fail("db holds %v, model %v", got, m.holders)
	}
	for at, ip := range m.holders {
		if got[at] != ip {
			m.fail("db holds %v, model %v", got, m.holders)
		}
	}
	res := m.reservations()
	for ip, p := range m.static {
		if res[ip].Key() != p.Key() {
			m.fail("lost reservation %s for %s (db has %v)", ip, p, res)
		}
	}
}

func mustCanonical(rs []Range) []Range {
	out := make([]Range, len(rs))
	for i, r := range rs {
		c, err := r.Canonical()
		if err != nil {
			panic(err)
		}
		out[i] = c
	}
	return out
}

func runOperations(t *testing.T, dir string, program []byte) {
	m := &propModel{t: t, path: filepath.Join(dir, "ipam.db"), clock: &fakeClock{t: time.Unix(1_700_000_000, 0)},
		holders: map[Attachment]netip.Addr{}, static: map[netip.Addr]PodRef{}}
	m.open()
	defer func() { m.db.Close() }()
	if _, _, err := m.db.SyncRanges(propRanges); err != nil {
		t.Fatal(err)
	}
	for i := 0; i+2 < len(program); i += 3 {
		m.step(program[i], program[i+1], program[i+2])
	}
}

func TestRandomOperationSequences(t *testing.T) {
	sequences, length := 50, 300
	if testing.Short() {
		sequences = 20
	}
	for seed := range sequences {
		rng := rand.New(rand.NewPCG(uint64(seed), 42))
		program := make([]byte, length*3)
		for i := range program {
			program[i] = byte(rng.UintN(256))
		}
		runOperations(t, t.TempDir(), program)
	}
}

func FuzzOperations(f *testing.F) {
	f.Add([]byte{0, 1, 1, 0, 2, 2, 2, 1, 0, 3, 4, 5, 6, 0, 0, 0, 3, 3, 5, 1, 1})
	f.Add([]byte{4, 3, 9, 0, 9, 1, 0, 8, 8, 2, 9, 1, 6, 0, 0, 0, 9, 3})
	f.Fuzz(func(t *testing.T, program []byte) {
		if len(program) > 3*400 {
			program = program[:3*400]
		}
		runOperations(t, t.TempDir(), program)
	})
}
