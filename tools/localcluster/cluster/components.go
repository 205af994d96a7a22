package cluster

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/staticip/staticip/tools/images/imagebuilder"
)

// writePKI creates the CA and every certificate: the API server's serving certificate,
// client certificates for each identity (admin, controllers, scheduler, kubelets,
// kube-proxy, the API server towards kubelets) and the kubelets' serving certificates.
func (l *layout) writePKI() error {
	ca, err := newCertAuthority(l.pkiDir, "ca")
	if err != nil {
		return err
	}
	// The front proxy (aggregation layer) has its own CA, as in kubeadm: a client
	// certificate from the cluster CA must not be able to assert X-Remote-User.
	frontProxyCA, err := newCertAuthority(l.pkiDir, "front-proxy-ca")
	if err != nil {
		return err
	}
	if err := frontProxyCA.issue(l.pkiDir, "front-proxy-client", certRequest{CommonName: "front-proxy-client", Client: true}); err != nil {
		return err
	}
	if err := writeServiceAccountKeys(l.pkiDir); err != nil {
		return err
	}
	ips := []net.IP{net.ParseIP(l.apiserverIP), net.ParseIP(l.kubernetesSvc), net.ParseIP("127.0.0.1")}
	reqs := map[string]certRequest{
		"apiserver": {CommonName: "kube-apiserver", IPs: ips, Server: true,
			DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc." + clusterDomain}},
		// The API server authenticates to kubelets (logs, exec) as a cluster admin.
		"apiserver-kubelet-client": {CommonName: "kube-apiserver-kubelet-client", Organizations: []string{"system:masters"}, Client: true},
		"admin":                    {CommonName: "localcluster-admin", Organizations: []string{"system:masters"}, Client: true},
		"controller-manager":       {CommonName: "system:kube-controller-manager", Client: true},
		"scheduler":                {CommonName: "system:kube-scheduler", Client: true},
		"kube-proxy":               {CommonName: "system:kube-proxy", Client: true},
	}
	for _, n := range l.nodes {
		reqs[n.name+"-kubelet"] = certRequest{CommonName: "system:node:" + n.name, Organizations: []string{"system:nodes"}, Client: true}
		reqs[n.name+"-kubelet-serving"] = certRequest{CommonName: "system:node:" + n.name, IPs: []net.IP{net.ParseIP(n.ip)}, DNSNames: []string{n.name}, Server: true}
	}
	for name, req := range reqs {
		if err := ca.issue(l.pkiDir, name, req); err != nil {
			return err
		}
	}
	// Kubeconfigs: the user's (admin) and one per component identity.
	kc := map[string]string{
		l.kubeconfig: "admin",
		filepath.Join(l.StateDir, "controller-manager.kubeconfig"): "controller-manager",
		filepath.Join(l.StateDir, "scheduler.kubeconfig"):          "scheduler",
		filepath.Join(l.StateDir, "kube-proxy.kubeconfig"):         "kube-proxy",
	}
	for _, n := range l.nodes {
		kc[filepath.Join(n.dir, "kubelet.kubeconfig")] = n.name + "-kubelet"
	}
	for path, cert := range kc {
		if err := l.writeKubeconfig(path, cert); err != nil {
			return err
		}
	}
	if !l.KubeProxyDirect {
		// kube-proxy reaches the API server through application-grid-wrapper on its node's
		// loopback, with no credentials of its own (manifests/edge/kubeconfig.yaml).
		kc, err := gridWrapperKubeconfig(l.RepoRoot)
		if err != nil {
			return fmt.Errorf("kube-proxy's kubeconfig through application-grid-wrapper: %w", err)
		}
		return os.WriteFile(filepath.Join(l.StateDir, "kube-proxy.kubeconfig"), kc, 0o600)
	}
	return nil
}

func (l *layout) writeKubeconfig(path, cert string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["localcluster"] = &clientcmdapi.Cluster{
		Server:               fmt.Sprintf("https://%s:%d", l.apiserverIP, apiserverPort),
		CertificateAuthority: filepath.Join(l.pkiDir, "ca.crt"),
	}
	cfg.AuthInfos[cert] = &clientcmdapi.AuthInfo{
		ClientCertificate: filepath.Join(l.pkiDir, cert+".crt"),
		ClientKey:         filepath.Join(l.pkiDir, cert+".key"),
	}
	cfg.Contexts["localcluster"] = &clientcmdapi.Context{Cluster: "localcluster", AuthInfo: cert}
	cfg.CurrentContext = "localcluster"
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return clientcmd.WriteToFile(*cfg, path)
}

func (l *layout) bin(name string) string { return filepath.Join(l.BinDir, name) }
func (l *layout) pki(name string) string { return filepath.Join(l.pkiDir, name) }

func (l *layout) etcd() daemon {
	return daemon{name: "etcd", netns: l.cpNetns, argv: []string{
		l.bin("etcd"),
		"--name=localcluster",
		"--data-dir=" + l.etcdDir,
		"--listen-client-urls=http://127.0.0.1:2379",
		"--advertise-client-urls=http://127.0.0.1:2379",
		"--listen-peer-urls=http://127.0.0.1:2380",
		"--initial-advertise-peer-urls=http://127.0.0.1:2380",
		"--initial-cluster=localcluster=http://127.0.0.1:2380",
		"--listen-metrics-urls=http://127.0.0.1:2381",
		// A throwaway cluster: losing the last writes on a host crash costs nothing,
		// fsync on every write costs seconds on a busy 2-core machine.
		"--unsafe-no-fsync",
		"--snapshot-count=10000",
		"--log-level=warn",
	}}
}

func (l *layout) apiserver() daemon {
	return daemon{name: "kube-apiserver", netns: l.cpNetns, argv: append([]string{
		l.bin("kube-apiserver"),
		"--etcd-servers=http://127.0.0.1:2379",
		"--bind-address=0.0.0.0",
		fmt.Sprintf("--secure-port=%d", apiserverPort),
		"--advertise-address=" + l.apiserverIP,
		"--tls-cert-file=" + l.pki("apiserver.crt"),
		"--tls-private-key-file=" + l.pki("apiserver.key"),
		"--client-ca-file=" + l.pki("ca.crt"),
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=true",
		// Dual-stack Services (ipFamilyPolicy PreferDualStack/RequireDualStack); IPv4 first, so
		// every Service that asks for nothing stays IPv4 as before.
		"--service-cluster-ip-range=" + dualStack(l.serviceCIDR, l.serviceCIDR6),
		"--service-account-issuer=https://kubernetes.default.svc." + clusterDomain,
		"--service-account-key-file=" + l.pki("sa.pub"),
		"--service-account-signing-key-file=" + l.pki("sa.key"),
		"--kubelet-client-certificate=" + l.pki("apiserver-kubelet-client.crt"),
		"--kubelet-client-key=" + l.pki("apiserver-kubelet-client.key"),
		"--kubelet-certificate-authority=" + l.pki("ca.crt"),
		"--kubelet-preferred-address-types=InternalIP",
		// The front proxy: aggregated APIs, and the requestheader CA that controllers and
		// the scheduler read from extension-apiserver-authentication.
		"--requestheader-client-ca-file=" + l.pki("front-proxy-ca.crt"),
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + l.pki("front-proxy-client.crt"),
		"--proxy-client-key-file=" + l.pki("front-proxy-client.key"),
		"--profiling=false",
		"--v=1",
	}, l.featureGates()...)}
}

// featureGates is the --feature-gates flag of kube-apiserver and kube-controller-manager, if any.
func (l *layout) featureGates() []string {
	if l.FeatureGates == "" {
		return nil
	}
	return []string{"--feature-gates=" + l.FeatureGates}
}

func (l *layout) controllerManager() daemon {
	kc := filepath.Join(l.StateDir, "controller-manager.kubeconfig")
	return daemon{name: "kube-controller-manager", netns: l.cpNetns, argv: append([]string{
		l.bin("kube-controller-manager"),
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--bind-address=127.0.0.1",
		"--service-account-private-key-file=" + l.pki("sa.key"),
		"--root-ca-file=" + l.pki("ca.crt"),
		"--use-service-account-credentials=true",
		// Node CIDRs are fixed by the layout (10.244.<i>.0/24) and set by `up`, so the
		// CNI config and Node.spec.podCIDR agree.
		"--allocate-node-cidrs=false",
		"--cluster-cidr=" + l.clusterCIDR,
		"--service-cluster-ip-range=" + dualStack(l.serviceCIDR, l.serviceCIDR6),
		"--controllers=*",
		"--leader-elect=false",
		"--profiling=false",
		"--v=1",
	}, l.featureGates()...)}
}

func (l *layout) scheduler() daemon {
	kc := filepath.Join(l.StateDir, "scheduler.kubeconfig")
	argv := []string{
		l.bin(schedulers[l.Scheduler]),
		"--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc,
		"--authorization-kubeconfig=" + kc,
		"--bind-address=127.0.0.1",
		"--leader-elect=false",
		"--profiling=false",
		"--v=1",
	}
	if l.Scheduler == "staticip-scheduler" {
		argv = append(argv, "--config="+l.schedulerConfigPath())
	}
	return daemon{name: "kube-scheduler", netns: l.cpNetns, argv: argv}
}

func (l *layout) schedulerConfigPath() string {
	return filepath.Join(l.StateDir, "scheduler-config.yaml")
}

// schedulerConfig is manifests/scheduler/replace-default's profile, with this cluster's
// kubeconfig and no leader election (one scheduler).
func (l *layout) schedulerConfig() string {
	return fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %q
leaderElection:
  leaderElect: false
profiles:
- schedulerName: default-scheduler
  plugins:
    multiPoint:
      enabled:
      - name: CheckPodAnnotationWithStaticIP
      - name: PodFitsResourcesWithStaticIP
`, filepath.Join(l.StateDir, "scheduler.kubeconfig"))
}

// staticipSchedulerRBAC lets the scheduler's identity (user system:kube-scheduler, its client
// certificate) read what the staticip plugins watch, as manifests/scheduler/base grants its
// ServiceAccount.
const staticipSchedulerRBAC = `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: staticip-scheduler-localcluster
rules:
- apiGroups: [jke.jdcloud.com]
  resources: [staticips, ipranges]
  verbs: [get, list, watch]
- apiGroups: [jke.jdcloud.com]
  resources: [ippools]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: staticip-scheduler-localcluster
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: staticip-scheduler-localcluster
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: system:kube-scheduler
`

// containerdConfig is one node's containerd: its own root, state, socket and CNI
// directories, so N containerds share nothing but the kernel.
func (l *layout) containerdConfig(n nodeLayout) string {
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = %[5]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[6]q
  # Without CAP_SYS_RESOURCE runc cannot lower oom_score_adj below containerd's own.
  restrict_oom_score_adj = true
  # Pod network namespaces under the state dir, not the machine-global /run/netns.
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        # runc's state defaults to the machine-global /run/containerd/runc.
        Root = %[9]q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[7]q
    conf_dir = %[8]q
    max_conf_num = 1
`, n.containerdRoot, n.containerdState, n.containerdSocket, n.containerdSocket+".ttrpc",
		filepath.Join(n.dir, "containerd", "opt"), imagebuilder.PauseImage, n.cniBinDir, n.cniConfDir, filepath.Join(n.containerdState, "runc"))
}

func (l *layout) containerd(n nodeLayout) daemon {
	return daemon{name: n.name + "-containerd", netns: n.netns, argv: []string{
		"containerd", "--config=" + filepath.Join(n.dir, "containerd.toml"), "--log-level=warn",
	}}
}

// kubeletConfig carries the settings PLATFORM.md found necessary here (cgroup v1,
// cgroupfs, no QoS cgroups, no CAP_SYS_RESOURCE) and those that keep several kubelets on
// one host from stepping on each other (pod logs dir, ports are per netns).
func (l *layout) kubeletConfig(n nodeLayout) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]s
port: 10250
healthzBindAddress: 127.0.0.1
healthzPort: 10248
readOnlyPort: 0
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %[2]s
authorization:
  mode: Webhook
tlsCertFile: %[3]s
tlsPrivateKeyFile: %[4]s
clusterDomain: %[5]s
clusterDNS: [%[6]s]
# No host resolv.conf: pods must never reach the machine's real DNS servers.
resolvConf: ""
# The default /var/log/pods is shared by all kubelets, and each kubelet's log GC deletes
# directories of pods it does not know: every node needs its own.
podLogsDir: %[7]s
# Imported images cannot be pulled again, so image GC must never remove them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "50Mi"
  nodefs.available: "1%%"
  imagefs.available: "1%%"
  nodefs.inodesFree: "1%%"
serializeImagePulls: false
registerNode: true
hairpinMode: hairpin-veth
containerRuntimeEndpoint: unix://%[8]s
nodeStatusReportFrequency: 1m0s
syncFrequency: 10s
fileCheckFrequency: 10s
`, n.ip, l.pki("ca.crt"), l.pki(n.name+"-kubelet-serving.crt"), l.pki(n.name+"-kubelet-serving.key"),
		clusterDomain, l.dnsServiceIP, n.podLogsDir, n.containerdSocket)
}

func (l *layout) kubelet(n nodeLayout) daemon {
	labels := []string{"zone=" + n.zone, "topology.kubernetes.io/zone=" + n.zone, "staticip.localcluster/node-index=" + fmt.Sprint(n.index)}
	labels = append(labels, spareLabels(n)...)
	return daemon{name: n.name + "-kubelet", netns: n.netns, argv: append([]string{
		l.bin("kubelet"),
		"--config=" + filepath.Join(n.dir, "kubelet.yaml"),
		"--kubeconfig=" + filepath.Join(n.dir, "kubelet.kubeconfig"),
		"--root-dir=" + n.kubeletRoot,
		"--cert-dir=" + filepath.Join(n.kubeletRoot, "pki"),
		"--hostname-override=" + n.name,
		"--node-ip=" + dualStack(n.ip, n.ip6), // both InternalIPs: a dual-stack node
		"--node-labels=" + strings.Join(labels, ","),
		"--v=1",
	}, spareKubeletArgs(n)...)}
}

func (l *layout) kubeProxyConfig(n nodeLayout) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: %[1]s
hostnameOverride: %[2]s
bindAddress: %[3]s
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
clusterCIDR: %[4]s
# nf_conntrack_max is machine-global (not writable from a network namespace); leave the
# conntrack sysctls alone.
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, filepath.Join(l.StateDir, "kube-proxy.kubeconfig"), n.name, n.ip, dualStack(l.clusterCIDR, l.podCIDR6))
}

func (l *layout) kubeProxy(n nodeLayout) daemon {
	return daemon{name: n.name + "-kube-proxy", netns: n.netns, argv: []string{
		l.bin("kube-proxy"),
		"--config=" + filepath.Join(n.dir, "kube-proxy.yaml"),
		"--v=1",
	}}
}
