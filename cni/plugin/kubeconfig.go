package plugin

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// kubeconfig is the subset of a kubeconfig file the plugin understands: server, CA, client
// certificate or bearer token. staticip-agent writes exactly such a file for the plugin.
//
// Why not client-go's clientcmd: linking it (and with it the apimachinery API types) adds
// ~10 ms of package initialisation to every CNI call, more than the whole IPAM work; the plugin
// is exec'd for every pod start and stop.
type kubeconfig struct {
	CurrentContext string `json:"current-context"`
	Clusters       []struct {
		Name    string `json:"name"`
		Cluster struct {
			Server                   string `json:"server"`
			CertificateAuthority     string `json:"certificate-authority"`
			CertificateAuthorityData string `json:"certificate-authority-data"`
			InsecureSkipTLSVerify    bool   `json:"insecure-skip-tls-verify"`
			TLSServerName            string `json:"tls-server-name"`
		} `json:"cluster"`
	} `json:"clusters"`
	Users []struct {
		Name string `json:"name"`
		User struct {
			ClientCertificate     string `json:"client-certificate"`
			ClientCertificateData string `json:"client-certificate-data"`
			ClientKey             string `json:"client-key"`
			ClientKeyData         string `json:"client-key-data"`
			Token                 string `json:"token"`
			TokenFile             string `json:"tokenFile"`
		} `json:"user"`
	} `json:"users"`
	Contexts []struct {
		Name    string `json:"name"`
		Context struct {
			Cluster string `json:"cluster"`
			User    string `json:"user"`
		} `json:"context"`
	} `json:"contexts"`
}

type bearerTransport struct {
	token string
	next  http.RoundTripper
}

func (b *bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// loadKubeconfig returns the API server URL and an HTTP client for the current context.
func loadKubeconfig(path string, timeout time.Duration) (string, *http.Client, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", nil, err
	}
	var kc kubeconfig
	if err := yaml.Unmarshal(data, &kc); err != nil {
		return "", nil, fmt.Errorf("parse: %w", err)
	}
	base := filepath.Dir(path)
	rel := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(base, p)
	}
	ctxName := kc.CurrentContext
	if ctxName == "" && len(kc.Contexts) == 1 {
		ctxName = kc.Contexts[0].Name
	}
	var clusterName, userName string
	for _, c := range kc.Contexts {
		if c.Name == ctxName {
			clusterName, userName = c.Context.Cluster, c.Context.User
		}
	}
	if clusterName == "" {
		if len(kc.Clusters) != 1 {
			return "", nil, fmt.Errorf("no current-context")
		}
		clusterName = kc.Clusters[0].Name
	}
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS12}
	server := ""
	for _, c := range kc.Clusters {
		if c.Name != clusterName {
			continue
		}
		server = c.Cluster.Server
		tlsConf.InsecureSkipVerify = c.Cluster.InsecureSkipTLSVerify //nolint:gosec // the kubeconfig asks for it
		tlsConf.ServerName = c.Cluster.TLSServerName
		ca, err := dataOrFile(c.Cluster.CertificateAuthorityData, rel(c.Cluster.CertificateAuthority))
		if err != nil {
			return "", nil, fmt.Errorf("certificate-authority: %w", err)
		}
		if ca != nil {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(ca) {
				return "", nil, fmt.Errorf("certificate-authority holds no PEM certificate")
			}
			tlsConf.RootCAs = pool
		}
	}
	if server == "" {
		return "", nil, fmt.Errorf("cluster %q has no server", clusterName)
	}
	var rt http.RoundTripper = &http.Transport{TLSClientConfig: tlsConf, Proxy: http.ProxyFromEnvironment,
		TLSHandshakeTimeout: timeout, ResponseHeaderTimeout: timeout}
	for _, u := range kc.Users {
		if u.Name != userName {
			continue
		}
		cert, err := dataOrFile(u.User.ClientCertificateData, rel(u.User.ClientCertificate))
		if err != nil {
			return "", nil, fmt.Errorf("client-certificate: %w", err)
		}
		key, err := dataOrFile(u.User.ClientKeyData, rel(u.User.ClientKey))
		if err != nil {
			return "", nil, fmt.Errorf("client-key: %w", err)
		}
		if cert != nil {
			pair, err := tls.X509KeyPair(cert, key)
			if err != nil {
				return "", nil, fmt.Errorf("client certificate: %w", err)
			}
			tlsConf.Certificates = []tls.Certificate{pair}
		}
		token := u.User.Token
		if token == "" && u.User.TokenFile != "" {
			b, err := os.ReadFile(rel(u.User.TokenFile))
			if err != nil {
				return "", nil, fmt.Errorf("tokenFile: %w", err)
			}
			token = strings.TrimSpace(string(b))
		}
		if token != "" {
			rt = &bearerTransport{token: token, next: rt}
		}
	}
	return strings.TrimSuffix(server, "/"), &http.Client{Transport: rt, Timeout: timeout}, nil
}

func dataOrFile(data, file string) ([]byte, error) {
	if data != "" {
		return base64.StdEncoding.DecodeString(data)
	}
	if file != "" {
		return os.ReadFile(file)
	}
	return nil, nil
}
