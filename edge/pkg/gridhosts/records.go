// Package gridhosts computes the CoreDNS hosts records of statefulset-grid-daemon: for every
// StatefulSet a StatefulSetGrid owns in this node's unit, {ssg}-{ordinal}.{service}.{ns}.svc.{domain}
// -> the IP of that unit's pod {statefulset}-{ordinal}. Pure functions over API objects,
// table-tested; the daemon (edge/pkg/ssgdaemon) feeds them from its informers.
package gridhosts

import (
	"bytes"
	"fmt"
	"sort"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/staticip/staticip/apis/ordinal"
	superedgev1 "github.com/staticip/staticip/apis/superedge/v1"
)

// Input is everything the records depend on.
type Input struct {
	// Node is the daemon's own node: its labels say which unit it is in for each key.
	Node *corev1.Node
	// Grids, StatefulSets and Pods are what the daemon's informers hold (any namespace).
	Grids        []*superedgev1.StatefulSetGrid
	StatefulSets []*appsv1.StatefulSet
	Pods         []*corev1.Pod
	// PublishNotReady holds the Services (namespace/name) with publishNotReadyAddresses:
	// their not-ready pods are published too, as the kubernetes plugin does for StatefulSet DNS.
	PublishNotReady map[types.NamespacedName]bool
	// ClusterDomain is the kubelet's cluster domain, e.g. cluster.local.
	ClusterDomain string
}

// Record is one hosts line: Name resolves to IP, the address of Pod.
type Record struct {
	Name string
	IP   string
	// Pod (namespace/name) and StatefulSet are where the record comes from (logs, tests).
	Pod         string
	StatefulSet string
}

// Skip is a StatefulSet or a name that gives no record, and why. Only what an operator may
// need to fix is reported: StatefulSets of other units and not-ready pods are not skips.
type Skip struct {
	Object string
	Reason string
}

// Reasons of skips.
const (
	ReasonGridMissing   = "GridMissing"   // the owning grid is not (or no longer) known
	ReasonUnitMismatch  = "UnitMismatch"  // unit label and nodeSelector disagree
	ReasonNoServiceName = "NoServiceName" // spec.serviceName empty: no DNS name exists
	ReasonInvalidName   = "InvalidName"   // the record name is not a valid DNS name
	ReasonDuplicateName = "DuplicateName" // two StatefulSets give the same name
)

var gridKind = superedgev1.SchemeGroupVersion.WithKind("StatefulSetGrid")

// gridSet is a StatefulSet of this node's unit, with what its records need.
type gridSet struct {
	set     *appsv1.StatefulSet
	grid    *superedgev1.StatefulSetGrid
	service string
}

// Compute returns the sorted records of in.Node's units and the skips. It reads the unit from
// the StatefulSet's controller reference (a StatefulSetGrid known by UID), the grid's
// gridUniqKey, the StatefulSet's unit label and nodeSelector, and the pod's controller
// reference and name — never by looking for the unit's value inside a pod name.
func Compute(in Input) ([]Record, []Skip) {
	var skips []Skip
	if in.Node == nil {
		return nil, nil
	}
	grids := map[types.UID]*superedgev1.StatefulSetGrid{}
	for _, g := range in.Grids {
		if g.DeletionTimestamp == nil {
			grids[g.UID] = g
		}
	}
	sets := map[types.UID]gridSet{}
	for _, s := range in.StatefulSets {
		ref := metav1.GetControllerOfNoCopy(s)
		if ref == nil || ref.Kind != gridKind.Kind || !sameGroup(ref.APIVersion) {
			continue // not a grid's StatefulSet
		}
		if s.DeletionTimestamp != nil {
			continue
		}
		g := grids[ref.UID]
		if g == nil || g.Namespace != s.Namespace || g.Name != ref.Name {
			skips = append(skips, Skip{Object: objName(s), Reason: ReasonGridMissing})
			continue
		}
		key := g.Spec.GridUniqKey
		selected, pinned := s.Spec.Template.Spec.NodeSelector[key]
		unit, labelled := s.Labels[superedgev1.LabelGridUnit]
		if !pinned || (labelled && unit != selected) {
			skips = append(skips, Skip{Object: objName(s), Reason: ReasonUnitMismatch})
			continue
		}
		if v, ok := in.Node.Labels[key]; !ok || v != selected {
			continue // another unit's StatefulSet
		}
		if s.Spec.ServiceName == "" {
			skips = append(skips, Skip{Object: objName(s), Reason: ReasonNoServiceName})
			continue
		}
		sets[s.UID] = gridSet{set: s, grid: g, service: s.Spec.ServiceName}
	}

	byName := map[string][]candidate{}
	for _, p := range in.Pods {
		ref := metav1.GetControllerOfNoCopy(p)
		if ref == nil || ref.Kind != "StatefulSet" {
			continue
		}
		us, ok := sets[ref.UID]
		if !ok || p.Namespace != us.set.Namespace {
			continue
		}
		n, ok := Ordinal(us.set.Name, p)
		if !ok || !Published(p, in.PublishNotReady[types.NamespacedName{Namespace: p.Namespace, Name: us.service}]) {
			continue
		}
		name := fmt.Sprintf("%s-%d.%s.%s.svc.%s", us.grid.Name, n, us.service, p.Namespace, strings.TrimSuffix(in.ClusterDomain, "."))
		if !validName(name) {
			skips = append(skips, Skip{Object: name, Reason: ReasonInvalidName})
			continue
		}
		byName[name] = append(byName[name], candidate{set: us.set, pod: p})
	}

	var out []Record
	for name, cs := range byName {
		// Two StatefulSets of one grid in one unit (a rename in progress, a hand-made
		// copy): the oldest one keeps the name, deterministically; the other is reported.
		sort.Slice(cs, func(i, j int) bool { return older(cs[i].set, cs[j].set) })
		for _, c := range cs[1:] {
			if c.set.UID != cs[0].set.UID {
				skips = append(skips, Skip{Object: name + " (" + objName(c.set) + ", kept " + objName(cs[0].set) + ")", Reason: ReasonDuplicateName})
			}
		}
		w := cs[0]
		for _, ip := range podIPs(w.pod) {
			out = append(out, Record{Name: name, IP: ip, Pod: objName(w.pod), StatefulSet: objName(w.set)})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].IP < out[j].IP
	})
	sort.Slice(skips, func(i, j int) bool { return skips[i].Object < skips[j].Object })
	return out, skips
}

type candidate struct {
	set *appsv1.StatefulSet
	pod *corev1.Pod
}

func older(a, b *appsv1.StatefulSet) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	if a.Name != b.Name {
		return a.Name < b.Name
	}
	return a.UID < b.UID
}

func sameGroup(apiVersion string) bool {
	gv, err := schema.ParseGroupVersion(apiVersion)
	return err == nil && gv.Group == superedgev1.SchemeGroupVersion.Group
}

// Ordinal is the pod's ordinal in set: the name is exactly "{set}-{n}" (apis/ordinal, the
// StatefulSet controller's rule); the pod-index label, when present, must agree.
func Ordinal(set string, p *corev1.Pod) (int, bool) {
	n := ordinal.Of(set, p.Name)
	if n < 0 {
		return 0, false
	}
	if idx, ok := p.Labels[appsv1.PodIndexLabel]; ok && idx != strconv.Itoa(n) {
		return 0, false
	}
	return n, true
}

// Published: the pod has an IP, is not terminating or finished, and is Ready — or its
// Service publishes not-ready addresses (StatefulSet DNS semantics of the kubernetes plugin).
func Published(p *corev1.Pod, publishNotReady bool) bool {
	if p.DeletionTimestamp != nil || p.Status.PodIP == "" {
		return false
	}
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false
	}
	if publishNotReady {
		return true
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func podIPs(p *corev1.Pod) []string {
	if len(p.Status.PodIPs) == 0 {
		return []string{p.Status.PodIP}
	}
	out := make([]string, 0, len(p.Status.PodIPs))
	for _, ip := range p.Status.PodIPs {
		out = append(out, ip.IP)
	}
	return out
}

func validName(name string) bool {
	return len(validation.IsDNS1123Subdomain(name)) == 0 && func() bool {
		for _, l := range strings.Split(name, ".") {
			if len(l) > validation.DNS1123LabelMaxLength {
				return false
			}
		}
		return true
	}()
}

func objName(o metav1.Object) string { return o.GetNamespace() + "/" + o.GetName() }

// Header starts every file the daemon writes.
const Header = "# Written by statefulset-grid-daemon; regenerated as a whole on every change. Do not edit.\n"

// Render is the hosts file of records: the header, the node, then one "IP name" line per
// record, in the records' (sorted) order. Same records, same bytes.
func Render(node string, records []Record) []byte {
	var b bytes.Buffer
	b.WriteString(Header)
	fmt.Fprintf(&b, "# node %s: %d records\n", node, len(records))
	for _, r := range records {
		fmt.Fprintf(&b, "%s %s\n", r.IP, r.Name)
	}
	return b.Bytes()
}
