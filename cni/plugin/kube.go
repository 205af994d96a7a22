package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"time"
)

// kubeClient is the little of the API the plugin needs, over plain HTTP with the kubeconfig's
// credentials. It deliberately avoids the typed clientsets: their scheme registration alone costs
// more than a whole ADD.
type kubeClient struct {
	http    *http.Client
	host    string
	timeout time.Duration
}

// errNotFound is a 404 from the API server.
var errNotFound = errors.New("not found")

// objectMeta, podObject, staticIPObject and ipRangeObject hold only the fields the plugin reads.
type objectMeta struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace,omitempty"`
	UID         string            `json:"uid,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	// OwnerReferences: read on pods only.
	OwnerReferences []ownerReference `json:"ownerReferences,omitempty"`
}

type podObject struct {
	Metadata objectMeta `json:"metadata"`
}

// ownerReference is the part of metadata.ownerReferences the plugin reads.
type ownerReference struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	Controller *bool  `json:"controller,omitempty"`
}

// controller is the pod's controller reference, nil if none.
func (p *podObject) controller() *ownerReference {
	for i := range p.Metadata.OwnerReferences {
		if r := &p.Metadata.OwnerReferences[i]; r.Controller != nil && *r.Controller {
			return r
		}
	}
	return nil
}

type staticIPObject struct {
	Metadata objectMeta `json:"metadata"`
	Spec     struct {
		IP string `json:"ip,omitempty"`
		// IPs: a dual-stack record's addresses, one per family, the first = IP.
		IPs  []string `json:"ips,omitempty"`
		Node string   `json:"node,omitempty"`
		Pod  string   `json:"pod,omitempty"`
		// APIGroup, Kind and Ref: the workload the record belongs to.
		APIGroup string `json:"apiGroup,omitempty"`
		Kind     string `json:"kind,omitempty"`
		Ref      string `json:"ref,omitempty"`
	} `json:"spec"`
}

type ipRangeObject struct {
	Metadata objectMeta `json:"metadata"`
	Spec     struct {
		CIDR            string `json:"cidr"`
		Node            string `json:"node,omitempty"`
		OwnerGeneration int64  `json:"ownerGeneration,omitempty"`
	} `json:"spec"`
}

func (c *kubeClient) getIPRange(ctx context.Context, name string) (*ipRangeObject, error) {
	r := &ipRangeObject{}
	err := c.do(ctx, http.MethodGet, "/apis/jke.jdcloud.com/v1/ipranges/"+url.PathEscape(name), "", nil, r)
	return r, err
}

func newKubeClient(kubeconfig string, timeout time.Duration) (*kubeClient, error) {
	host, hc, err := loadKubeconfig(kubeconfig, timeout)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	if u, err := url.Parse(host); err == nil && u.Scheme == "" {
		host = "https://" + host
	}
	return &kubeClient{http: hc, host: host, timeout: timeout}, nil
}

func (c *kubeClient) do(ctx context.Context, method, path, contentType string, body []byte, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.host+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		var st struct {
			Message string `json:"message"`
			Reason  string `json:"reason"`
			Details struct {
				Name string `json:"name"`
			} `json:"details"`
		}
		_ = json.Unmarshal(data, &st)
		// Only the API server saying that this very object does not exist counts as "not
		// found": a bare 404 (a proxy, an API group not installed) proves nothing, and callers
		// free a pod's IP on errNotFound.
		if resp.StatusCode == http.StatusNotFound && st.Reason == "NotFound" && st.Details.Name != "" {
			return fmt.Errorf("%s %s: %w", method, path, errNotFound)
		}
		if st.Message == "" {
			st.Message = string(data)
		}
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, st.Message)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(data, out)
}

func (c *kubeClient) getPod(ctx context.Context, namespace, name string) (*podObject, error) {
	p := &podObject{}
	err := c.do(ctx, http.MethodGet, "/api/v1/namespaces/"+url.PathEscape(namespace)+"/pods/"+url.PathEscape(name), "", nil, p)
	return p, err
}

// annotatePod sets one annotation with a merge patch, guarded by the pod's UID so that a
// recreated pod of the same name is never annotated with its predecessor's IP.
func (c *kubeClient) annotatePod(ctx context.Context, namespace, name, uid, key, value string) error {
	patch := map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: value}}}
	if uid != "" {
		patch["metadata"].(map[string]any)["uid"] = uid
	}
	body, _ := json.Marshal(patch)
	return c.do(ctx, http.MethodPatch, "/api/v1/namespaces/"+url.PathEscape(namespace)+"/pods/"+url.PathEscape(name),
		"application/merge-patch+json", body, nil)
}

func (c *kubeClient) getStaticIP(ctx context.Context, namespace, name string) (*staticIPObject, error) {
	s := &staticIPObject{}
	err := c.do(ctx, http.MethodGet, "/apis/jke.jdcloud.com/v1/namespaces/"+url.PathEscape(namespace)+"/staticips/"+url.PathEscape(name), "", nil, s)
	return s, err
}

func (c *kubeClient) listStaticIPs(ctx context.Context) ([]staticIPObject, error) {
	var l struct {
		Items []staticIPObject `json:"items"`
	}
	err := c.do(ctx, http.MethodGet, "/apis/jke.jdcloud.com/v1/staticips", "", nil, &l)
	return l.Items, err
}

func (c *kubeClient) listIPRanges(ctx context.Context) ([]ipRangeObject, error) {
	var l struct {
		Items []ipRangeObject `json:"items"`
	}
	err := c.do(ctx, http.MethodGet, "/apis/jke.jdcloud.com/v1/ipranges", "", nil, &l)
	return l.Items, err
}

// records reports whether the record names ip among its addresses, or names none yet (a
// Pending record: whatever the pod gets is its fixed IP).
func (s *staticIPObject) records(ip netip.Addr) bool {
	ips := s.Spec.IPs
	if len(ips) == 0 && s.Spec.IP != "" {
		ips = []string{s.Spec.IP}
	}
	if len(ips) == 0 {
		return true
	}
	for _, r := range ips {
		if a, err := netip.ParseAddr(r); err == nil && a.Unmap() == ip {
			return true
		}
	}
	return false
}
