package manager

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestEnabledControllers(t *testing.T) {
	for _, tc := range []struct {
		flag    []string
		want    []string
		wantErr string
	}{
		{flag: []string{"*"}, want: []string{"enhancedstatefulset", "staticip", "deploymentgrid", "statefulsetgrid", "servicegrid", "nodefailover", "ippool"}},
		{flag: []string{"*", "-deploymentgrid", "-statefulsetgrid", "-servicegrid", "-nodefailover", "-ippool"}, want: []string{"enhancedstatefulset", "staticip"}},
		{flag: []string{"servicegrid", "statefulsetgrid"}, want: []string{"statefulsetgrid", "servicegrid"}},
		{flag: []string{"staticip"}, want: []string{"staticip"}},
		{flag: []string{"*", "-staticip"}, want: []string{"enhancedstatefulset", "deploymentgrid", "statefulsetgrid", "servicegrid", "nodefailover", "ippool"}},
		{flag: []string{"ippool"}, want: []string{"ippool"}},
		{flag: []string{"nodefailover"}, want: []string{"nodefailover"}},
		{flag: []string{"enhancedstatefulset", "staticip"}, want: []string{"enhancedstatefulset", "staticip"}},
		{flag: []string{"nodefailovers"}, wantErr: `unknown controller "nodefailovers"`},
	} {
		o := NewOptions()
		o.Controllers = tc.flag
		got, err := o.EnabledControllers()
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%v: err %v, want %q", tc.flag, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%v: got %v %v, want %v", tc.flag, got, err, tc.want)
		}
	}
}

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
	a, b := (&Config{Options: NewOptions()}).identity(), (&Config{Options: NewOptions()}).identity()
	if a == b || !strings.Contains(a, "_") {
		t.Errorf("identities %q %q must be hostname_unique", a, b)
	}
}
