package agent

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Credentials say how the plugin reaches the API server: the agent's in-cluster server
// address and CA file, and where the plugin's token comes from.
type Credentials struct {
	Server, CAFile string
	Tokens         TokenSource
}

// TokenSource hands out the plugin's current bearer token.
type TokenSource interface {
	Token() (string, error)
}

// TokenFile reads the token from a file on every call (a token someone else rotates).
type TokenFile string

// Token returns the file's content without surrounding white space.
func (f TokenFile) Token() (string, error) {
	b, err := os.ReadFile(string(f))
	return strings.TrimSpace(string(b)), err
}

// pluginKubeconfig renders the plugin's kubeconfig with the CA and token inline: the CA file
// lives inside the agent's container, where the plugin cannot read it.
func (c Credentials) pluginKubeconfig() ([]byte, error) {
	ca, err := os.ReadFile(c.CAFile)
	if err != nil {
		return nil, fmt.Errorf("CA of the plugin kubeconfig: %w", err)
	}
	if c.Tokens == nil {
		return nil, fmt.Errorf("token of the plugin kubeconfig: no token source")
	}
	token, err := c.Tokens.Token()
	if err != nil {
		return nil, fmt.Errorf("token of the plugin kubeconfig: %w", err)
	}
	cfg := map[string]any{
		"apiVersion":      "v1",
		"kind":            "Config",
		"current-context": "staticip",
		"clusters": []any{map[string]any{"name": "staticip", "cluster": map[string]any{
			"server": c.Server, "certificate-authority-data": base64.StdEncoding.EncodeToString(ca)}}},
		"users":    []any{map[string]any{"name": "staticip", "user": map[string]any{"token": token}}},
		"contexts": []any{map[string]any{"name": "staticip", "context": map[string]any{"cluster": "staticip", "user": "staticip"}}},
	}
	return json.MarshalIndent(cfg, "", "  ")
}

// DefaultPluginTokenLifetime is the lifetime the agent asks for the plugin's tokens (the
// API server's default for a TokenRequest).
const DefaultPluginTokenLifetime = time.Hour

// NodeBoundTokens mints the plugin's tokens: TokenRequests for the plugin's own service
// account (kube-system/staticip-cni in manifests/cni), bound to this node's Node object. A
// node-bound token carries the node's name (the authentication.kubernetes.io/node-name extra
// of its user), which is what lets admission (manifests/cni/admission.yaml) confine the
// plugin's writes to the ip-address annotation of pods bound to this node; it stops working
// when the Node is deleted. A token is renewed once 80% of its lifetime has passed (as the
// kubelet does for projected tokens), so a sync every --interval renews it long before it
// expires, also across an API server outage of minutes.
type NodeBoundTokens struct {
	Kube                      kubernetes.Interface
	Namespace, ServiceAccount string
	Node                      string
	// Lifetime asked for (expirationSeconds); the API server may shorten it. Default 1h.
	Lifetime time.Duration
	// Timeout bounds one TokenRequest: a sync must not hang on an API server that does not
	// answer. Default 10s.
	Timeout time.Duration
	// Now is the clock (tests); default time.Now.
	Now func() time.Time

	mu        sync.Mutex
	token     string
	renewAt   time.Time
	expiresAt time.Time
}

// Token returns the current token, minting a new one when none is held or 80% of the held
// one's lifetime has passed. While minting fails the held token is returned as long as it
// has not expired (with the error, for the logs), so an API server outage near renewal time
// does not take a working credential away from the plugin.
func (s *NodeBoundTokens) Token() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	t := now()
	if s.token != "" && t.Before(s.renewAt) {
		return s.token, nil
	}
	lifetime, timeout := s.Lifetime, s.Timeout
	if lifetime == 0 {
		lifetime = DefaultPluginTokenLifetime
	}
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	secs := int64(lifetime / time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	tr, err := s.Kube.CoreV1().ServiceAccounts(s.Namespace).CreateToken(ctx, s.ServiceAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: &secs,
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: s.Node},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		err = fmt.Errorf("TokenRequest for %s/%s bound to node %s: %w", s.Namespace, s.ServiceAccount, s.Node, err)
		if s.token != "" && t.Before(s.expiresAt) {
			return s.token, err
		}
		return "", err
	}
	// The lifetime the API server granted (it may shorten or extend the one asked for),
	// measured on the wall clock and applied to ours.
	granted := time.Until(tr.Status.ExpirationTimestamp.Time)
	if tr.Status.ExpirationTimestamp.IsZero() || granted <= 0 {
		granted = lifetime
	}
	s.token, s.expiresAt = tr.Status.Token, t.Add(granted)
	s.renewAt = t.Add(granted * 8 / 10)
	return s.token, nil
}
