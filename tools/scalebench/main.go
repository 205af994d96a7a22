// Command scalebench measures staticip's components on a simulated cluster: its own etcd +
// kube-apiserver on loopback (internal/testenv), kwok faking -nodes nodes and their pods, and
// each component run alone as a real process, its CPU seconds and peak RSS read from /proc
// and its API requests counted on the way to the API server. See README.md.
//
//	tools/run.sh scalebench -nodes=1000 [-scenarios=ippool,scheduler,staticip,ests,failover,wrapper]
//
// Needs _output/bin (make build k8s-bins, which builds kwok from tools/kwok). Not part of
// make test or .ci/run; bench/smoke_test.go runs it at 100 nodes in seconds.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/staticip/staticip/tools/scalebench/bench"
)

func main() {
	nodes := flag.Int("nodes", 100, "fake nodes (kwok)")
	scenarios := flag.String("scenarios", strings.Join(bench.Scenarios, ","), "scenarios to run, in this order (ippool, when listed, runs first: its nodes join the pool)")
	o := bench.DefaultRunOptions()
	flag.IntVar(&o.Scheduler.PodsPerNode, "pods-per-node", o.Scheduler.PodsPerNode, "scheduler: pods per node (a third static-IP)")
	flag.IntVar(&o.Scheduler.HeldPerNode, "held-per-node", o.Scheduler.HeldPerNode, "scheduler: reservations held for absent pods per node")
	flag.IntVar(&o.Scheduler.Workers, "create-workers", bench.CreateWorkers, "scheduler: concurrent creates of the harness (busy API server answers are retried with backoff)")
	flag.IntVar(&o.Scheduler.Rounds, "sched-rounds", 3, "scheduler: rounds of both schedulers, the order alternating (kube-scheduler first in odd rounds); medians and min–max over them")
	flag.BoolVar(&o.Scheduler.NoStaticIP, "sched-no-staticip", false, "scheduler: no StaticIP objects at all (no reservations, no static-IP pods; the nodes keep their IPRanges)")
	flag.StringVar(&o.Scheduler.ProfileDir, "sched-profile-dir", "", "scheduler: write CPU profiles of every pass here (back-to-back 5 s windows from the scheduler's loopback /debug/pprof)")
	controllerQPS := flag.Float64("controller-qps", bench.DefaultControllerQPS, "--kube-api-qps of both kube-controller-manager and staticip-controller-manager (the same for both)")
	controllerBurst := flag.Int("controller-burst", bench.DefaultControllerBurst, "--kube-api-burst of both controller managers")
	flag.IntVar(&o.StaticIPs, "staticips", o.StaticIPs, "staticip: StaticIP records")
	flag.IntVar(&o.Replicas, "replicas", o.Replicas, "ests: replicas of the EnhancedStatefulSet and of the native StatefulSet")
	flag.IntVar(&o.MaxUnavailable, "max-unavailable", o.MaxUnavailable, "ests: rollout budget of both")
	flag.IntVar(&o.FailoverPods, "failover-pods", o.FailoverPods, "failover: static-IP pods on the failed node")
	flag.BoolVar(&o.FailoverNativeFirst, "failover-native-first", false, "failover: the native StatefulSet's failover first (alternate it between rounds)")
	flag.IntVar(&o.Services, "services", o.Services, "wrapper: Services (10 endpoints each)")
	flag.IntVar(&o.Wrappers, "wrappers", o.Wrappers, "wrapper: wrapper processes, one per node, for the label-change list count")
	dir := flag.String("dir", "", "logs and configs (default: a temp dir, removed unless SCALEBENCH_KEEP is set)")
	timeout := flag.Duration("timeout", 3*time.Hour, "whole run")
	flag.Parse()

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, *timeout)
	defer cancelT()
	rows, err := bench.Run(ctx, bench.Options{Dir: *dir, ControllerQPS: float32(*controllerQPS), ControllerBurst: *controllerBurst}, *nodes, strings.Split(*scenarios, ","), o, os.Stderr)
	fmt.Println()
	bench.WriteTable(os.Stdout, rows)
	if err != nil {
		fmt.Fprintln(os.Stderr, "scalebench:", err)
		os.Exit(1)
	}
}
