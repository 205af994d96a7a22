package agent

import (
	"context"
	"net/netip"
	"reflect"
	"slices"
	"sort"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	sipinformers "github.com/staticip/staticip/apis/generated/informers/externalversions"
	"github.com/staticip/staticip/apis/iprangelabel"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
)

// Which StaticIPs an agent watches (issue 37). Every agent used to watch every StaticIP of the
// cluster: a failover that re-points 110 records sent each of them to every agent (1.2–1.7 MiB
// per agent for one range move, whatever the cluster's size). The StaticIP controller labels a
// record with the IPRange its address lies in (apis/iprangelabel); an agent watches
//   - per range its node holds — owns (spec.node), or claims in status.holders (it drains
//     it) — and per range overlapping one of those, the records labelled with it: one
//     informer per label value (StaticIPScopes), started when the range arrives, stopped when
//     the node no longer holds it;
//   - the records without the label (selector "!key"): no IP yet, written before this release,
//     or not labelled yet — few once the controller has labelled them, and every agent sees them
//     as before, so an upgrade loses no reservation whichever of controller and agents goes
//     first.
// A pass waits for the informers of every range it holds (staticIPScopes.ensure): a range is
// never served before its records are known, so no reserved address is handed out.
//
// A record that leaves one informer (a DELETED event) may only be changing its label — from none
// to its range's, when the controller records its IP or labels a record of the previous
// release — and the two watches deliver the DELETED and the ADDED in no fixed order. So it is
// held (vanished) until it is seen again or proven gone: a record with an IP of a range the
// node holds by a GET (a NotFound drops it; the GET runs only for those, at most once per pass);
// a record without an IP (it reserves nothing; GC keeps its pod's address) for vanishedHold. A
// record in neither is none of this node's business and is dropped at once.

// vanishedHold is how long a record without an IP that left the agent's view stays in it.
const vanishedHold = 30 * time.Second

// StaticIPScopes are the label values (iprangelabel.Value) of the StaticIPs node's agent
// watches besides the unlabelled ones: those of the ranges node holds — spec.node, or an entry
// of status.holders — and of every range overlapping one of them (the controller labels a
// record with the oldest range its IP lies in; the agent serves by the same rule, but an
// overlap must not hide a record). Sorted.
func StaticIPScopes(ranges []*jkev1.IPRange, node string) []string {
	var held []netip.Prefix
	heldNames := map[string]bool{}
	for _, r := range ranges {
		if holds(r, node) {
			heldNames[r.Name] = true
			if p, err := netip.ParsePrefix(r.Spec.CIDR); err == nil {
				held = append(held, p.Masked())
			}
		}
	}
	set := map[string]bool{}
	for _, r := range ranges {
		if heldNames[r.Name] {
			set[iprangelabel.Value(r.Name)] = true
			continue
		}
		if p, err := netip.ParsePrefix(r.Spec.CIDR); err == nil && slices.ContainsFunc(held, p.Masked().Overlaps) {
			set[iprangelabel.Value(r.Name)] = true
		}
	}
	out := make([]string, 0, len(set))
	for v := range set {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// StaticIPWatchers are the nodes whose agents watch the StaticIPs labelled value (the inverse of
// StaticIPScopes; tools/scalebench accounts each agent's watch traffic with it). Sorted.
func StaticIPWatchers(ranges []*jkev1.IPRange, value string) []string {
	var labelled []netip.Prefix
	for _, r := range ranges {
		if iprangelabel.Value(r.Name) == value {
			if p, err := netip.ParsePrefix(r.Spec.CIDR); err == nil {
				labelled = append(labelled, p.Masked())
			}
		}
	}
	set := map[string]bool{}
	for _, r := range ranges {
		p, err := netip.ParsePrefix(r.Spec.CIDR)
		if iprangelabel.Value(r.Name) != value && (err != nil || !slices.ContainsFunc(labelled, p.Masked().Overlaps)) {
			continue
		}
		if r.Spec.Node != "" {
			set[r.Spec.Node] = true
		}
		for _, h := range r.Status.Holders {
			set[h.Node] = true
		}
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// holds says whether node owns r or claims it (serving or draining).
func holds(r *jkev1.IPRange, node string) bool {
	return r.Spec.Node == node || slices.ContainsFunc(r.Status.Holders, func(h jkev1.IPRangeHolder) bool { return h.Node == node })
}

// staticIPScopes are the agent's StaticIP informers: the unlabelled records and one informer per
// scope (StaticIPScopes).
type staticIPScopes struct {
	ctx        context.Context
	client     versioned.Interface
	trigger    func()
	now        func() time.Time
	unlabelled cache.SharedIndexInformer

	mu     sync.Mutex
	scopes map[string]*scopeInformer
	// vanished: records that left an informer, by namespace/name, until seen again or proven gone.
	vanished map[string]vanishedRecord
}

type scopeInformer struct {
	inf    cache.SharedIndexInformer
	cancel context.CancelFunc
}

type vanishedRecord struct {
	sip   *jkev1.StaticIP
	since time.Time
}

func newStaticIPScopes(ctx context.Context, client versioned.Interface, trigger func()) (*staticIPScopes, error) {
	s := &staticIPScopes{ctx: ctx, client: client, trigger: trigger, now: time.Now,
		scopes: map[string]*scopeInformer{}, vanished: map[string]vanishedRecord{}}
	f := sipinformers.NewSharedInformerFactoryWithOptions(client, 0, sipinformers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = "!" + iprangelabel.Key
	}))
	s.unlabelled = f.Jke().V1().StaticIPs().Informer()
	if _, err := s.unlabelled.AddEventHandler(s.handler()); err != nil {
		return nil, err
	}
	f.Start(ctx.Done())
	return s, nil
}

// handler triggers a pass on a record that appears, goes, or whose spec changed, and holds the
// ones that go (vanished).
func (s *staticIPScopes) handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { s.trigger() },
		UpdateFunc: func(o, n any) {
			if !reflect.DeepEqual(o.(*jkev1.StaticIP).Spec, n.(*jkev1.StaticIP).Spec) {
				s.trigger()
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if sip, ok := obj.(*jkev1.StaticIP); ok {
				s.mu.Lock()
				s.vanished[sip.Namespace+"/"+sip.Name] = vanishedRecord{sip: sip, since: s.now()}
				s.mu.Unlock()
			}
			s.trigger()
		},
	}
}

// ensure runs an informer for each of values and none for any other scope; it says whether
// every StaticIP informer has delivered its initial list.
func (s *staticIPScopes) ensure(values []string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	want := map[string]bool{}
	for _, v := range values {
		want[v] = true
		if s.scopes[v] != nil {
			continue
		}
		ctx, cancel := context.WithCancel(s.ctx)
		f := sipinformers.NewSharedInformerFactoryWithOptions(s.client, 0, sipinformers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = iprangelabel.Key + "=" + v
		}))
		inf := f.Jke().V1().StaticIPs().Informer()
		if _, err := inf.AddEventHandler(s.handler()); err != nil {
			cancel()
			continue // not synced: the pass waits and the next one tries again
		}
		s.scopes[v] = &scopeInformer{inf: inf, cancel: cancel}
		f.Start(ctx.Done())
		go func() {
			// A pass as soon as the records are in (an empty list brings no event).
			if cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
				s.trigger()
			}
		}()
	}
	for v, sc := range s.scopes {
		if !want[v] {
			sc.cancel()
			delete(s.scopes, v)
		}
	}
	if !s.unlabelled.HasSynced() {
		return false
	}
	for _, sc := range s.scopes {
		if !sc.inf.HasSynced() {
			return false
		}
	}
	return true
}

// waitSynced waits (bounded by ctx) until every StaticIP informer has delivered its initial list:
// a pass that finds a new range waits for that range's records rather than failing.
func (s *staticIPScopes) waitSynced(ctx context.Context) bool {
	s.mu.Lock()
	fns := []cache.InformerSynced{s.unlabelled.HasSynced}
	for _, sc := range s.scopes {
		fns = append(fns, sc.inf.HasSynced)
	}
	s.mu.Unlock()
	return cache.WaitForCacheSync(ctx.Done(), fns...)
}

// list is every record the informers hold, one per namespace/name: a record being labelled may
// briefly be in two; the version with an IP wins, then a scope's.
func (s *staticIPScopes) list() map[string]*jkev1.StaticIP {
	s.mu.Lock()
	infs := make([]cache.SharedIndexInformer, 0, len(s.scopes)+1)
	for _, sc := range s.scopes {
		infs = append(infs, sc.inf)
	}
	infs = append(infs, s.unlabelled)
	s.mu.Unlock()
	out := map[string]*jkev1.StaticIP{}
	for _, inf := range infs {
		for _, o := range inf.GetStore().List() {
			sip, ok := o.(*jkev1.StaticIP)
			if !ok {
				continue
			}
			k := sip.Namespace + "/" + sip.Name
			if prev, ok := out[k]; ok && (prev.Spec.IP != "" || sip.Spec.IP == "") {
				continue
			}
			out[k] = sip
		}
	}
	return out
}

// vanishedDecision is what a pass does with a record that left the agent's view.
type vanishedDecision int

const (
	vanishedDrop    vanishedDecision = iota // none of this node's business, seen again, or held long enough
	vanishedKeep                            // keep it in view, unconfirmed
	vanishedConfirm                         // ask the API server whether it still exists
)

// decideVanished says what to do with a record that left the view: present (in an informer
// again), held (its IP lies in a range this node holds), age (since it left).
func decideVanished(sip *jkev1.StaticIP, present bool, held []netip.Prefix, age time.Duration) vanishedDecision {
	switch {
	case present:
		return vanishedDrop
	case sip.Spec.IP == "":
		if age < vanishedHold {
			return vanishedKeep
		}
		return vanishedDrop
	}
	// AddressList is empty for a value that does not parse: dropped, as one outside held.
	if !slices.ContainsFunc(sip.Spec.AddressList(), func(ip netip.Addr) bool {
		return slices.ContainsFunc(held, func(p netip.Prefix) bool { return p.Contains(ip) })
	}) {
		return vanishedDrop
	}
	return vanishedConfirm
}

// withVanished adds to the listed records those that left the view and may still exist
// (decideVanished), asking the API server (one GET each) about those with an IP of a range the
// node holds. scopes are the label values the node watches; held the CIDRs of its ranges.
func (s *staticIPScopes) withVanished(ctx context.Context, listed map[string]*jkev1.StaticIP, scopes []string, held []netip.Prefix) []*jkev1.StaticIP {
	s.mu.Lock()
	pending := make(map[string]vanishedRecord, len(s.vanished))
	for k, v := range s.vanished {
		pending[k] = v
	}
	s.mu.Unlock()
	now := s.now()
	for k, v := range pending {
		keep := v.sip
		switch decideVanished(v.sip, listed[k] != nil, held, now.Sub(v.since)) {
		case vanishedDrop:
			keep = nil
		case vanishedConfirm:
			got, err := s.client.JkeV1().StaticIPs(v.sip.Namespace).Get(ctx, v.sip.Name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				keep = nil // deleted
			case err != nil:
				// Offline: keep it reserved (never free what may still be wanted).
			case got.UID != v.sip.UID:
				keep = nil // deleted and created again: the informers bring the new one
			default:
				l, labelled := got.Labels[iprangelabel.Key]
				if labelled && !slices.Contains(scopes, l) {
					keep = nil // labelled with a range this node does not watch
				} else {
					keep = got // on its way into an informer
				}
			}
		}
		s.mu.Lock()
		if cur, ok := s.vanished[k]; ok && cur.since.Equal(v.since) && keep == nil {
			delete(s.vanished, k)
		}
		s.mu.Unlock()
		if keep != nil {
			listed[k] = keep
		}
	}
	out := make([]*jkev1.StaticIP, 0, len(listed))
	for _, sip := range listed {
		out = append(out, sip)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out
}
