package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/testutils"

	"github.com/staticip/staticip/internal/testenv"
)

func TestBootstrapRatio(t *testing.T) {
	var a, b []time.Duration
	for i := range 500 {
		d := time.Duration(i+1) * time.Millisecond
		a, b = append(a, 2*d), append(b, d)
	}
	if got := bootstrapRatio(a, b, 0.99); got != "2.00x-2.00x" {
		t.Errorf("twice as slow in every cycle: interval %s, want 2.00x-2.00x", got)
	}
	// A failed cycle of either plugin leaves the pair out instead of pairing unrelated cycles.
	a[0], b[1] = failed, failed
	if got := bootstrapRatio(a, b, 0.50); got != "2.00x-2.00x" {
		t.Errorf("with failed cycles: interval %s, want 2.00x-2.00x", got)
	}
	// One slow outlier in a: the p99 interval must span the ratio with and without it.
	a, b = a[:0], b[:0]
	for range 500 {
		a, b = append(a, time.Millisecond), append(b, time.Millisecond)
	}
	for i := range 5 {
		a[i] = 10 * time.Millisecond
	}
	if got := bootstrapRatio(a, b, 0.99); got != "1.00x-10.00x" {
		t.Errorf("five outliers in 500 cycles: p99 interval %s, want 1.00x-10.00x", got)
	}
}

// TestSmoke runs the whole benchmark at a tiny size, the dual-stack and with-API plugins
// included (run fails unless every warm-up ADD of the dual-stack plugin returned an IPv4 and an
// IPv6 address), and checks that the with-API plugin really asked the API server what a node's
// plugin asks: the pod on every ADD, the IPRange on every new allocation, the StaticIP on every DEL.
func TestSmoke(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("cnibench creates network namespaces: needs root")
	}
	for _, p := range []string{"bridge", "host-local", "ptp", "static"} {
		if _, err := os.Stat(filepath.Join("/usr/lib/cni", p)); err != nil {
			t.Skipf("containernetworking-plugins not installed (%v; tools/install-deps.sh installs them)", err)
		}
	}
	const cycles, parallel, parallelCycles = 4, 2, 4
	reads, err := run("", "", "/usr/lib/cni", cycles, parallel, parallelCycles, 1, true, true)
	if errors.Is(err, testenv.ErrBinariesUnavailable) {
		t.Skipf("no etcd/kube-apiserver: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	// 5 warm-up cycles, the latency cycles, the throughput cycles: one ADD and one DEL each.
	calls := 5 + cycles + parallelCycles
	for _, resource := range []string{"pods", "ipranges", "staticips"} {
		if reads[resource] < calls {
			t.Errorf("the with-API plugin made %d GETs of %s in %d ADD+DEL cycles, want at least one per cycle (all: %v)", reads[resource], resource, calls, reads)
		}
	}
}

func TestGetsByResource(t *testing.T) {
	metrics := `# HELP apiserver_request_total x
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="GET",version="v1"} 7
apiserver_request_total{code="404",component="apiserver",dry_run="",group="jke.jdcloud.com",resource="staticips",scope="resource",subresource="",verb="GET",version="v1"} 3
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="GET",version="v1"} 1
`
	got := getsByResource(metrics)
	if got["pods"] != 8 || got["staticips"] != 3 || len(got) != 2 {
		t.Errorf("getsByResource = %v, want pods 8 (POSTs not counted), staticips 3", got)
	}
}

// TestCheckFamilies: the dual-stack plugin's check passes with an IPv4 and an IPv6 range and
// fails when the conflist gives one family only (the figure would be a single-stack one).
func TestCheckFamilies(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("creates network namespaces: needs root")
	}
	bin := filepath.Join(t.TempDir(), "staticip")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "github.com/staticip/staticip/cni/cmd/staticip")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building staticip: %v\n%s", err, out)
	}
	host, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	defer closeNS(host)
	podNS, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	defer closeNS(podNS)
	conf := func(dir string, subnets ...string) func(int) []byte {
		var ranges []map[string]any
		for _, s := range subnets {
			ranges = append(ranges, map[string]any{"subnet": s})
		}
		return same(mustJSON(map[string]any{"cniVersion": "1.1.0", "name": "check-" + dir, "type": "staticip",
			"dataDir": filepath.Join(t.TempDir(), dir), "mtu": 1500, "ranges": ranges}))
	}
	dual := plugin{name: "dual", binary: bin, families: 2, conf: conf("dual", "10.133.0.0/24", "fd00:133::/120")}
	if err := checkFamilies(host, dual, pod{podNS, 0}, "dual"); err != nil {
		t.Errorf("IPv4 and IPv6 ranges: %v", err)
	}
	single := plugin{name: "single", binary: bin, families: 2, conf: conf("single", "10.134.0.0/24")}
	if err := checkFamilies(host, single, pod{podNS, 0}, "single"); err == nil || !strings.Contains(err.Error(), "want 2 of different families") {
		t.Errorf("an IPv4 range only: %v, want the check to fail", err)
	}
}
