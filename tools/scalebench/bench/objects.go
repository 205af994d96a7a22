package bench

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/staticip/staticip/apis/iprangelabel"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/apis/podip"
	"github.com/staticip/staticip/internal/reporoot"
)

// PoolCIDR is where every node's /24 comes from: the IPPool's CIDR, or the hand-written
// IPRanges' (10.64.0.0/10: 16,384 blocks).
const PoolCIDR = "10.64.0.0/10"

// NodeCIDR is the hand-written /24 of the i-th node.
func NodeCIDR(i int) string { return fmt.Sprintf("10.%d.%d.0/24", 64+i/256, i%256) }

// Ranges maps each node to the CIDR of its IPRange.
func (c *Cluster) Ranges(ctx context.Context) (map[string]netip.Prefix, error) {
	list, err := c.SIP.JkeV1().IPRanges().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	m := map[string]netip.Prefix{}
	names := map[string]string{}
	for _, r := range list.Items {
		if p, err := netip.ParsePrefix(r.Spec.CIDR); err == nil && r.Spec.Node != "" {
			m[r.Spec.Node], names[r.Spec.Node] = p, r.Name
		}
	}
	c.rangeNames = names
	return m, nil
}

// RangeLabelled gives s the label the StaticIP controller sets with the IP
// (apis/iprangelabel): that of rangeName, the IPRange s's IP lies in. The harness writes
// records as the controllers would have left them, so that no scenario measures a one-time
// relabelling (an upgrade's cost) instead of the component's work.
func RangeLabelled(s *jkev1.StaticIP, rangeName string) *jkev1.StaticIP {
	if s.Labels == nil {
		s.Labels = map[string]string{}
	}
	s.Labels[iprangelabel.Key] = iprangelabel.Value(rangeName)
	return s
}

// EnsureRanges gives every node without an IPRange a hand-written one (NodeCIDR) and
// returns node → CIDR.
func (c *Cluster) EnsureRanges(ctx context.Context) (map[string]netip.Prefix, error) {
	have, err := c.Ranges(ctx)
	if err != nil {
		return nil, err
	}
	if len(have) > 0 && len(have) < len(c.Nodes) {
		return nil, fmt.Errorf("%d of %d nodes have an IPRange: mixing pool blocks and hand-written ranges would overlap", len(have), len(c.Nodes))
	}
	err = parallel(ctx, len(c.Nodes), 32, func(ctx context.Context, i int) error {
		if _, ok := have[c.Nodes[i]]; ok {
			return nil
		}
		_, err := c.SIP.JkeV1().IPRanges().Create(ctx, &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: c.Nodes[i]},
			Spec: jkev1.IPRangeSpec{CIDR: NodeCIDR(i), Node: c.Nodes[i]}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return c.Ranges(ctx)
}

// Host is the k-th address of a /24.
func Host(p netip.Prefix, k int) string {
	a := p.Masked().Addr().As4()
	a[3] = byte(k)
	return netip.AddrFrom4(a).String()
}

// EnsureNamespace creates ns if it does not exist.
func (c *Cluster) EnsureNamespace(ctx context.Context, ns string) error {
	_, err := c.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// DeletePods force-deletes every pod of ns (grace 0: kwok's kubelet would take its time)
// and waits until none is left. A delete-collection of tens of thousands of pods can time
// out on the API server half done: it is repeated until the namespace is empty.
func (c *Cluster) DeletePods(ctx context.Context, ns string) error {
	return poll(ctx, 20*time.Minute, func(ctx context.Context) (bool, error) {
		l, err := c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil || len(l.Items) > 0 {
			_ = c.Kube.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{Limit: 2000})
			return false, nil
		}
		return true, nil
	})
}

// DeleteStaticIPs deletes every StaticIP of ns and waits until none is left.
func (c *Cluster) DeleteStaticIPs(ctx context.Context, ns string) error {
	return poll(ctx, 20*time.Minute, func(ctx context.Context) (bool, error) {
		l, err := c.SIP.JkeV1().StaticIPs(ns).List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil || len(l.Items) > 0 {
			_ = c.SIP.JkeV1().StaticIPs(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{Limit: 2000})
			return false, nil
		}
		return true, nil
	})
}

// Requests are every benchmark pod's requests: 60 fit a node next to its reservations.
var Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}

// PinnedTo is the required node affinity the EnhancedStatefulSet controller gives a
// static-IP pod (DESIGN.md, "How a fixed IP lives", 1).
func PinnedTo(node string) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
			Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}}}
}

// Pod is a benchmark pod (one container, Requests); ip and node make it a static-IP pod.
func Pod(ns, name, ip, node string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "scalebench"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "scalebench",
			Resources: corev1.ResourceRequirements{Requests: Requests}}},
			TerminationGracePeriodSeconds: ptr.To[int64](0)}}
	if ip != "" {
		p.Annotations = map[string]string{podip.AnnotationIPAddress: ip}
		p.Spec.Affinity = PinnedTo(node)
	}
	return p
}

// StaticIP is the record of a static-IP pod (or of an absent one, holding its place).
func StaticIP(ns, name, ip, node string, res corev1.ResourceList) *jkev1.StaticIP {
	return &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: jkev1.StaticIPSpec{Node: node, IP: ip, Pod: name, Resources: res}}
}

// SchedulerConfig writes a KubeSchedulerConfiguration: the profiles of the repository's
// manifests file (relative to the repository root), this kubeconfig, no leader election
// and an unthrottled client (as scheduler_perf).
func (c *Cluster) SchedulerConfig(name, manifest, kubeconfig string) (string, error) {
	root, err := reporoot.Find()
	if err != nil {
		return "", err
	}
	data, err := os.ReadFile(filepath.Join(root, manifest))
	if err != nil {
		return "", err
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return "", err
	}
	cfg["leaderElection"] = map[string]any{"leaderElect": false}
	cfg["clientConnection"] = map[string]any{"kubeconfig": kubeconfig, "qps": 5000, "burst": 5000}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return "", err
	}
	path := filepath.Join(c.Dir, name+"-config.yaml")
	return path, os.WriteFile(path, out, 0o644)
}

func isExists(err error) bool { return apierrors.IsAlreadyExists(err) }

// BoundWatch counts the pods of a namespace bound to a node, from a watch (a list of
// tens of thousands of pods every poll would load the API server it measures). Its cache
// keeps each pod's name and node only.
type BoundWatch struct {
	store cache.Store
	stop  context.CancelFunc
}

// WatchBound starts counting the bound pods of ns.
func (c *Cluster) WatchBound(ctx context.Context, ns string) (*BoundWatch, error) {
	ctx, stop := context.WithCancel(ctx)
	f := informers.NewSharedInformerFactoryWithOptions(c.Kube, 0, informers.WithNamespace(ns),
		informers.WithTransform(func(obj any) (any, error) {
			if p, ok := obj.(*corev1.Pod); ok {
				return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, ResourceVersion: p.ResourceVersion},
					Spec: corev1.PodSpec{NodeName: p.Spec.NodeName}}, nil
			}
			return obj, nil
		}))
	inf := f.Core().V1().Pods().Informer()
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		stop()
		return nil, fmt.Errorf("pods of %s: cache not synced", ns)
	}
	return &BoundWatch{store: inf.GetStore(), stop: stop}, nil
}

// Bound is how many pods are bound now.
func (w *BoundWatch) Bound() int {
	n := 0
	for _, o := range w.store.List() {
		if o.(*corev1.Pod).Spec.NodeName != "" {
			n++
		}
	}
	return n
}

// Stop ends the watch.
func (w *BoundWatch) Stop() { w.stop() }

// transient says whether a request failed because the API server was busy or out of reach
// for a moment (429, a timeout, a refused or reset connection, a TLS handshake timeout).
func transient(err error) bool {
	return apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) ||
		utilnet.IsConnectionReset(err) || utilnet.IsConnectionRefused(err) || utilnet.IsProbableEOF(err) ||
		strings.Contains(err.Error(), "TLS handshake timeout") || strings.Contains(err.Error(), "Client.Timeout")
}

// create runs a create, repeating it with backoff while it fails transiently; an object
// that already exists (a repeated create whose first try went through) is no error.
func create(f func() error) error {
	return ignoreExists(retry.OnError(wait.Backoff{Steps: 12, Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.2, Cap: 15 * time.Second}, transient, f))
}
