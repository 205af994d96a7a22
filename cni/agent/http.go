package agent

import (
	"fmt"
	"net/http"
	"time"
)

// Handler serves /healthz (200 while the last successful sync is younger than maxAge) and
// /metrics (Prometheus text format). The agent binds it to loopback only: the figures are not
// secret, but nothing off the node needs them without an authenticating proxy.
func (a *Agent) Handler(maxAge time.Duration) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		last := a.lastSync.Load()
		if last == 0 || time.Since(time.Unix(last, 0)) > maxAge {
			http.Error(w, "no successful sync recently", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprintf(w, "# HELP staticip_agent_last_sync_timestamp_seconds Unix time of the last successful sync.\n# TYPE staticip_agent_last_sync_timestamp_seconds gauge\nstaticip_agent_last_sync_timestamp_seconds %d\n", a.lastSync.Load())
		fmt.Fprintf(w, "# HELP staticip_agent_syncs_total Sync passes by result.\n# TYPE staticip_agent_syncs_total counter\nstaticip_agent_syncs_total{result=\"ok\"} %d\nstaticip_agent_syncs_total{result=\"error\"} %d\n",
			a.syncsOK.Load(), a.syncsFailed.Load())
		s := a.stats.Load()
		if s == nil {
			return
		}
		fmt.Fprintf(w, "# HELP staticip_agent_routes Host routes to other nodes' IP ranges.\n# TYPE staticip_agent_routes gauge\nstaticip_agent_routes %d\n", s.Routes)
		fmt.Fprintf(w, "# HELP staticip_agent_gc_released IPs released by the last GC.\n# TYPE staticip_agent_gc_released gauge\nstaticip_agent_gc_released %d\n", s.Freed)
		fmt.Fprintln(w, "# HELP staticip_ipam_addresses Addresses of each range by state.\n# TYPE staticip_ipam_addresses gauge")
		for _, u := range s.Usage {
			for state, n := range map[string]int{"total": u.Total, "used": u.Used, "reserved": u.Reserved, "free": u.Free} {
				fmt.Fprintf(w, "staticip_ipam_addresses{range=%q,state=%q} %d\n", u.Range.Subnet.String(), state, n)
			}
		}
	})
	return mux
}
