package plugin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/staticip/staticip/cni/nstest"
	"github.com/staticip/staticip/ipam"
)

// These tests exec the built plugin binary, as a runtime does: one process per call, all on
// one database.

var (
	buildOnce   sync.Once
	pluginPath  string
	buildErr    error
	buildOutput []byte
)

func pluginBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "cni-staticip-bin-")
		if err != nil {
			buildErr = err
			return
		}
		pluginPath = filepath.Join(dir, "staticip")
		cmd := exec.Command("go", "build", "-o", pluginPath, "github.com/staticip/staticip/cni/cmd/staticip")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		buildOutput, buildErr = cmd.CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("building the plugin: %v\n%s", buildErr, buildOutput)
	}
	return pluginPath
}

// execPlugin runs one CNI command of the binary inside the host namespace (its path).
func execPlugin(bin, hostNS, command, containerID, netns string, conf []byte) *exec.Cmd {
	cmd := exec.Command("nsenter", "--net="+hostNS, bin)
	cmd.Env = []string{"CNI_COMMAND=" + command, "CNI_CONTAINERID=" + containerID, "CNI_NETNS=" + netns,
		"CNI_IFNAME=eth0", "CNI_PATH=/nonexistent", "PATH=" + os.Getenv("PATH"),
		"CNI_ARGS=K8S_POD_NAMESPACE=ns;K8S_POD_NAME=" + containerID}
	cmd.Stdin = bytes.NewReader(conf)
	return cmd
}

func runPlugin(bin, hostNS, command, containerID, netns string, conf []byte) ([]byte, error) {
	cmd := execPlugin(bin, hostNS, command, containerID, netns, conf)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %v: %s %s", command, containerID, err, stdout.String(), stderr.String())
	}
	return stdout.Bytes(), nil
}

func resultIP(out []byte) (string, error) {
	var r current.Result
	if err := json.Unmarshal(out, &r); err != nil || len(r.IPs) != 1 {
		return "", fmt.Errorf("bad result %q: %v", out, err)
	}
	return r.IPs[0].Address.IP.String(), nil
}

// 32 plugin processes doing 1,000 ADDs and 1,000 DELs on one database: no IP is ever held by
// two attachments at once, and everything is released at the end.
func TestParallelProcessesNeverShareAnIP(t *testing.T) {
	h := newHarness(t)
	bin := pluginBinary(t)
	const workers, perWorker, cycles = 32, 2, 1000
	conf := h.conf(map[string]any{"quarantine": "0s", "dbTimeout": "60s",
		"ranges": []map[string]any{{"subnet": "10.126.0.0/25"}}})

	var (
		mu        sync.Mutex
		holders   = map[string]string{} // IP -> container ID
		failures  []string
		remaining = cycles
		wg        sync.WaitGroup
	)
	take := func() bool {
		mu.Lock()
		defer mu.Unlock()
		if remaining == 0 {
			return false
		}
		remaining--
		return true
	}
	fail := func(format string, args ...any) {
		mu.Lock()
		failures = append(failures, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	for w := range workers {
		pods := make([]*nstest.NetNS, perWorker)
		for i := range pods {
			pods[i] = newNS(t, fmt.Sprintf("par%d", w))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for take() {
				// Each worker keeps perWorker attachments alive and cycles through them, so up
				// to 64 are held at once while others are being freed.
				slot := n % perWorker
				pod := pods[slot]
				id := fmt.Sprintf("par-%d-%d", w, n)
				n++
				out, err := runPlugin(bin, h.host.Path(), "ADD", id, pod.Path(), conf)
				if err != nil {
					fail("%v", err)
					return
				}
				ip, err := resultIP(out)
				if err != nil {
					fail("%v", err)
					return
				}
				mu.Lock()
				if other, dup := holders[ip]; dup {
					failures = append(failures, fmt.Sprintf("DUPLICATE: %s given to %s while %s holds it", ip, id, other))
				}
				holders[ip] = id
				mu.Unlock()
				time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
				// Forget the holder before DEL: once DEL commits, the IP may go to anyone.
				mu.Lock()
				delete(holders, ip)
				mu.Unlock()
				if _, err := runPlugin(bin, h.host.Path(), "DEL", id, pod.Path(), conf); err != nil {
					fail("%v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d failures, first: %s", len(failures), strings.Join(failures[:min(5, len(failures))], "\n"))
	}
	if as := h.allocations(); len(as) != 0 {
		t.Fatalf("%d allocations left after every DEL: %+v", len(as), as[:min(3, len(as))])
	}
	if links := h.hostLinks(); len(links) != 0 {
		t.Fatalf("host veths left: %v", links)
	}
}

// kill -9 plugin processes at random points of ADD and DEL; afterwards the database opens,
// its invariants hold, every completed ADD keeps its IP, and GC recovers every leaked IP.
func TestKilledProcessesLeaveRecoverableState(t *testing.T) {
	h := newHarness(t)
	bin := pluginBinary(t)
	conf := h.conf(map[string]any{"dbTimeout": "60s", "ranges": []map[string]any{{"subnet": "10.127.0.0/24"}}})
	const n = 48
	pods := make([]*nstest.NetNS, n)
	for i := range pods {
		pods[i] = newNS(t, "crash")
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))

	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	killing := func(command string, idx []int) map[int]bool {
		return runKilling(t, rng, bin, h.host.Path(), pods, conf, command, idx)
	}
	added := killing("ADD", all)
	var toDelete []int
	for i := range added {
		if rng.IntN(2) == 0 {
			toDelete = append(toDelete, i)
		}
	}
	killing("DEL", toDelete)
	deleting := map[int]bool{}
	for _, i := range toDelete {
		deleting[i] = true
	}
	live := map[string]bool{}
	for i := range added {
		if !deleting[i] {
			live[fmt.Sprintf("crash-%d", i)] = true
		}
	}
	t.Logf("%d ADDs completed, %d DELs attempted, %d attachments live", len(added), len(toDelete), len(live))

	// Invariants after the crashes: the database opens (no stale lock, no corruption), the
	// attachment index agrees with the allocations, and every live attachment holds its IP.
	checkInvariants := func() []ipam.Allocation { return checkCrashedStore(t, ipam.NetworkPath(h.dataDir, testNetwork)) }
	held := map[string]bool{}
	for _, a := range checkInvariants() {
		held[a.Attachment.ContainerID] = true
	}
	for id := range live {
		if !held[id] {
			t.Fatalf("completed ADD %s lost its IP", id)
		}
	}

	var valid []map[string]string
	for id := range live {
		valid = append(valid, map[string]string{"containerID": id, "ifname": "eth0"})
	}
	var gcConf map[string]any
	json.Unmarshal(conf, &gcConf)
	gcConf["cni.dev/valid-attachments"] = valid
	gcData, _ := json.Marshal(gcConf)
	if _, err := runPlugin(bin, h.host.Path(), "GC", "", "", gcData); err != nil {
		t.Fatalf("GC: %v", err)
	}
	after := checkInvariants()
	if len(after) != len(live) {
		t.Fatalf("after GC %d allocations, want exactly the %d live ones", len(after), len(live))
	}
	for _, a := range after {
		if !live[a.Attachment.ContainerID] {
			t.Fatalf("GC left the dead attachment %s", a.Attachment.ContainerID)
		}
	}
	wantLinks := map[string]bool{}
	for id := range live {
		wantLinks[HostVethName(id, "eth0")] = true
	}
	for _, l := range h.hostLinks() {
		if !wantLinks[l] {
			t.Fatalf("host veth %s of a dead attachment survived GC", l)
		}
	}
	// Every live attachment still passes CHECK-level inspection through the binary's ADD
	// idempotency: a repeated ADD returns the IP it holds.
	for id := range live {
		var i int
		fmt.Sscanf(id, "crash-%d", &i)
		out, err := runPlugin(bin, h.host.Path(), "ADD", id, pods[i].Path(), conf)
		if err != nil {
			t.Fatal(err)
		}
		ip, _ := resultIP(out)
		for _, a := range after {
			if a.Attachment.ContainerID == id && a.IP.String() != ip {
				t.Fatalf("%s: repeated ADD gave %s, database says %s", id, ip, a.IP)
			}
		}
	}
}

// runKilling starts command on every index at once and kills each after a random delay (a
// third run to completion); it returns which ones completed successfully.
func runKilling(t *testing.T, rng *rand.Rand, bin, hostNS string, pods []*nstest.NetNS, conf []byte, command string, idx []int) map[int]bool {
	done := map[int]bool{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, i := range idx {
		delay := time.Duration(rng.IntN(60)) * time.Millisecond
		kill := rng.IntN(3) != 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := execPlugin(bin, hostNS, command, fmt.Sprintf("crash-%d", i), pods[i].Path(), conf)
			if err := cmd.Start(); err != nil {
				t.Error(err)
				return
			}
			if kill {
				time.AfterFunc(delay, func() {
					// nsenter execs the plugin in place, so this is the plugin's PID.
					syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
				})
			}
			if err := cmd.Wait(); err == nil {
				mu.Lock()
				done[i] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return done
}

// checkCrashedStore opens the store at path after kill -9s and checks that no IP is allocated
// twice and that the attachment index agrees with the allocations; it returns them.
func checkCrashedStore(t *testing.T, path string) []ipam.Allocation {
	t.Helper()
	db, err := ipam.Open(ipam.Options{Path: path, OpenTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("reopen after kill -9: %v", err)
	}
	defer db.Close()
	as, err := db.Allocations()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, a := range as {
		if seen[a.IP.String()] {
			t.Fatalf("IP %s allocated twice", a.IP)
		}
		seen[a.IP.String()] = true
		if g, found, err := db.Get(a.Attachment); err != nil || !found || g.IP != a.IP {
			t.Fatalf("index disagrees for %v", a.Attachment)
		}
	}
	return as
}

// TestMain removes the plugin binary pluginBinary built (12 MB a run, which used to stay in
// $TMPDIR).
func TestMain(m *testing.M) {
	code := m.Run()
	if pluginPath != "" {
		_ = os.RemoveAll(filepath.Dir(pluginPath))
	}
	os.Exit(code)
}
