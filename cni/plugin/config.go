// Package plugin implements the staticip CNI plugin: IPAM from the node-local bbolt allocator
// (package ipam) plus a point-to-point veth setup, with the requested IP taken from the pod's
// staticip annotation.
package plugin

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/staticip/staticip/apis/iprangeaddr"
	"github.com/staticip/staticip/ipam"
)

// Contract keys, duplicated from apis/jke/v1 so that the plugin binary does not link the
// Kubernetes API types (their package init dominates a CNI call's latency). A test checks they
// stay equal.
const (
	AnnotationEnable = "staticip.jke.jdcloud.com/enable"
	// PodAnnotationsCapability is the runtimeConfig key under which a CRI runtime passes the
	// pod's annotations.
	PodAnnotationsCapability = "io.kubernetes.cri.pod-annotations"
)

// Defaults of the conflist fields.
const (
	DefaultDataDir    = "/var/lib/staticip"
	DefaultMTU        = 1500
	DefaultDBTimeout  = 10 * time.Second
	DefaultAPITimeout = 5 * time.Second
	// DefaultPoolWait bounds how long ADD waits for a range of the pod's pool to reach this
	// node (the range allocator gives the node a block once the pod is bound here, the agent
	// puts it in the store) before it fails with code 104; the runtime retries the sandbox.
	DefaultPoolWait = 10 * time.Second
	// DefaultGatewayV4 is the pods' next hop when a range has no gateway: a link-local address
	// that the host never owns. The pod resolves it through a permanent neighbour entry that
	// points at the host end of its veth, so no ARP or proxy ARP is involved.
	DefaultGatewayV4 = "169.254.1.1"
	DefaultGatewayV6 = "fe80::1"
)

// Duration accepts a Go duration string ("5s") or a number of seconds.
type Duration struct{ time.Duration }

func (d *Duration) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("duration %q: %w", s, err)
		}
		d.Duration = v
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return fmt.Errorf("duration %s: want a string such as \"5s\" or seconds", b)
	}
	d.Duration = time.Duration(f * float64(time.Second))
	return nil
}

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// RangeConf is one IP range in the conflist.
type RangeConf struct {
	Subnet     string   `json:"subnet"`
	RangeStart string   `json:"rangeStart,omitempty"`
	RangeEnd   string   `json:"rangeEnd,omitempty"`
	Gateway    string   `json:"gateway,omitempty"`
	Exclude    []string `json:"exclude,omitempty"`
}

// NetConf is the plugin's network configuration (one plugin of a conflist).
type NetConf struct {
	types.PluginConf

	// DataDir holds ipam.db. Default /var/lib/staticip.
	DataDir string `json:"dataDir,omitempty"`
	// Kubeconfig, when set, lets the plugin read the pod's annotations, write back the IP it
	// chose, and ask whether a pod's StaticIP exists on DEL.
	Kubeconfig string `json:"kubeconfig,omitempty"`
	// MTU of both veth ends. Default 1500.
	MTU int `json:"mtu,omitempty"`
	// Quarantine: how long a released IP is not handed out as "next free". Default 5s.
	Quarantine *Duration `json:"quarantine,omitempty"`
	// DBTimeout bounds the wait for the database lock. Default 10s.
	DBTimeout *Duration `json:"dbTimeout,omitempty"`
	// APITimeout bounds each API server call. Default 5s.
	APITimeout *Duration `json:"apiTimeout,omitempty"`
	// PoolWait bounds the wait of a pod that names IPPools for an address of them on this node.
	// Default 10s.
	PoolWait *Duration `json:"poolWait,omitempty"`
	// Ranges this node allocates from (filled by staticip-agent from the node's IPRanges).
	Ranges []RangeConf `json:"ranges"`

	RuntimeConfig struct {
		PodAnnotations map[string]string `json:"io.kubernetes.cri.pod-annotations,omitempty"`
		IPs            []string          `json:"ips,omitempty"`
	} `json:"runtimeConfig,omitempty"`
	Args *struct {
		CNI struct {
			IPs []string `json:"ips,omitempty"`
		} `json:"cni"`
	} `json:"args,omitempty"`

	// Parsed fields.
	ranges []ipam.Range `json:"-"`
	// rangesErr: the ranges are invalid. Only ADD (and STATUS, on a store the agent does not
	// manage) needs them: DEL, CHECK and GC work from the database alone, so that one bad
	// range never leaves pods stuck in Terminating.
	rangesErr error `json:"-"`
}

// DBPath is the allocator database of this configuration: one per network, keyed by the
// conflist's name as host-local does (<dataDir>/<name>/ipam.db).
func (c *NetConf) DBPath() string { return ipam.NetworkPath(c.DataDir, c.Name) }

// storeOptions opens this network's database, migrating the single <dataDir>/ipam.db of
// earlier versions on first use.
func (c *NetConf) storeOptions() ipam.Options {
	o := ipam.ForNetwork(c.DataDir, c.Name)
	o.OpenTimeout, o.Quarantine = c.dbTimeout(), c.quarantine()
	return o
}

func (c *NetConf) quarantine() time.Duration {
	if c.Quarantine == nil {
		return ipam.DefaultQuarantine
	}
	if c.Quarantine.Duration == 0 {
		return -1 // explicit 0: no quarantine
	}
	return c.Quarantine.Duration
}

func (c *NetConf) dbTimeout() time.Duration {
	if c.DBTimeout == nil || c.DBTimeout.Duration <= 0 {
		return DefaultDBTimeout
	}
	return c.DBTimeout.Duration
}

func (c *NetConf) poolWait() time.Duration {
	if c.PoolWait == nil || c.PoolWait.Duration <= 0 {
		return DefaultPoolWait
	}
	return c.PoolWait.Duration
}

func (c *NetConf) apiTimeout() time.Duration {
	if c.APITimeout == nil || c.APITimeout.Duration <= 0 {
		return DefaultAPITimeout
	}
	return c.APITimeout.Duration
}

// LoadConf parses and validates a network configuration. Every problem is a CNI error with
// code 7 (invalid network config) that says which field is wrong.
func LoadConf(data []byte) (*NetConf, error) {
	conf := &NetConf{}
	if err := json.Unmarshal(data, conf); err != nil {
		return nil, invalidConf("cannot parse the network configuration: %v", err)
	}
	if conf.DataDir == "" {
		conf.DataDir = DefaultDataDir
	}
	if !filepath.IsAbs(conf.DataDir) {
		return nil, invalidConf("dataDir %q must be an absolute path", conf.DataDir)
	}
	if conf.MTU == 0 {
		conf.MTU = DefaultMTU
	}
	if conf.MTU < 576 || conf.MTU > 65535 {
		return nil, invalidConf("mtu %d is out of range (576-65535)", conf.MTU)
	}
	for _, d := range []*Duration{conf.Quarantine, conf.DBTimeout, conf.APITimeout} {
		if d != nil && d.Duration < 0 {
			return nil, invalidConf("durations must not be negative (%s)", d.Duration)
		}
	}
	if !ipam.ValidNetworkName(conf.Name) {
		return nil, invalidConf("name %q must be a CNI network name (letters, digits, '_', '.', '-'): it keys the IPAM database <dataDir>/<name>/ipam.db", conf.Name)
	}
	conf.ranges, conf.rangesErr = parseRanges(conf.Ranges)
	return conf, nil
}

// parseRanges validates the conflist's ranges: each valid, none overlapping another.
func parseRanges(rcs []RangeConf) ([]ipam.Range, error) {
	var rs []ipam.Range
	for i, rc := range rcs {
		r, err := parseRange(rc)
		if err != nil {
			return nil, invalidConf("ranges[%d]: %v", i, err)
		}
		rs = append(rs, r)
	}
	for i := range rs {
		for j := i + 1; j < len(rs); j++ {
			if rs[i].Subnet.Overlaps(rs[j].Subnet) {
				return nil, invalidConf("ranges[%d] %s overlaps ranges[%d] %s", i, rs[i].Subnet, j, rs[j].Subnet)
			}
		}
	}
	return rs, nil
}

func parseRange(rc RangeConf) (ipam.Range, error) {
	return ipam.ParseRange(iprangeaddr.Fields{CIDR: rc.Subnet, RangeStart: rc.RangeStart, RangeEnd: rc.RangeEnd,
		Gateway: rc.Gateway, Exclude: rc.Exclude})
}

// gatewayFor is the next hop the pod uses for addresses of r.
func gatewayFor(r ipam.Range, ip netip.Addr) netip.Addr {
	if r.Gateway.IsValid() {
		return r.Gateway
	}
	if ip.Is4() {
		return netip.MustParseAddr(DefaultGatewayV4)
	}
	return netip.MustParseAddr(DefaultGatewayV6)
}

// K8sArgs are the CNI_ARGS the plugin understands; others are ignored.
type K8sArgs struct {
	types.CommonArgs
	IP                         types.UnmarshallableString
	K8S_POD_NAMESPACE          types.UnmarshallableString //nolint:revive // CNI_ARGS key
	K8S_POD_NAME               types.UnmarshallableString //nolint:revive // CNI_ARGS key
	K8S_POD_INFRA_CONTAINER_ID types.UnmarshallableString //nolint:revive // CNI_ARGS key
	K8S_POD_UID                types.UnmarshallableString //nolint:revive // CNI_ARGS key
}

func loadArgs(s string) (*K8sArgs, error) {
	a := &K8sArgs{}
	a.IgnoreUnknown = true
	if err := types.LoadArgs(s, a); err != nil {
		return nil, types.NewError(types.ErrInvalidEnvironmentVariables, "invalid CNI_ARGS", err.Error())
	}
	return a, nil
}

// explicitIPs are the IPs asked for outside Kubernetes annotations: runtimeConfig "ips",
// args.cni.ips, and CNI_ARGS IP= (comma-separated).
func explicitIPs(conf *NetConf, args *K8sArgs) ([]netip.Addr, error) {
	var raw []string
	raw = append(raw, conf.RuntimeConfig.IPs...)
	if conf.Args != nil {
		raw = append(raw, conf.Args.CNI.IPs...)
	}
	if s := string(args.IP); s != "" {
		raw = append(raw, strings.Split(s, ",")...)
	}
	var out []netip.Addr
	for _, s := range raw {
		// runtimeConfig ips may carry a prefix length ("10.0.0.5/24"); only the address counts.
		s = strings.TrimSpace(s)
		if i := strings.IndexByte(s, '/'); i >= 0 {
			s = s[:i]
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, types.NewError(ErrCodeBadRequestedIP, fmt.Sprintf("requested IP %q is not an IP address", s), "")
		}
		if !containsAddr(out, a.Unmap()) {
			out = append(out, a.Unmap())
		}
	}
	return out, nil
}

func containsAddr(as []netip.Addr, a netip.Addr) bool {
	for _, x := range as {
		if x == a {
			return true
		}
	}
	return false
}
