package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidateRejectsBadInput(t *testing.T) {
	cases := map[string]func(*Options){
		"zero nodes":      func(o *Options) { o.Nodes = 0 },
		"relative dir":    func(o *Options) { o.StateDir = "state" },
		"root dir":        func(o *Options) { o.StateDir = "/" },
		"not a /24":       func(o *Options) { o.NodeSubnet = "172.30.0.0/16" },
		"long prefix":     func(o *Options) { o.Prefix = "muchtoolong" },
		"unknown cni":     func(o *Options) { o.CNI = "flannel" },
		"unknown sched":   func(o *Options) { o.Scheduler = "nope" },
		"unparsable cidr": func(o *Options) { o.NodeSubnet = "x" },
		"pod cidr /24":    func(o *Options) { o.PodCIDR = "10.244.1.0/24" },
		"pod cidr bits":   func(o *Options) { o.PodCIDR = "10.244.1.0/16" },
		"service ipv6":    func(o *Options) { o.ServiceCIDR = "fd00::/16" },
		"same cidrs":      func(o *Options) { o.ServiceCIDR = o.PodCIDR },
		"feature gate":    func(o *Options) { o.FeatureGates = "MaxUnavailableStatefulSet" },
		"gate value":      func(o *Options) { o.FeatureGates = "A=true,B=maybe" },
	}
	for name, mutate := range cases {
		o := DefaultOptions()
		mutate(&o)
		if err := o.validate(); err == nil {
			t.Errorf("%s: validate accepted %+v", name, o)
		}
	}
	if d := DefaultOptions(); d.validate() != nil {
		t.Errorf("defaults rejected: %v", d.validate())
	}
}

func TestLayoutDerivesAddressesFromCIDRs(t *testing.T) {
	o := DefaultOptions()
	o.PodCIDR, o.ServiceCIDR = "10.245.0.0/16", "10.97.0.0/16"
	l := newLayout(o)
	if l.nodes[1].podCIDR != "10.245.2.0/24" || l.nodes[1].gateway != "10.245.2.1" {
		t.Errorf("node-2: podCIDR %s gateway %s, want 10.245.2.0/24 and 10.245.2.1", l.nodes[1].podCIDR, l.nodes[1].gateway)
	}
	if l.kubernetesSvc != "10.97.0.1" || l.dnsServiceIP != "10.97.0.10" || l.clusterCIDR != o.PodCIDR || l.serviceCIDR != o.ServiceCIDR {
		t.Errorf("service addresses %s %s, cidrs %s %s", l.kubernetesSvc, l.dnsServiceIP, l.clusterCIDR, l.serviceCIDR)
	}
	// The dual-stack side (ULA only), derived from the same options.
	if l.nodes[1].ip6 != "fd00:172:30:0::12" || l.nodeSubnet6 != "fd00:172:30:0::/64" || l.serviceCIDR6 != "fd00:10:97::/112" || l.podCIDR6 != "fd00:10:245::/112" {
		t.Errorf("IPv6: node-2 %s, nodes %s, services %s, pods %s", l.nodes[1].ip6, l.nodeSubnet6, l.serviceCIDR6, l.podCIDR6)
	}
	// A record from before the CIDR options existed has neither: the old fixed values apply.
	old := (&record{Nodes: 1, Prefix: "cluster", NodeSubnet: "172.30.0.0/24"}).options(Options{StateDir: "/x"})
	if l := newLayout(old); l.nodes[0].podCIDR != "10.244.1.0/24" || l.dnsServiceIP != "10.96.0.10" {
		t.Errorf("old record: podCIDR %s dns %s", l.nodes[0].podCIDR, l.dnsServiceIP)
	}
}

func TestLayoutNamesFitAndDiffer(t *testing.T) {
	o := DefaultOptions()
	o.Nodes = 12
	l := newLayout(o)
	seen := map[string]bool{}
	for _, name := range []string{l.bridge, l.cpHostVeth, l.cpNetns} {
		seen[name] = true
	}
	for _, n := range l.nodes {
		if len(n.hostVeth) > 15 {
			t.Errorf("link name %q is longer than IFNAMSIZ-1", n.hostVeth)
		}
		for _, v := range []string{n.hostVeth, n.netns, n.ip, n.podCIDR, n.kubeletRoot, n.containerdSocket, n.podLogsDir} {
			if seen[v] {
				t.Errorf("%s is used twice", v)
			}
			seen[v] = true
		}
		if !strings.HasPrefix(n.kubeletRoot, o.StateDir+"/") || !strings.HasPrefix(n.containerdRoot, o.StateDir+"/") {
			t.Errorf("node %s keeps state outside %s", n.name, o.StateDir)
		}
	}
	if l.nodes[0].zone == l.nodes[1].zone {
		t.Errorf("nodes 1 and 2 share zone %s; two node units are expected", l.nodes[0].zone)
	}
}

// TestPKI checks the certificates chain to the CA and carry the identities the API server
// and the kubelets authorise.
func TestPKI(t *testing.T) {
	o := DefaultOptions()
	o.StateDir = t.TempDir()
	o.RepoRoot, _ = filepath.Abs("../../..") // kube-proxy's kubeconfig comes from manifests/edge
	o.Nodes = 2
	l := newLayout(o)
	if err := os.MkdirAll(l.pkiDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := l.writePKI(); err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(l.pkiDir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	load := func(name string) *x509.Certificate {
		pair, err := tls.LoadX509KeyPair(filepath.Join(l.pkiDir, name+".crt"), filepath.Join(l.pkiDir, name+".key"))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		c, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	server := load("apiserver")
	if _, err := server.Verify(x509.VerifyOptions{Roots: pool, DNSName: "kubernetes.default.svc"}); err != nil {
		t.Errorf("apiserver cert for kubernetes.default.svc: %v", err)
	}
	if err := server.VerifyHostname(l.apiserverIP); err != nil {
		t.Errorf("apiserver cert for %s: %v", l.apiserverIP, err)
	}
	if err := server.VerifyHostname(l.kubernetesSvc); err != nil {
		t.Errorf("apiserver cert for the kubernetes Service IP: %v", err)
	}
	kubelet := load("node-2-kubelet")
	if kubelet.Subject.CommonName != "system:node:node-2" || len(kubelet.Subject.Organization) != 1 || kubelet.Subject.Organization[0] != "system:nodes" {
		t.Errorf("kubelet client identity = %v", kubelet.Subject)
	}
	if _, err := kubelet.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("kubelet client cert: %v", err)
	}
	if err := load("node-2-kubelet-serving").VerifyHostname(l.nodes[1].ip); err != nil {
		t.Errorf("kubelet serving cert: %v", err)
	}
	if _, err := os.Stat(l.kubeconfig); err != nil {
		t.Errorf("admin kubeconfig: %v", err)
	}
}
