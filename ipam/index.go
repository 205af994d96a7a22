// The per-family indexes: an attachment (bucket attachments) and a pod (bucket reservedByPod)
// hold at most one address of each IP family — a dual-stack pod two, one IPv4 and one IPv6.
//
// The plain key (containerID\0ifname, namespace/name) holds the first address indexed, whatever
// its family, and the key with the suffix \0second the other family's. So a store written before
// dual-stack — single-stack IPv4 or IPv6, everything under the plain key — is read as it is, with
// no migration and no schema change, and an older binary reading a dual-stack store sees the
// primary address of each attachment and pod under the key it knows. A second entry exists only
// beside a first: deleting the first moves the second into its place.

package ipam

import (
	"bytes"
	"net/netip"
	"slices"

	bolt "go.etcd.io/bbolt"

	"github.com/staticip/staticip/apis/podip"
)

// secondSuffix marks the index entry of an attachment's or pod's second address. Neither an
// interface name nor a pod's namespace/name can contain a NUL.
const secondSuffix = "\x00second"

func secondKey(k []byte) []byte { return append(slices.Clip(k), secondSuffix...) }

// indexOwner is the plain key an index entry belongs to.
func indexOwner(k []byte) []byte { return bytes.TrimSuffix(k, []byte(secondSuffix)) }

// family is 4 or 6 (an IPv4-mapped address is IPv4), 0 for the zero Addr: podip's rule, the
// annotation's reader's.
func family(ip netip.Addr) int { return podip.Family(ip) }

// indexed returns the addresses indexed under k: the first, then the second.
func indexed(b *bolt.Bucket, k []byte) []netip.Addr {
	var out []netip.Addr
	for _, key := range [][]byte{k, secondKey(k)} {
		if v := b.Get(key); v != nil {
			out = append(out, keyIP(v))
		}
	}
	return out
}

// indexedOf returns the address of family f indexed under k; f 0 means the first, whatever
// its family (what a caller that does not ask for a family — a single-stack one — means).
func indexedOf(b *bolt.Bucket, k []byte, f int) (netip.Addr, bool) {
	for _, ip := range indexed(b, k) {
		if f == 0 || family(ip) == f {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

// putIndexed indexes ip under k, replacing the entry of its family.
func putIndexed(b *bolt.Bucket, k []byte, ip netip.Addr) error {
	if v := b.Get(k); v == nil || family(keyIP(v)) == family(ip) {
		return b.Put(k, ipKey(ip))
	}
	return b.Put(secondKey(k), ipKey(ip))
}

// deleteIndexed removes ip from k's entries, if it is there; a second entry left alone moves
// into the first's place.
func deleteIndexed(b *bolt.Bucket, k []byte, ip netip.Addr) error {
	second := secondKey(k)
	if v := b.Get(second); v != nil && bytes.Equal(v, ipKey(ip)) {
		return b.Delete(second)
	}
	if v := b.Get(k); v == nil || !bytes.Equal(v, ipKey(ip)) {
		return nil
	}
	if v := b.Get(second); v != nil {
		if err := b.Put(k, slices.Clone(v)); err != nil {
			return err
		}
		return b.Delete(second)
	}
	return b.Delete(k)
}

func hasIndexedOf(b *bolt.Bucket, k []byte, f int) bool {
	_, ok := indexedOf(b, k, f)
	return ok
}
