package agent

import (
	"errors"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/internal/serving"
	"github.com/staticip/staticip/ipam"
)

// Endpoints are the agent's /metrics, /healthz and /readyz (internal/serving serves them:
// /metrics on the node's address behind delegated authn/authz, health on loopback).
//
// /healthz (liveness) is 200 while the loop finished a pass, whatever its result, within
// maxAge: only a stuck agent is restarted. An agent that cannot reach the API server is not
// stuck — restarting it would only make it wait for its caches again — and its node keeps
// serving pods from the database. /readyz is 200 while the last fully successful pass (caches
// synced, database, conflist and API writes) is younger than maxAge.
func (a *Agent) Endpoints(maxAge time.Duration) serving.Endpoints {
	return serving.Endpoints{Component: ComponentName, Metrics: a.metrics,
		Healthz: func(*http.Request) error {
			if last := a.lastPass.Load(); last == 0 || time.Since(time.Unix(0, last)) > maxAge {
				return errors.New("the sync loop has not finished a pass recently")
			}
			return nil
		},
		Readyz: func(*http.Request) error {
			if last := a.lastSync.Load(); last == 0 || time.Since(time.Unix(last, 0)) > maxAge {
				return errors.New("no fully successful sync recently (API server unreachable, or see the agent's log)")
			}
			return nil
		}}
}

// newMetrics is the agent's registry: the figures of its passes (collector, read at scrape
// time), the allocations it saw appear, and the Go/process collectors.
func (a *Agent) newMetrics() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	a.allocations = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "staticip_agent_allocations_total",
		Help: "IPs the CNI plugin allocated on this node since the agent started, by range (counted when a pass finds them in the database)."},
		[]string{"range"})
	reg.MustRegister(agentCollector{a}, a.allocations, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// countAllocations adds the allocations made since the last pass to the counter.
func (a *Agent) countAllocations(allocs []ipam.Allocation) {
	newest := a.allocSeen
	for _, al := range allocs {
		if al.AllocatedAt.After(a.allocSeen) {
			a.allocations.WithLabelValues(al.Subnet.String()).Inc()
			if al.AllocatedAt.After(newest) {
				newest = al.AllocatedAt
			}
		}
	}
	a.allocSeen = newest
}

// The series of the agent's passes: names and labels as before client_golang (dashboards and
// alerts read them).
var (
	descLastSync     = prometheus.NewDesc("staticip_agent_last_sync_timestamp_seconds", "Unix time of the last successful sync.", nil, nil)
	descSyncs        = prometheus.NewDesc("staticip_agent_syncs_total", "Sync passes by result.", []string{"result"}, nil)
	descLastPass     = prometheus.NewDesc("staticip_agent_last_pass_timestamp_seconds", "Unix time at which the loop last finished a pass, whatever its result.", nil, nil)
	descAPIErrors    = prometheus.NewDesc("staticip_agent_api_errors_total", "Passes whose API writes (IPRange status) failed.", nil, nil)
	descRebuilds     = prometheus.NewDesc("staticip_agent_ipam_rebuilds_total", "IPAM databases found corrupt and rebuilt from the API and the host.", nil, nil)
	descCachesSynced = prometheus.NewDesc("staticip_agent_caches_synced", "1 once the informer caches have synced.", nil, nil)
	descRoutes       = prometheus.NewDesc("staticip_agent_routes", "Host routes to other nodes' IP ranges.", nil, nil)
	descGCReleased   = prometheus.NewDesc("staticip_agent_gc_released_total", "IPs released by GC since the agent started.", nil, nil)
	descGCSpared     = prometheus.NewDesc("staticip_agent_gc_spared", "Allocations of pods absent from the cache that the last GC left alone, by reason.", []string{"reason"}, nil)
	descRefused      = prometheus.NewDesc("staticip_agent_refused_ipranges", "IPRanges no node serves (overlapping, invalid, resized while in use).", nil, nil)
	descNATErrors    = prometheus.NewDesc("staticip_agent_nat_sync_errors_total", "Passes whose outgoing NAT table (nftables inet staticip) could not be written, nft not found included.", nil, nil)
	descNATSources   = prometheus.NewDesc("staticip_agent_nat_source_cidrs", "CIDRs whose pods' traffic leaving the cluster the last written NAT table masquerades (IPRanges with natOutgoing).", nil, nil)
	descBGPSession   = prometheus.NewDesc("staticip_agent_bgp_session_established",
		"1 while this node's BGP session to the peer is Established, 0 otherwise (one series per BGPPeer that selects the node).", []string{"peer", "peer_ip"}, nil)
	descBGPState = prometheus.NewDesc("staticip_agent_bgp_session_state",
		"This node's BGP session state per peer: 1 for the current state (Idle, Connect, Active, OpenSent, OpenConfirm, Established), one series per peer.", []string{"peer", "state"}, nil)
	descBGPAdvertised = prometheus.NewDesc("staticip_agent_bgp_advertised_prefixes",
		"Prefixes (IPRanges served or drained, minus disableBGPExport) this node's BGP speaker announces; absent when the node speaks no BGP.", nil, nil)
	descDuplicates    = prometheus.NewDesc("staticip_agent_duplicate_staticips", "StaticIPs of this node's ranges that contest an IP or a pod.", nil, nil)
	descIPAMAddresses = prometheus.NewDesc("staticip_ipam_addresses",
		"Addresses of each range of this node's IPAM database by state; iprange and pool name the IPRange and the IPPool it was cut from (empty for a hand-written IPRange). The node label comes from the scrape (the agent pod's node).",
		[]string{"range", "iprange", "pool", "state"}, nil)
	// The CNI plugin's calls, as it counts them in the database (ipam/callstats.go): the agent
	// passes them on as they are, so they are counters since the database was created.
	descCNIDuration = prometheus.NewDesc("staticip_cni_operation_duration_seconds",
		"Duration of the CNI plugin's ADD/DEL/CHECK calls on this node, by result (success, failure): from the plugin's start to the commit of its IPAM transaction for a success, to its failure otherwise.",
		[]string{"operation", "result"}, nil)
	descCNIFailures = prometheus.NewDesc("staticip_cni_failures_total",
		"Failed CNI plugin calls on this node by reason (cni/README.md, \"Metrics\").",
		[]string{"operation", "reason"}, nil)
)

// agentCollector reads the agent's counters and last pass' Stats at scrape time.
type agentCollector struct{ a *Agent }

func (agentCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLastSync, descSyncs, descLastPass, descAPIErrors, descRebuilds, descCachesSynced,
		descRoutes, descGCReleased, descGCSpared, descRefused, descDuplicates, descNATErrors, descNATSources, descBGPSession, descBGPState, descBGPAdvertised, descIPAMAddresses, descCNIDuration, descCNIFailures} {
		ch <- d
	}
}

func (c agentCollector) Collect(ch chan<- prometheus.Metric) {
	a := c.a
	metric := func(d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, t, v, labels...)
	}
	metric(descLastSync, prometheus.GaugeValue, float64(a.lastSync.Load()))
	metric(descSyncs, prometheus.CounterValue, float64(a.syncsOK.Load()), "ok")
	metric(descSyncs, prometheus.CounterValue, float64(a.syncsFailed.Load()), "error")
	metric(descSyncs, prometheus.CounterValue, float64(a.syncsNotSynced.Load()), "not_synced")
	metric(descLastPass, prometheus.GaugeValue, float64(a.lastPass.Load()/1e9))
	metric(descAPIErrors, prometheus.CounterValue, float64(a.apiErrors.Load()))
	metric(descRebuilds, prometheus.CounterValue, float64(a.rebuilds.Load()))
	metric(descGCReleased, prometheus.CounterValue, float64(a.gcReleased.Load()))
	metric(descNATErrors, prometheus.CounterValue, float64(a.natErrors.Load()))
	metric(descNATSources, prometheus.GaugeValue, float64(a.natSources.Load()))
	synced := 0.0
	if a.Synced() {
		synced = 1
	}
	metric(descCachesSynced, prometheus.GaugeValue, synced)
	if r := a.bgpReport.Load(); r != nil && (r.enabled || len(r.peers) > 0) {
		if r.enabled {
			metric(descBGPAdvertised, prometheus.GaugeValue, float64(r.advertised))
		}
		for _, p := range r.peers {
			up := 0.0
			if p.State == jkev1.BGPSessionEstablished {
				up = 1
			}
			metric(descBGPSession, prometheus.GaugeValue, up, p.Name, p.PeerIP)
			metric(descBGPState, prometheus.GaugeValue, 1, p.Name, string(p.State))
		}
	}
	s := a.stats.Load()
	if s == nil {
		return
	}
	metric(descRoutes, prometheus.GaugeValue, float64(s.Routes))
	metric(descGCSpared, prometheus.GaugeValue, float64(s.SparedYoung), "young")
	metric(descGCSpared, prometheus.GaugeValue, float64(s.SparedSandbox), "sandbox")
	metric(descRefused, prometheus.GaugeValue, float64(s.RefusedRanges))
	metric(descDuplicates, prometheus.GaugeValue, float64(s.Duplicates))
	for _, u := range s.Usage {
		r, origin := u.Range.Subnet.String(), s.RangeOrigins[u.Range.Subnet]
		for state, n := range map[string]int{"total": u.Total, "used": u.Used, "reserved": u.Reserved, "free": u.Free} {
			metric(descIPAMAddresses, prometheus.GaugeValue, float64(n), r, origin.IPRange, origin.Pool, state)
		}
	}
	for _, m := range callMetrics(s.Calls) {
		ch <- m
	}
}

// callMetrics are the CNI call counters of the database as Prometheus series.
func callMetrics(calls ipam.CallStats) []prometheus.Metric {
	var out []prometheus.Metric
	for _, h := range calls.Histograms {
		buckets := make(map[float64]uint64, len(ipam.CallDurationBuckets))
		for i, bound := range ipam.CallDurationBuckets {
			buckets[bound] = h.Buckets[i]
		}
		out = append(out, prometheus.MustNewConstHistogram(descCNIDuration, h.Count, h.Sum.Seconds(), buckets, h.Op, h.Result))
	}
	for _, f := range calls.Failures {
		out = append(out, prometheus.MustNewConstMetric(descCNIFailures, prometheus.CounterValue, float64(f.Count), f.Op, f.Reason))
	}
	return out
}
