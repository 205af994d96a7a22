package manager

import (
	"strings"
	"testing"
	"time"
)

func TestValidateLeaderElectionDurations(t *testing.T) {
	o := NewOptions()
	if err := o.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	o.LeaderElectRenewDeadline = 20 * time.Second // > lease duration 15s
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "lease-duration") {
		t.Errorf("renew deadline > lease duration accepted: %v", err)
	}
	o = NewOptions()
	o.Workers = 0
	if err := o.Validate(); err == nil {
		t.Error("--workers=0 accepted")
	}
	for _, bad := range []string{"101%", "-1%", "half", ""} {
		o = NewOptions()
		o.NodeFailoverMaxUnhealthy = bad
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "node-failover-max-unhealthy") {
			t.Errorf("--node-failover-max-unhealthy=%q accepted: %v", bad, err)
		}
	}
	o = NewOptions()
	o.LeaderElect = false
	o.LeaderElectRenewDeadline = time.Hour // irrelevant without leader election
	if err := o.Validate(); err != nil {
		t.Errorf("without leader election: %v", err)
	}
}

func TestLeaseNamespace(t *testing.T) {
	o := NewOptions()
	t.Setenv("POD_NAMESPACE", "from-env")
	if got := o.leaseNamespace(); got != "from-env" {
		t.Errorf("leaseNamespace = %q, want POD_NAMESPACE", got)
	}
	o.LeaderElectNamespace = "flag"
	if got := o.leaseNamespace(); got != "flag" {
		t.Errorf("leaseNamespace = %q, want the flag", got)
	}
	a, b := NewOptions().identity(), NewOptions().identity()
	if a == b || !strings.Contains(a, "_") {
		t.Errorf("identities %q %q must be hostname_unique", a, b)
	}
}
