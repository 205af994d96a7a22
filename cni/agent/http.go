package agent

import (
	"fmt"
	"net/http"
	"time"
)

// Handler serves /healthz, /readyz and /metrics (Prometheus text format). The agent binds it
// to loopback only: the figures are not secret, but nothing off the node needs them without an
// authenticating proxy.
//
// /healthz (liveness) is 200 while the loop finished a pass, whatever its result, within
// maxAge: only a stuck agent is restarted. An agent that cannot reach the API server is not
// stuck — restarting it would only make it wait for its caches again — and its node keeps
// serving pods from the database. /readyz is 200 while the last fully successful pass (caches
// synced, database, conflist and API writes) is younger than maxAge.
func (a *Agent) Handler(maxAge time.Duration) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		last := a.lastPass.Load()
		if last == 0 || time.Since(time.Unix(0, last)) > maxAge {
			http.Error(w, "the sync loop has not finished a pass recently", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		last := a.lastSync.Load()
		if last == 0 || time.Since(time.Unix(last, 0)) > maxAge {
			http.Error(w, "no fully successful sync recently (API server unreachable, or see the agent's log)", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprintf(w, "# HELP staticip_agent_last_sync_timestamp_seconds Unix time of the last successful sync.\n# TYPE staticip_agent_last_sync_timestamp_seconds gauge\nstaticip_agent_last_sync_timestamp_seconds %d\n", a.lastSync.Load())
		fmt.Fprintf(w, "# HELP staticip_agent_syncs_total Sync passes by result.\n# TYPE staticip_agent_syncs_total counter\nstaticip_agent_syncs_total{result=\"ok\"} %d\nstaticip_agent_syncs_total{result=\"error\"} %d\nstaticip_agent_syncs_total{result=\"not_synced\"} %d\n",
			a.syncsOK.Load(), a.syncsFailed.Load(), a.syncsNotSynced.Load())
		fmt.Fprintf(w, "# HELP staticip_agent_last_pass_timestamp_seconds Unix time at which the loop last finished a pass, whatever its result.\n# TYPE staticip_agent_last_pass_timestamp_seconds gauge\nstaticip_agent_last_pass_timestamp_seconds %d\n", a.lastPass.Load()/1e9)
		fmt.Fprintf(w, "# HELP staticip_agent_api_errors_total Passes whose API writes (IPRange status) failed.\n# TYPE staticip_agent_api_errors_total counter\nstaticip_agent_api_errors_total %d\n", a.apiErrors.Load())
		fmt.Fprintf(w, "# HELP staticip_agent_ipam_rebuilds_total IPAM databases found corrupt and rebuilt from the API and the host.\n# TYPE staticip_agent_ipam_rebuilds_total counter\nstaticip_agent_ipam_rebuilds_total %d\n", a.rebuilds.Load())
		synced := 0
		if a.Synced() {
			synced = 1
		}
		fmt.Fprintf(w, "# HELP staticip_agent_caches_synced 1 once the informer caches have synced.\n# TYPE staticip_agent_caches_synced gauge\nstaticip_agent_caches_synced %d\n", synced)
		s := a.stats.Load()
		if s == nil {
			return
		}
		fmt.Fprintf(w, "# HELP staticip_agent_routes Host routes to other nodes' IP ranges.\n# TYPE staticip_agent_routes gauge\nstaticip_agent_routes %d\n", s.Routes)
		fmt.Fprintf(w, "# HELP staticip_agent_gc_released IPs released by the last GC.\n# TYPE staticip_agent_gc_released gauge\nstaticip_agent_gc_released %d\n", s.Freed)
		fmt.Fprintf(w, "# HELP staticip_agent_gc_spared Allocations of pods absent from the cache that the last GC left alone, by reason.\n# TYPE staticip_agent_gc_spared gauge\nstaticip_agent_gc_spared{reason=\"young\"} %d\nstaticip_agent_gc_spared{reason=\"sandbox\"} %d\n", s.SparedYoung, s.SparedSandbox)
		fmt.Fprintf(w, "# HELP staticip_agent_refused_ipranges IPRanges no node serves (overlapping, invalid, resized while in use).\n# TYPE staticip_agent_refused_ipranges gauge\nstaticip_agent_refused_ipranges %d\n", s.RefusedRanges)
		fmt.Fprintf(w, "# HELP staticip_agent_duplicate_staticips StaticIPs of this node's ranges that contest an IP or a pod.\n# TYPE staticip_agent_duplicate_staticips gauge\nstaticip_agent_duplicate_staticips %d\n", s.Duplicates)
		fmt.Fprintln(w, "# HELP staticip_ipam_addresses Addresses of each range by state.\n# TYPE staticip_ipam_addresses gauge")
		for _, u := range s.Usage {
			for state, n := range map[string]int{"total": u.Total, "used": u.Used, "reserved": u.Reserved, "free": u.Free} {
				fmt.Fprintf(w, "staticip_ipam_addresses{range=%q,state=%q} %d\n", u.Range.Subnet.String(), state, n)
			}
		}
	})
	return mux
}
