package plugin

import (
	"net/netip"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/staticip/staticip/ipam"
)

// Every reason label comes from the error the plugin really returns: the allocator's errors
// go through ipamError, as in ADD/DEL/CHECK, so a changed message or code breaks this table.
func TestFailureReason(t *testing.T) {
	for _, c := range []struct {
		err  *types.Error
		want string
	}{
		{types.NewError(ErrCodeBadAnnotation, "x", ""), "invalid_annotation"},
		{types.NewError(ErrCodeBadRequestedIP, "x", ""), "invalid_request"},
		{ipamError(&ipam.OutOfRangeError{IP: netip.MustParseAddr("10.0.0.1")}), "out_of_range"},
		{ipamError(ipam.ErrInUse), "ip_in_use"},
		{ipamError(&ipam.ExhaustedError{Ranges: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/30")}}), "range_exhausted"},
		{ipamError(&ipam.ExhaustedError{}), "no_range"},
		{ipamError(ipam.ErrNotAllocatable), "not_allocatable"},
		{ipamError(&ipam.CorruptError{Path: "/x/ipam.db"}), "db_corrupt"},
		{ipamError(&ipam.LockedError{Path: "/x/ipam.db", Timeout: time.Second}), "db_locked"},
		{ipamError(&ipam.RecoveringError{Path: "/x/ipam.db"}), "db_recovering"},
		{ipamError(&ipam.QuarantinedError{IP: netip.MustParseAddr("10.0.0.1")}), "ip_quarantined"},
		{types.NewError(ErrCodeAPI, "x", ""), "api"},
		{types.NewError(ErrCodeNetwork, "x", ""), "netlink"},
		{types.NewError(ErrCodeCheckFailed, "x", ""), "check_failed"},
		{invalidConf("bad"), "invalid_config"},
		{types.NewError(types.ErrInvalidNetNS, "x", ""), "netns"},
		{types.NewError(types.ErrInternal, "x", ""), "internal"},
	} {
		if got := failureReason(c.err); got != c.want {
			t.Errorf("failureReason(%d %q) = %q, want %q", c.err.Code, c.err.Msg, got, c.want)
		}
	}
}
