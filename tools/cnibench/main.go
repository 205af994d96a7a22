// Command cnibench compares the staticip CNI plugin with two containernetworking plugin
// chains on this machine, in one run: bridge + host-local (an allocating peer) and ptp +
// static (the floor: the same veth + host route as staticip, no allocation, no store at all).
// It measures the ADD+DEL cycle latency (p50, p99) of one sequential caller, and the
// throughput of many parallel plugin processes. Every plugin is exec'd exactly as a runtime
// execs it, into pod network namespaces of the same kind, from the same "host" network
// namespace that the tool creates (nothing touches the machine's own network).
//
//	tools/run.sh cnibench -staticip _output/bin/staticip
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"

	"github.com/staticip/staticip/tools/benchstat"
)

type plugin struct {
	name   string
	binary string
	// conf is the network configuration for the pod namespace with index pod (ptp + static
	// gives every pod its own address, so parallel workers never share a host route).
	conf func(pod int) []byte
	// cniPath is where the plugin finds its delegates (bridge needs host-local).
	cniPath string
	// podName is the K8S_POD_NAME of a call in pod namespace pod with container id (default:
	// the id; the with-API plugin's calls are for pods that exist).
	podName func(pod int, id string) string
	// families is how many addresses (one per IP family) each ADD must return: 2 for the
	// dual-stack plugin, checked on its warm-up ADDs so the figure is never a single-stack one.
	families int
}

type figures struct {
	p50, p99, mean time.Duration
	throughput     float64 // cycles per second
	errors         int
}

func main() {
	staticipBin := flag.String("staticip", "", "path to the staticip plugin binary (default: build it)")
	compareBin := flag.String("compare", "", "a second staticip binary (e.g. the build before a change), run as a fourth plugin in the same interleaved run")
	cniDir := flag.String("cni-dir", "/usr/lib/cni", "directory with the bridge, host-local, ptp and static plugins")
	cycles := flag.Int("cycles", 500, "sequential ADD+DEL cycles per plugin (latency)")
	parallel := flag.Int("parallel", 32, "parallel plugin processes (throughput)")
	parallelCycles := flag.Int("parallel-cycles", 640, "ADD+DEL cycles per plugin in the throughput phase")
	rounds := flag.Int("rounds", 2, "throughput rounds per plugin, alternating plugins")
	dualStack := flag.Bool("dual-stack", true, "add staticip with an IPv4 and an IPv6 range (each ADD gives the pod one address per family) as a further plugin: the dual-stack / single-stack ratio")
	withAPI := flag.Bool("api", true, "add staticip with a kubeconfig against a real kube-apiserver (etcd and kube-apiserver from _output/bin or $STATICIP_BIN_DIR) as a further plugin: the API reads a node's plugin makes on ADD and DEL are measured")
	flag.Parse()
	stopOnSignal()
	if _, err := run(*staticipBin, *compareBin, *cniDir, *cycles, *parallel, *parallelCycles, *rounds, *dualStack, *withAPI); err != nil {
		fmt.Fprintln(os.Stderr, "cnibench:", err)
		os.Exit(1)
	}
}

// run runs the benchmark and prints its report; with withAPI it also returns the GETs the
// with-API plugin made, by resource.
func run(staticipBin, compareBin, cniDir string, cycles, parallel, parallelCycles, rounds int, dualStack, withAPI bool) (apiReads map[string]int, err error) {
	for _, p := range []string{"bridge", "host-local", "ptp", "static"} {
		if _, err := os.Stat(filepath.Join(cniDir, p)); err != nil {
			return nil, fmt.Errorf("%s not found in %s (apt-get install containernetworking-plugins; tools/install-deps.sh)", p, cniDir)
		}
	}
	work, err := os.MkdirTemp("/var/lib", "cni-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	if staticipBin == "" {
		// Not work/staticip: that is the plugin's data directory.
		staticipBin = filepath.Join(work, "bin", "staticip")
		// Built as `make build` builds it (static, no cgo): the binary a node runs.
		build := exec.Command("go", "build", "-trimpath", "-o", staticipBin, "github.com/staticip/staticip/cni/cmd/staticip")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		out, err := build.CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("building staticip: %v\n%s", err, out)
		}
	}

	host, err := testutils.NewNS()
	if err != nil {
		return nil, err
	}
	defer closeNS(host)
	pods := make([]pod, parallel)
	for i := range pods {
		n, err := testutils.NewNS()
		if err != nil {
			return nil, err
		}
		defer closeNS(n)
		pods[i] = pod{n, i}
	}

	bridgeName := fmt.Sprintf("cni-br%d", os.Getpid()%100000)
	plugins := []plugin{
		{name: "staticip", binary: staticipBin, conf: same(mustJSON(map[string]any{
			"cniVersion": "1.1.0", "name": "bench-staticip", "type": "staticip",
			"dataDir": filepath.Join(work, "staticip"), "mtu": 1500,
			"ranges": []map[string]any{{"subnet": "10.128.0.0/16"}},
		}))},
		{name: "bridge+host-local", binary: filepath.Join(cniDir, "bridge"), cniPath: cniDir, conf: same(mustJSON(map[string]any{
			"cniVersion": "1.0.0", "name": "bench-bridge", "type": "bridge",
			"bridge": bridgeName, "isGateway": true, "ipMasq": false, "mtu": 1500,
			"ipam": map[string]any{"type": "host-local", "dataDir": filepath.Join(work, "host-local"),
				"ranges": [][]map[string]any{{{"subnet": "10.129.0.0/16"}}}},
		}))},
		{name: "ptp+static (floor)", binary: filepath.Join(cniDir, "ptp"), cniPath: cniDir, conf: func(pod int) []byte {
			return mustJSON(map[string]any{
				"cniVersion": "1.0.0", "name": "bench-ptp", "type": "ptp", "ipMasq": false, "mtu": 1500,
				"ipam": map[string]any{"type": "static",
					"addresses": []map[string]any{{"address": fmt.Sprintf("10.130.%d.%d/16", pod/250, 2+pod%250), "gateway": "10.130.255.254"}}},
			})
		}},
	}

	if compareBin != "" {
		plugins = append(plugins, plugin{name: "staticip (compare)", binary: compareBin, conf: same(mustJSON(map[string]any{
			"cniVersion": "1.1.0", "name": "bench-compare", "type": "staticip",
			"dataDir": filepath.Join(work, "compare"), "mtu": 1500,
			"ranges": []map[string]any{{"subnet": "10.131.0.0/16"}},
		}))})
	}

	// The dual-stack plugin: the same binary, the same store kind, two ranges of different
	// families (IPv6 ULA), so every ADD allocates both in one transaction and puts both on
	// eth0 with a route each, and DEL releases both (cni/README.md "Dual-stack").
	dualIndex := -1
	if dualStack {
		dualIndex = len(plugins)
		plugins = append(plugins, plugin{name: "staticip (dual-stack)", binary: staticipBin, families: 2, conf: same(mustJSON(map[string]any{
			"cniVersion": "1.1.0", "name": "bench-dual", "type": "staticip",
			"dataDir": filepath.Join(work, "dual"), "mtu": 1500,
			"ranges": []map[string]any{{"subnet": "10.132.0.0/16"}, {"subnet": "fd00:132::/112"}},
		}))})
	}

	// The with-API plugin comes last, so the rows and ratios of the earlier plugins keep their
	// indices (0 staticip, 1 bridge, 2 floor, 3 compare).
	apiIndex := -1
	var api *apiServer
	if withAPI {
		api, err = startAPIServer(context.Background(), work, host, len(pods))
		if err != nil {
			return nil, err
		}
		defer api.stop()
		dataDir := filepath.Join(work, "staticip-api")
		if err := seedNodeStore(dataDir, "bench-staticip-api"); err != nil {
			return nil, fmt.Errorf("with-API store: %w", err)
		}
		apiIndex = len(plugins)
		plugins = append(plugins, plugin{name: "staticip (with API)", binary: staticipBin, conf: same(mustJSON(map[string]any{
			"cniVersion": "1.1.0", "name": "bench-staticip-api", "type": "staticip",
			"dataDir": dataDir, "mtu": 1500, "kubeconfig": api.kubeconfig,
			"ranges": []map[string]any{{"subnet": apiSubnet}},
		})), podName: func(pod int, _ string) string { return apiPodName(pod) }})
	}

	fmt.Printf("cnibench: %d sequential ADD+DEL cycles per plugin; %d parallel processes, %d cycles x %d rounds per plugin\n",
		cycles, parallel, parallelCycles, rounds)
	fmt.Printf("machine: %d CPUs, load %s\n", runtime.NumCPU(), loadavg())

	// Warm-up: page cache, bridge creation, database creation; the dual-stack plugin's ADDs
	// must each return an address of both families.
	for _, p := range plugins {
		for i := range 5 {
			if p.families > 0 {
				if err := checkFamilies(host, p, pods[0], fmt.Sprintf("check-%d", i)); err != nil {
					return nil, fmt.Errorf("%s: %w", p.name, err)
				}
			}
			if _, err := cycle(host, p, pods[0], fmt.Sprintf("warm-%d", i)); err != nil {
				return nil, fmt.Errorf("%s warm-up: %w", p.name, err)
			}
		}
	}

	// Latency: interleave the plugins cycle by cycle so that load changes on the (shared)
	// machine hit both alike. lat[j][i] is plugin j's cycle i, failed for a failed cycle.
	lat := make([][]time.Duration, len(plugins))
	errs := make([]int, len(plugins))
	for i := range cycles {
		if interrupted.Load() {
			return nil, errInterrupted
		}
		for j, p := range plugins {
			d, err := cycle(host, p, pods[0], fmt.Sprintf("lat-%d", i))
			if err != nil {
				errs[j]++
				if errs[j] == 1 {
					fmt.Fprintf(os.Stderr, "%s: %v\n", p.name, err)
				}
				d = failed
			}
			lat[j] = append(lat[j], d)
		}
	}
	res := make([]figures, len(plugins))
	for j := range plugins {
		res[j] = summarize(succeeded(lat[j]))
		res[j].errors = errs[j]
	}

	// Throughput: parallel processes, each with its own pod namespace; rounds alternate.
	elapsed := make([]time.Duration, len(plugins))
	done := make([]int, len(plugins))
	for r := range rounds {
		if interrupted.Load() {
			return nil, errInterrupted
		}
		for k := range plugins {
			j := (k + r) % len(plugins)
			d, n, e := throughput(host, plugins[j], pods, parallelCycles, fmt.Sprintf("par-%d", r))
			elapsed[j] += d
			done[j] += n
			res[j].errors += e
		}
	}
	for j := range plugins {
		res[j].throughput = float64(done[j]) / elapsed[j].Seconds()
	}

	fmt.Println()
	fmt.Printf("%-20s %10s %10s %10s %14s %7s\n", "plugin", "p50", "p99", "mean", "parallel c/s", "errors")
	for j, p := range plugins {
		fmt.Printf("%-20s %10s %10s %10s %14.1f %7d\n", p.name, ms(res[j].p50), ms(res[j].p99), ms(res[j].mean), res[j].throughput, res[j].errors)
	}
	s, b, f := res[0], res[1], res[2]
	fmt.Println()
	if apiIndex >= 0 {
		a := res[apiIndex]
		fmt.Printf("ratio staticip (with API) / bridge+host-local: p50 %.2fx, p99 %.2fx, parallel throughput %.2fx\n",
			ratio(a.p50, b.p50), ratio(a.p99, b.p99), a.throughput/b.throughput)
		fmt.Printf("ratio staticip (with API) / staticip (no API): p50 %.2fx, p99 %.2fx, parallel throughput %.2fx (what the API reads add)\n",
			ratio(a.p50, s.p50), ratio(a.p99, s.p99), a.throughput/s.throughput)
		fmt.Printf("  95%% interval of the latency ratios with API / bridge+host-local: p50 %s, p99 %s\n",
			bootstrapRatio(lat[apiIndex], lat[1], 0.50), bootstrapRatio(lat[apiIndex], lat[1], 0.99))
	}
	if dualIndex >= 0 {
		d := res[dualIndex]
		fmt.Printf("ratio staticip dual-stack / single-stack: p50 %.2fx, p99 %.2fx (target <= 1.2x), parallel throughput %.2fx\n",
			ratio(d.p50, s.p50), ratio(d.p99, s.p99), d.throughput/s.throughput)
		fmt.Printf("  95%% interval of the latency ratios dual-stack / single-stack: p50 %s, p99 %s\n",
			bootstrapRatio(lat[dualIndex], lat[0], 0.50), bootstrapRatio(lat[dualIndex], lat[0], 0.99))
	}
	fmt.Printf("ratio staticip / bridge+host-local: p50 %.2fx (target <= 1.0x), p99 %.2fx (target <= 1.2x), parallel throughput %.2fx (target >= 1.0x)\n",
		ratio(s.p50, b.p50), ratio(s.p99, b.p99), s.throughput/b.throughput)
	fmt.Printf("ratio staticip / ptp+static floor:  p50 %.2fx (target <= 1.1x), p99 %.2fx (target <= 1.1x), parallel throughput %.2fx\n",
		ratio(s.p50, f.p50), ratio(s.p99, f.p99), s.throughput/f.throughput)
	fmt.Printf("  95%% interval of the latency ratios (paired bootstrap over the interleaved cycles): p50 %s, p99 %s\n",
		bootstrapRatio(lat[0], lat[2], 0.50), bootstrapRatio(lat[0], lat[2], 0.99))
	if compareBin != "" {
		c := res[3]
		fmt.Printf("ratio compare / ptp+static floor:   p50 %.2fx, p99 %.2fx, parallel throughput %.2fx\n",
			ratio(c.p50, f.p50), ratio(c.p99, f.p99), c.throughput/f.throughput)
		fmt.Printf("ratio staticip / compare:           p50 %.2fx, p99 %.2fx, parallel throughput %.2fx\n",
			ratio(s.p50, c.p50), ratio(s.p99, c.p99), s.throughput/c.throughput)
		fmt.Printf("  95%% interval of the latency ratios: p50 %s, p99 %s\n",
			bootstrapRatio(lat[0], lat[3], 0.50), bootstrapRatio(lat[0], lat[3], 0.99))
	}
	if api != nil {
		if apiReads, err = api.reads(context.Background()); err != nil {
			return nil, fmt.Errorf("with-API run: reading kube-apiserver's request counts: %w", err)
		}
		fmt.Printf("GETs the with-API plugin made (kube-apiserver's apiserver_request_total): pods %d, ipranges %d, staticips %d\n",
			apiReads["pods"], apiReads["ipranges"], apiReads["staticips"])
	}
	fmt.Printf("load at the end: %s\n", loadavg())
	return apiReads, nil
}

// failed marks a cycle that returned an error (left out of every figure).
const failed time.Duration = -1

func succeeded(ds []time.Duration) []time.Duration {
	return slices.DeleteFunc(slices.Clone(ds), func(d time.Duration) bool { return d == failed })
}

// bootstrapRatio is the 95% interval of quantile q of a's cycles over b's (cycle i of both
// plugins ran back to back, so they are resampled as pairs). The p99 of 500 cycles is the
// 5th-worst cycle: how far one run's ratio can be trusted on a shared machine is this
// interval, not the point value.
func bootstrapRatio(a, b []time.Duration, q float64) string {
	lo, hi, ok := benchstat.PairedRatioInterval(a, b, func(ds []time.Duration) time.Duration { return quantile(ds, q) })
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%.2fx-%.2fx", lo, hi)
}

// quantile sorts ds in place and returns its quantile q (the same rule as summarize).
func quantile(ds []time.Duration, q float64) time.Duration {
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

// interrupted is set by SIGINT/SIGTERM: the run stops after the calls in flight and still
// deletes its namespaces (they would otherwise outlive it in /var/run/netns).
var interrupted atomic.Bool

var errInterrupted = errors.New("interrupted")

func stopOnSignal() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-c
		interrupted.Store(true)
		fmt.Fprintln(os.Stderr, "cnibench: interrupted, cleaning up")
	}()
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond)) }

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func summarize(ds []time.Duration) figures {
	if len(ds) == 0 {
		return figures{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return figures{p50: quantile(s, 0.50), p99: quantile(s, 0.99), mean: sum / time.Duration(len(s))}
}

// invoke execs one CNI command. The calling goroutine's thread is switched into the host
// namespace first, so the plugin process starts there, exactly like under a runtime.
func invoke(host ns.NetNS, p plugin, command, id string, pod pod) error {
	_, err := invokeOutput(host, p, command, id, pod)
	return err
}

// invokeOutput is invoke returning what the plugin wrote to stdout (its result).
func invokeOutput(host ns.NetNS, p plugin, command, id string, pod pod) ([]byte, error) {
	var stdout []byte
	err := host.Do(func(ns.NetNS) error {
		cmd := exec.Command(p.binary)
		name := id
		if p.podName != nil {
			name = p.podName(pod.index, id)
		}
		cmd.Env = []string{"CNI_COMMAND=" + command, "CNI_CONTAINERID=" + id, "CNI_NETNS=" + pod.Path(),
			"CNI_IFNAME=eth0", "CNI_PATH=" + cniPath(p), "CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=" + apiNamespace + ";K8S_POD_NAME=" + name}
		cmd.Stdin = bytes.NewReader(p.conf(pod.index))
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s %s: %v: %s", command, id, err, strings.TrimSpace(out.String()+errOut.String()))
		}
		stdout = out.Bytes()
		return nil
	})
	return stdout, err
}

// checkFamilies runs one ADD and DEL of p and fails unless the ADD's result carried
// p.families addresses, each of a different IP family.
func checkFamilies(host ns.NetNS, p plugin, pod pod, id string) error {
	out, err := invokeOutput(host, p, "ADD", id, pod)
	if err != nil {
		return err
	}
	if err := invoke(host, p, "DEL", id, pod); err != nil {
		return err
	}
	var result struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if err := json.Unmarshal(out, &result); err != nil {
		return fmt.Errorf("ADD result %q: %v", out, err)
	}
	families := map[bool]bool{}
	for _, ip := range result.IPs {
		pfx, err := netip.ParsePrefix(ip.Address)
		if err != nil {
			return fmt.Errorf("ADD result %q: %v", out, err)
		}
		families[pfx.Addr().Is4()] = true
	}
	if len(result.IPs) != p.families || len(families) != p.families {
		return fmt.Errorf("ADD gave %d addresses of %d IP families (%s), want %d of different families", len(result.IPs), len(families), out, p.families)
	}
	return nil
}

func cycle(host ns.NetNS, p plugin, pod pod, id string) (time.Duration, error) {
	start := time.Now()
	if err := invoke(host, p, "ADD", id, pod); err != nil {
		return 0, err
	}
	if err := invoke(host, p, "DEL", id, pod); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

func throughput(host ns.NetNS, p plugin, pods []pod, total int, tag string) (time.Duration, int, int) {
	var mu sync.Mutex
	next, done, errs := 0, 0, 0
	var wg sync.WaitGroup
	start := time.Now()
	for w, pod := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if next == total || interrupted.Load() {
					mu.Unlock()
					return
				}
				i := next
				next++
				mu.Unlock()
				_, err := cycle(host, p, pod, fmt.Sprintf("%s-%d-%d", tag, w, i))
				mu.Lock()
				if err != nil {
					if errs == 0 {
						fmt.Fprintf(os.Stderr, "%s: %v\n", p.name, err)
					}
					errs++
				} else {
					done++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return time.Since(start), done, errs
}

func cniPath(p plugin) string {
	if p.cniPath != "" {
		return p.cniPath
	}
	return filepath.Dir(p.binary)
}

// pod is a pod network namespace and its index (its static address in ptp+static).
type pod struct {
	ns.NetNS
	index int
}

func same(conf []byte) func(int) []byte { return func(int) []byte { return conf } }

func closeNS(n ns.NetNS) {
	n.Close()
	if err := testutils.UnmountNS(n); err != nil {
		fmt.Fprintln(os.Stderr, "cnibench:", err)
	}
}
