package plugin

import (
	"errors"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/staticip/staticip/ipam"
)

// The operations whose calls the store counts (ipam/callstats.go; staticip-agent exports them
// as staticip_cni_operation_duration_seconds and staticip_cni_failures_total).
const (
	opAdd   = "add"
	opDel   = "del"
	opCheck = "check"
)

// failureRecordTimeout bounds how long a failed call waits for the store to count its
// failure: the call has failed already, and a store held that long is counted by no one
// (the runtime retries, and the retry is counted).
const failureRecordTimeout = 250 * time.Millisecond

// counted wraps one CNI operation: a failure is counted in the store under its reason, in a
// transaction of its own (the call's own transaction, if any, rolled back). Successes are
// counted by the operation itself inside the transaction it commits (RecordCallOnCommit), so
// the success path costs no extra commit.
func (p *Plugin) counted(op string, fn func(*skel.CmdArgs) error) func(*skel.CmdArgs) error {
	return func(args *skel.CmdArgs) error {
		start := time.Now()
		err := fn(args)
		if err == nil {
			return nil
		}
		var te *types.Error
		if !errors.As(err, &te) {
			te = types.NewError(types.ErrInternal, err.Error(), "")
		}
		conf, cerr := LoadConf(args.StdinData)
		if cerr != nil {
			return err // no network, no store to count in
		}
		if rerr := ipam.RecordCallFailure(conf.storeOptions(), failureRecordTimeout, op, failureReason(te), time.Since(start)); rerr != nil {
			p.logf("%s failed (%s); counting the failure in the IPAM database: %v", op, failureReason(te), rerr)
		}
		return err
	}
}

// failureReason is the reason label of a failed call: the class of its CNI error code, the
// spec's "try again later" (11) told apart by the allocator's message (a locked or rebuilding
// database, a quarantined IP). cni/README.md, "Metrics", lists them.
func failureReason(err *types.Error) string {
	switch err.Code {
	case ErrCodeBadAnnotation:
		return "invalid_annotation"
	case ErrCodeBadRequestedIP:
		return "invalid_request"
	case ErrCodeOutOfRange:
		return "out_of_range"
	case ErrCodeInUse:
		return "ip_in_use"
	case ErrCodeExhausted:
		if strings.Contains(err.Msg, "this node has no IP ranges") {
			return "no_range"
		}
		return "range_exhausted"
	case ErrCodeNotAllocatable:
		return "not_allocatable"
	case ErrCodeDBCorrupt:
		return "db_corrupt"
	case ErrCodeAPI:
		return "api"
	case ErrCodeNetwork:
		return "netlink"
	case ErrCodeCheckFailed:
		return "check_failed"
	case types.ErrTryAgainLater:
		switch {
		case strings.Contains(err.Msg, "is locked by another process"):
			return "db_locked"
		case strings.Contains(err.Msg, "is being rebuilt after corruption"):
			return "db_recovering"
		case strings.Contains(err.Msg, "quarantined"):
			return "ip_quarantined"
		}
		return "try_again"
	case types.ErrInvalidNetworkConfig, types.ErrDecodingFailure, types.ErrIncompatibleCNIVersion, types.ErrUnsupportedField:
		return "invalid_config"
	case types.ErrInvalidNetNS:
		return "netns"
	}
	return "internal"
}
