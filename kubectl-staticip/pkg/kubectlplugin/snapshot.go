package kubectlplugin

import (
	"context"
	"fmt"
	"net/netip"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	jkev1alpha1 "github.com/staticip/staticip/apis/jke/v1alpha1"
)

// Clients are the API clients a command uses; tests pass fake clientsets.
type Clients struct {
	Kube     kubernetes.Interface
	StaticIP versioned.Interface
}

// Snapshot is what ips and check read: every IPRange, IPPool, StaticIP, pod and NodeFailover.
// IPRanges, IPPools and NodeFailovers are cluster-scoped; StaticIPs and pods are listed in one
// namespace or in all ("" namespace).
type Snapshot struct {
	Ranges    []jkev1.IPRange
	Pools     []jkev1.IPPool
	StaticIPs []jkev1.StaticIP
	Pods      []corev1.Pod
	Failovers []jkev1alpha1.NodeFailover
	// Workloads: the EnhancedStatefulSets and StatefulSets that exist (check loads them;
	// nil: not loaded, no StaticIP is called orphaned).
	Workloads WorkloadSet
}

// loadSnapshot lists the objects of a Snapshot; namespace "" means all namespaces.
func loadSnapshot(ctx context.Context, c *Clients, namespace string) (*Snapshot, error) {
	s := &Snapshot{}
	ranges, err := c.StaticIP.JkeV1().IPRanges().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing IPRanges: %w", err)
	}
	s.Ranges = ranges.Items
	pools, err := c.StaticIP.JkeV1().IPPools().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing IPPools: %w", err)
	}
	s.Pools = pools.Items
	sips, err := c.StaticIP.JkeV1().StaticIPs(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing StaticIPs: %w", err)
	}
	s.StaticIPs = sips.Items
	pods, err := c.Kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	s.Pods = pods.Items
	fos, err := c.StaticIP.JkeV1alpha1().NodeFailovers().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing NodeFailovers: %w", err)
	}
	s.Failovers = fos.Items
	return s, nil
}

// parsedRange is an IPRange with its CIDR parsed; bad CIDRs (the CRD rejects them) are skipped.
type parsedRange struct {
	r      *jkev1.IPRange
	prefix netip.Prefix
}

func parseRanges(ranges []jkev1.IPRange) []parsedRange {
	out := make([]parsedRange, 0, len(ranges))
	for i := range ranges {
		p, err := netip.ParsePrefix(ranges[i].Spec.CIDR)
		if err != nil {
			continue
		}
		out = append(out, parsedRange{r: &ranges[i], prefix: p.Masked()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].r.Name < out[j].r.Name })
	return out
}

// rangeOf is the range holding a, the most specific one if several do ("" range: none).
func rangeOf(ranges []parsedRange, a netip.Addr) *parsedRange {
	var best *parsedRange
	for i := range ranges {
		if ranges[i].prefix.Contains(a) && (best == nil || ranges[i].prefix.Bits() > best.prefix.Bits()) {
			best = &ranges[i]
		}
	}
	return best
}

// livePod says whether a pod holds its IPs: it has a pod-network IP and has not terminated.
// A pod being deleted still holds them until the CNI DEL.
func livePod(p *corev1.Pod) bool {
	return !p.Spec.HostNetwork && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed &&
		len(p.Status.PodIPs)+len(p.Status.PodIP) > 0
}

// podIPs are the parsed IPs of a pod (status.podIPs, or status.podIP when that is empty).
func podIPs(p *corev1.Pod) []netip.Addr {
	var out []netip.Addr
	add := func(s string) {
		if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, a.Unmap())
		}
	}
	for _, ip := range p.Status.PodIPs {
		add(ip.IP)
	}
	if len(p.Status.PodIPs) == 0 {
		add(p.Status.PodIP)
	}
	return out
}

// poolOf names the pool a range belongs to: its jke.jdcloud.com/ippool label, else the pool
// whose CIDRs contain the range.
func poolOf(pools []jkev1.IPPool, r parsedRange) string {
	if p := r.r.Labels[jkev1.LabelIPPool]; p != "" {
		return p
	}
	for _, pool := range pools {
		for _, c := range pool.Spec.CIDRs {
			if p, err := netip.ParsePrefix(c); err == nil && p.Bits() <= r.prefix.Bits() && p.Contains(r.prefix.Addr()) {
				return pool.Name
			}
		}
	}
	return ""
}

func nsName(namespace, name string) string { return namespace + "/" + name }
