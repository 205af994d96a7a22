package ipam

import (
	"fmt"
	"net"
	"path/filepath"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/plugins/ipam/host-local/backend/allocator"
	"github.com/containernetworking/plugins/plugins/ipam/host-local/backend/disk"
)

// BenchmarkAllocateRelease compares one CNI ADD's and DEL's worth of IPAM work against its
// peer, host-local's disk store, in the same run: open (lock) the store, allocate or release
// one IP, close. Each staticip operation is an fdatasync'ed bbolt transaction; host-local
// writes files without fsync.
//
//	go test -run XXX -bench AllocateRelease -benchtime 500x ./ipam/
func BenchmarkAllocateRelease(b *testing.B) {
	for _, noSync := range []bool{false, true} {
		name := "staticip-bbolt"
		if noSync {
			name += "-nosync" // not an option of the plugin: shows what the fsyncs cost
		}
		b.Run(name, func(b *testing.B) { benchStaticIP(b, noSync) })
	}
	b.Run("host-local-disk", benchHostLocal)
}

func benchStaticIP(b *testing.B, noSync bool) {
	path := filepath.Join(b.TempDir(), "ipam.db")
	d, err := Open(Options{Path: path, NoSync: noSync})
	if err != nil {
		b.Fatal(err)
	}
	d.AddRange(Range{Subnet: pfx("10.200.0.0/16")})
	d.Close()
	b.ResetTimer()
	for i := range b.N {
		a := Attachment{ContainerID: fmt.Sprintf("c%d", i), IfName: "eth0"}
		d, err := Open(Options{Path: path, NoSync: noSync})
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := d.Allocate(AllocateRequest{Attachment: a, Pod: PodRef{Namespace: "ns", Name: a.ContainerID}}); err != nil {
			b.Fatal(err)
		}
		d.Close()
		d, err = Open(Options{Path: path, NoSync: noSync})
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := d.Release(a, false); err != nil {
			b.Fatal(err)
		}
		d.Close()
	}
}

func benchHostLocal(b *testing.B) {
	dir := b.TempDir()
	_, subnet, _ := net.ParseCIDR("10.201.0.0/16")
	rs := allocator.RangeSet{{Subnet: types.IPNet(*subnet)}}
	if err := rs.Canonicalize(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		id := fmt.Sprintf("c%d", i)
		store, err := disk.New("bench", dir)
		if err != nil {
			b.Fatal(err)
		}
		store.Lock()
		if _, err := allocator.NewIPAllocator(&rs, store, 0).Get(id, "eth0", nil); err != nil {
			b.Fatal(err)
		}
		store.Unlock()
		store.Close()
		store, err = disk.New("bench", dir)
		if err != nil {
			b.Fatal(err)
		}
		store.Lock()
		if err := allocator.NewIPAllocator(&rs, store, 0).Release(id, "eth0"); err != nil {
			b.Fatal(err)
		}
		store.Unlock()
		store.Close()
	}
}
