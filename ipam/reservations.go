// StaticIP reservations: Reserve, SyncReservations and their reads, each one transaction.

package ipam

import (
	"encoding/json"
	"net/netip"
	"slices"

	bolt "go.etcd.io/bbolt"
)

func validReservation(r Reservation) error {
	if !r.IP.IsValid() {
		return invalidf("reservation for pod %s has no valid IP", r.Pod)
	}
	if r.Pod.Name == "" {
		return invalidf("reservation of %s names no pod", r.IP)
	}
	return nil
}

// Reserve adds or replaces the StaticIP reservation of one IP. It refuses to take an IP that is
// reserved for another pod.
func (d *DB) Reserve(r Reservation) error {
	if err := validReservation(r); err != nil {
		return err
	}
	r.IP = r.IP.Unmap()
	r.Source = SourceStaticIP
	return d.update(func(tx *bolt.Tx) error {
		t := d.txn(tx)
		old, err := t.reservation(r.IP)
		if err != nil {
			return err
		}
		if old != nil && old.Pod.Key() != r.Pod.Key() {
			return &InUseError{IP: r.IP, Holder: old.Pod}
		}
		return t.putReservation(r)
	})
}

// SyncReservations makes the reservations exactly rs. The whole set is validated first; an
// invalid set changes nothing.
func (d *DB) SyncReservations(rs []Reservation) (SyncResult, error) {
	var res SyncResult
	want := map[netip.Addr]Reservation{}
	type podFamily struct {
		pod    string
		family int
	}
	byPod := map[podFamily]netip.Addr{}
	for _, r := range rs {
		if err := validReservation(r); err != nil {
			return res, err
		}
		r.IP = r.IP.Unmap()
		r.Source = SourceStaticIP
		if o, ok := want[r.IP]; ok && o.Pod.Key() != r.Pod.Key() {
			return res, invalidf("IP %s is reserved for both pod %s and pod %s", r.IP, o.Pod, r.Pod)
		}
		pf := podFamily{r.Pod.Key(), family(r.IP)}
		if ip, ok := byPod[pf]; ok && ip != r.IP {
			return res, invalidf("pod %s has two reserved IPv%d addresses, %s and %s (one per IP family)", r.Pod, pf.family, ip, r.IP)
		}
		want[r.IP] = r
		byPod[pf] = r.IP
	}
	err := d.update(func(tx *bolt.Tx) error {
		res = SyncResult{}
		t := d.txn(tx)
		var stale []Reservation
		err := t.reserved.ForEach(func(k, v []byte) error {
			var r Reservation
			if err := json.Unmarshal(v, &r); err != nil {
				return decodeErr("reservation", k, err)
			}
			if w, ok := want[r.IP]; !ok || w.Pod.Key() != r.Pod.Key() {
				stale = append(stale, r)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, r := range stale {
			if err := t.deleteReservation(r); err != nil {
				return err
			}
			res.Removed++
		}
		ips := make([]netip.Addr, 0, len(want))
		for ip := range want {
			ips = append(ips, ip)
		}
		slices.SortFunc(ips, netip.Addr.Compare)
		for _, ip := range ips {
			r := want[ip]
			old, err := t.reservation(ip)
			if err != nil {
				return err
			}
			if old != nil && *old == r {
				res.Unchanged++
			} else {
				if err := t.putReservation(r); err != nil {
					return err
				}
				res.Added++
			}
			if al, err := t.alloc(ip); err != nil {
				return err
			} else if al != nil && al.Pod.Key() != r.Pod.Key() {
				res.Conflicts = append(res.Conflicts, *al)
			}
		}
		return nil
	})
	return res, err
}

// PodReservation returns the IP reserved for pod (by namespace/name), if any: its first (a
// dual-stack pod's primary; PodReservations returns both).
func (d *DB) PodReservation(pod PodRef) (netip.Addr, bool, error) {
	ips, err := d.PodReservations(pod)
	if err != nil || len(ips) == 0 {
		return netip.Addr{}, false, err
	}
	return ips[0], true, nil
}

// PodReservations returns every IP reserved for pod, one per IP family, the first indexed first.
func (d *DB) PodReservations(pod PodRef) ([]netip.Addr, error) {
	var ips []netip.Addr
	err := d.view(func(tx *bolt.Tx) error {
		ips = indexed(tx.Bucket(bucketReservedBy), []byte(pod.Key()))
		return nil
	})
	return ips, err
}

// Reservations lists the reservations, ordered by IP.
func (d *DB) Reservations() ([]Reservation, error) {
	var out []Reservation
	err := d.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketReserved).ForEach(func(k, v []byte) error {
			var r Reservation
			if err := json.Unmarshal(v, &r); err != nil {
				return decodeErr("reservation", k, err)
			}
			out = append(out, r)
			return nil
		})
	})
	return out, err
}
