package ipam

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/plugins/ipam/host-local/backend/allocator"
	"github.com/containernetworking/plugins/plugins/ipam/host-local/backend/disk"
	bolt "go.etcd.io/bbolt"
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

// BenchmarkBoltOptions: bbolt's tuning knobs against the options the store uses, for the
// same work as BenchmarkAllocateRelease (one ADD's and one DEL's worth: open, allocate,
// close, open, release, close), the variants interleaved operation by operation so that the
// load of a shared machine hits them alike. Reported per variant: p50 and p99 of the pair in
// milliseconds. NoSync is not an option of the store (a power loss could leave a corrupt
// file): it shows what the fdatasyncs cost.
//
//	go test -run XXX -bench BoltOptions -benchtime 1000x ./ipam/
func BenchmarkBoltOptions(b *testing.B) {
	type variant struct {
		name    string
		opts    *bolt.Options
		noSync  bool
		presize int64 // file written out to this size once, so that no commit grows it
	}
	variants := []variant{
		{name: "store"},
		{name: "nofreelistsync-hashmap", opts: &bolt.Options{NoFreelistSync: true, FreelistType: bolt.FreelistMapType}},
		{name: "presized-1MiB", presize: 1 << 20},
		{name: "initialmmap-1MiB", opts: &bolt.Options{InitialMmapSize: 1 << 20}},
		{name: "nogrowsync", opts: &bolt.Options{NoGrowSync: true}},
		{name: "nosync-unsafe", noSync: true},
	}
	opts := make([]Options, len(variants))
	for i, v := range variants {
		opts[i] = Options{Path: filepath.Join(b.TempDir(), "ipam.db"), NoSync: v.noSync, boltOptions: v.opts}
		d, err := Open(opts[i])
		if err != nil {
			b.Fatal(err)
		}
		d.AddRange(Range{Subnet: pfx("10.200.0.0/16")})
		d.Close()
		if v.presize > 0 {
			f, err := os.OpenFile(opts[i].Path, os.O_RDWR, 0)
			if err != nil {
				b.Fatal(err)
			}
			st, _ := f.Stat()
			// Zeros written, not a hole or fallocate: a first write into either allocates
			// blocks, which makes the next fdatasync commit the file system's journal.
			if _, err := f.WriteAt(make([]byte, v.presize-st.Size()), st.Size()); err != nil {
				b.Fatal(err)
			}
			f.Sync()
			f.Close()
		}
	}
	lat := make([][]time.Duration, len(variants))
	b.ResetTimer()
	for i := range b.N {
		a := Attachment{ContainerID: fmt.Sprintf("c%d", i), IfName: "eth0"}
		for j := range variants {
			start := time.Now()
			d, err := Open(opts[j])
			if err != nil {
				b.Fatal(err)
			}
			if _, _, err := d.Allocate(AllocateRequest{Attachment: a, Pod: PodRef{Namespace: "ns", Name: a.ContainerID}}); err != nil {
				b.Fatal(err)
			}
			d.Close()
			if d, err = Open(opts[j]); err != nil {
				b.Fatal(err)
			}
			if _, _, err := d.Release(a, false); err != nil {
				b.Fatal(err)
			}
			d.Close()
			lat[j] = append(lat[j], time.Since(start))
		}
	}
	b.StopTimer()
	for j, v := range variants {
		s := slices.Clone(lat[j])
		slices.Sort(s)
		q := func(p float64) float64 { return float64(s[min(len(s)-1, int(p*float64(len(s))))]) / 1e6 }
		b.ReportMetric(q(0.50), v.name+"-p50-ms")
		b.ReportMetric(q(0.99), v.name+"-p99-ms")
	}
	b.ReportMetric(0, "ns/op") // the interleaved total means nothing on its own
}
