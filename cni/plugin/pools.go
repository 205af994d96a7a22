package plugin

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/staticip/staticip/apis/poolchoice"
	"github.com/staticip/staticip/ipam"
)

// AnnotationIPPools is apis/jke/v1.AnnotationIPPools (the plugin does not import the API
// types: a smaller, faster binary; TestAnnotationKeysAgree keeps the two equal).
const AnnotationIPPools = poolchoice.AnnotationIPPools

// namespaceObject and ipPoolObject hold only the fields the pool choice reads.
type namespaceObject struct {
	Metadata struct {
		Name        string            `json:"name"`
		Labels      map[string]string `json:"labels,omitempty"`
		Annotations map[string]string `json:"annotations,omitempty"`
	} `json:"metadata"`
}

type ipPoolObject struct {
	Metadata struct {
		Name              string     `json:"name"`
		CreationTimestamp time.Time  `json:"creationTimestamp"`
		DeletionTimestamp *time.Time `json:"deletionTimestamp,omitempty"`
	} `json:"metadata"`
	Spec struct {
		CIDRs             []string                  `json:"cidrs"`
		NamespaceSelector *poolchoice.LabelSelector `json:"namespaceSelector,omitempty"`
	} `json:"spec"`
}

func (c *kubeClient) getNamespace(ctx context.Context, name string) (*namespaceObject, error) {
	n := &namespaceObject{}
	err := c.do(ctx, http.MethodGet, "/api/v1/namespaces/"+url.PathEscape(name), "", nil, n)
	return n, err
}

func (c *kubeClient) listIPPools(ctx context.Context) ([]ipPoolObject, error) {
	var l struct {
		Items []ipPoolObject `json:"items"`
	}
	err := c.do(ctx, http.MethodGet, "/apis/jke.jdcloud.com/v1/ippools", "", nil, &l)
	return l.Items, err
}

// poolView is the API server's answer, at ADD, to what the pool choice reads: the pod's
// namespace (labels, annotations) and every IPPool. err: it could not be read.
type poolView struct {
	ns    poolchoice.Namespace
	pools map[string]poolchoice.Pool
	err   error
}

// readPoolView reads the namespace and the IPPools (two requests, in parallel). A LIST without
// resourceVersion is a consistent read: a pool or label that exists when the pod's sandbox is
// created is seen — the agent's copy in the store, written on its next pass, is not read for
// this (a pod created right after its namespace's pool got a node-pool address from it).
func (c *kubeClient) readPoolView(ctx context.Context, namespace string) poolView {
	type nsResult struct {
		n   *namespaceObject
		err error
	}
	nsc := make(chan nsResult, 1)
	go func() {
		n, err := c.getNamespace(ctx, namespace)
		nsc <- nsResult{n, err}
	}()
	items, perr := c.listIPPools(ctx)
	nr := <-nsc
	if nr.err != nil {
		return poolView{err: fmt.Errorf("namespace %s: %w", namespace, nr.err)}
	}
	if perr != nil {
		return poolView{err: fmt.Errorf("IPPools: %w", perr)}
	}
	v := poolView{ns: poolchoice.Namespace{Name: namespace, Labels: nr.n.Metadata.Labels, Annotations: nr.n.Metadata.Annotations},
		pools: make(map[string]poolchoice.Pool, len(items))}
	for _, it := range items {
		p, err := poolchoice.NewPool(it.Metadata.Name, it.Metadata.CreationTimestamp, it.Metadata.DeletionTimestamp != nil,
			it.Spec.CIDRs, it.Spec.NamespaceSelector)
		if err == nil {
			v.pools[p.Name] = p
		}
	}
	return v
}

// podPools reads the pod's AnnotationIPPools: a JSON list of pool names, which admission
// (manifests/admission/ippools-policy.yaml, apis/poolchoice) has checked against the pools that
// select the pod's namespace. An unreadable value is the pod's error (code 100), never a reason
// to give it an address of another pool.
func podPools(pod ipam.PodRef, annotations map[string]string) ([]string, error) {
	v := strings.TrimSpace(annotations[AnnotationIPPools])
	if v == "" {
		return nil, nil
	}
	names, err := poolchoice.Parse(v)
	if err != nil {
		return nil, types.NewError(ErrCodeBadAnnotation, fmt.Sprintf("staticip: pod %s: %v", pod, err), "")
	}
	return names, nil
}

// poolsOf decides the pools the pod's next free address must come from (apis/poolchoice.Choose,
// the rule of admission, the allocator and the scheduler), from what the API server says now:
// the pod's own annotation (annotations; nil when unknown), its namespace's annotation and
// labels, and the pools' namespaceSelectors. fromStore: the view could not be read (the node is
// cut off) and the pod names no pool itself, so the store's copy of its namespace's pools, as the
// agent last wrote them, decides (README "Offline").
func (p *Plugin) poolsOf(pod ipam.PodRef, annotations map[string]string, view poolView) (pools []string, fromStore bool, err error) {
	own, err := podPools(pod, annotations)
	if err != nil {
		return nil, false, err
	}
	if view.err != nil {
		if own != nil {
			return own, false, nil
		}
		p.logf("pod %s: cannot read its namespace's pools from the API server (%v); using the agent's last copy in the store", pod, view.err)
		return nil, true, nil
	}
	ch, err := poolchoice.Choose(annotations, view.ns, view.pools, poolchoice.NamespacePools(view.pools))
	if err != nil {
		return nil, false, types.NewError(ErrCodeBadAnnotation, fmt.Sprintf("staticip: pod %s: %v", pod, err), "")
	}
	return ch.Pools, false, nil
}

// poolFamilies are the IP families (4, 6; IPv4 first) of the pod's pools as the API server's
// view has them: a pod naming a pool of each family takes an address of each (the store waits
// for neither family's ranges to be there to count it: ipam.AllocateRequest.PoolFamilies). None
// when the view could not be read (offline: the families of the ranges decide, as before).
func poolFamilies(pools []string, view poolView) []int {
	var v4, v6 bool
	for _, name := range pools {
		if p, ok := view.pools[name]; ok {
			v4, v6 = v4 || p.V4, v6 || !p.V4
		}
	}
	var out []int
	if v4 {
		out = append(out, 4)
	}
	if v6 {
		out = append(out, 6)
	}
	return out
}
