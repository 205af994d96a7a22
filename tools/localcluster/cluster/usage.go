package cluster

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of utime/stime in /proc/<pid>/stat (100 on Linux).
const clockTicks = 100

// Top prints each daemon's resident memory and CPU use over interval, and the same for
// everything else of the cluster (containerd shims, containers) as one line.
func Top(o Options, interval time.Duration) error {
	l := newLayout(o)
	rec, err := l.readRecord()
	if err != nil {
		return fmt.Errorf("no cluster in %s", o.StateDir)
	}
	l = newLayout(rec.options(o))
	daemonPid := map[int]string{}
	for _, name := range l.daemonNames() {
		b, err := os.ReadFile(l.pidFile(name))
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			daemonPid[pid] = name
		}
	}
	group := func(pid int) string {
		if name, ok := daemonPid[pid]; ok {
			return name
		}
		return "shims+containers"
	}
	before := map[string]uint64{}
	for _, pid := range l.ourPids() {
		before[group(pid)] += cpuTicks(pid)
	}
	time.Sleep(interval)
	after := map[string]uint64{}
	rss := map[string]uint64{}
	for _, pid := range l.ourPids() {
		g := group(pid)
		after[g] += cpuTicks(pid)
		rss[g] += rssKiB(pid)
	}
	var names []string
	for g := range after {
		names = append(names, g)
	}
	sort.Strings(names)
	var totalRSS uint64
	var totalCPU float64
	fmt.Printf("%-28s %10s %8s   (CPU over %s)\n", "component", "RSS MiB", "CPU %", interval)
	for _, g := range names {
		cpu := 0.0
		if after[g] >= before[g] {
			cpu = float64(after[g]-before[g]) / clockTicks / interval.Seconds() * 100
		}
		totalRSS += rss[g]
		totalCPU += cpu
		fmt.Printf("%-28s %10.1f %8.1f\n", g, float64(rss[g])/1024, cpu)
	}
	fmt.Printf("%-28s %10.1f %8.1f\n", "total", float64(totalRSS)/1024, totalCPU)
	return nil
}

func cpuTicks(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	// After ") ": state(0) ppid(1) ... utime(11) stime(12).
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseUint(f[11], 10, 64)
	st, _ := strconv.ParseUint(f[12], 10, 64)
	return u + st
}

func rssKiB(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				v, _ := strconv.ParseUint(f[1], 10, 64)
				return v
			}
		}
	}
	return 0
}
