package plugin

import (
	"errors"
	"fmt"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/staticip/staticip/ipam"
)

// Plugin-specific CNI error codes (the spec reserves 100+ for plugins). The runtime shows the
// message in the pod's events; the code lets tooling tell the cases apart.
const (
	ErrCodeBadAnnotation  uint = 100 // the pod's ip-address annotation is not one IP
	ErrCodeBadRequestedIP uint = 101 // CNI_ARGS IP= / runtimeConfig ips malformed or conflicting
	ErrCodeOutOfRange     uint = 102 // requested IP in no range of this node, or in one that moved away (draining)
	ErrCodeInUse          uint = 103 // requested IP held by or reserved for another pod, or still attached to this pod's earlier, running sandbox
	ErrCodeExhausted      uint = 104 // no free IP
	ErrCodeNotAllocatable uint = 105 // requested IP is the gateway / excluded / outside bounds
	ErrCodeDBCorrupt      uint = 106 // ipam.db unreadable
	ErrCodeAPI            uint = 107 // the API server refused a needed call
	ErrCodeNetwork        uint = 108 // netlink setup failed (everything was rolled back)
	ErrCodeCheckFailed    uint = 109 // CHECK found the attachment not as configured
)

func invalidConf(format string, args ...any) *types.Error {
	return types.NewError(types.ErrInvalidNetworkConfig, "staticip: invalid network configuration: "+fmt.Sprintf(format, args...), "")
}

// ipamError turns an allocator error into a CNI error with a code and a message that names
// what the user has to know (which pod holds the IP, which node owns it, which file is bad).
func ipamError(err error) *types.Error {
	var te *types.Error
	if errors.As(err, &te) {
		return te
	}
	code := types.ErrInternal
	switch {
	case errors.Is(err, ipam.ErrLocked), errors.Is(err, ipam.ErrRecovering), errors.Is(err, ipam.ErrQuarantined):
		code = types.ErrTryAgainLater
	case errors.Is(err, ipam.ErrCorrupt):
		code = ErrCodeDBCorrupt
	case errors.Is(err, ipam.ErrOutOfRange):
		code = ErrCodeOutOfRange
	case errors.Is(err, ipam.ErrInUse):
		code = ErrCodeInUse
	case errors.Is(err, ipam.ErrExhausted):
		code = ErrCodeExhausted
	case errors.Is(err, ipam.ErrNotAllocatable):
		code = ErrCodeNotAllocatable
	case errors.Is(err, ipam.ErrAttachmentHasIP):
		code = ErrCodeBadRequestedIP
	case errors.Is(err, ipam.ErrInvalid):
		code = types.ErrInvalidNetworkConfig
	}
	return types.NewError(code, "staticip: "+err.Error(), "")
}
