package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/staticip/staticip/tools/images/imagebuilder"
)

// coreDNSManifest runs CoreDNS as a pod behind the kube-dns Service, as in a real cluster:
// its traffic goes through the CNI and kube-proxy like everyone else's, so a DNS test also
// tests the data path. It answers only cluster.local and reverse zones; there is no
// `forward`, because nothing may leave this machine.
func (l *layout) coreDNSManifest() string {
	return fmt.Sprintf(`apiVersion: v1
kind: ServiceAccount
metadata:
  name: coredns
  namespace: kube-system
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: system:coredns
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: system:coredns
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:coredns
subjects:
- kind: ServiceAccount
  name: coredns
  namespace: kube-system
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: coredns
  namespace: kube-system
data:
  Corefile: |
    .:53 {
        errors
        health :8080
        ready :8181
        kubernetes %[1]s in-addr.arpa ip6.arpa {
            pods insecure
            fallthrough in-addr.arpa ip6.arpa
            ttl 5
        }
        cache 5
        loadbalance
    }
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: coredns
  namespace: kube-system
  labels:
    k8s-app: kube-dns
spec:
  replicas: 1
  selector:
    matchLabels:
      k8s-app: kube-dns
  template:
    metadata:
      labels:
        k8s-app: kube-dns
    spec:
      serviceAccountName: coredns
      priorityClassName: system-cluster-critical
      dnsPolicy: Default
      containers:
      - name: coredns
        image: %[2]s
        imagePullPolicy: Never
        args: ["-conf", "/etc/coredns/Corefile"]
        ports:
        - {name: dns, containerPort: 53, protocol: UDP}
        - {name: dns-tcp, containerPort: 53, protocol: TCP}
        readinessProbe:
          httpGet: {path: /ready, port: 8181}
          periodSeconds: 2
        livenessProbe:
          httpGet: {path: /health, port: 8080}
          periodSeconds: 10
        resources:
          requests: {cpu: 10m, memory: 20Mi}
        volumeMounts:
        - {name: config, mountPath: /etc/coredns, readOnly: true}
      volumes:
      - name: config
        configMap:
          name: coredns
---
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels:
    k8s-app: kube-dns
spec:
  clusterIP: %[3]s
  selector:
    k8s-app: kube-dns
  ports:
  - {name: dns, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, protocol: TCP}
`, clusterDomain, imagebuilder.CoreDNSImage, l.dnsServiceIP)
}

// kubectl runs _output/bin/kubectl against the cluster as admin.
func (l *layout) kubectl(stdin string, args ...string) (string, error) {
	cmd := exec.Command(l.bin("kubectl"), append([]string{"--kubeconfig=" + l.kubeconfig}, args...)...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// applyOverlay applies one of staticip's shipped manifest directories (relative to the
// repo root, e.g. manifests/controller-manager) through a kustomize overlay written to
// <state dir>/addons/<name>: the cluster runs exactly the manifests users install, with
// only what differs here (images, host paths) changed by the overlay's `images` and
// `patches`. overlay is the kustomization's body after its `resources`.
func (l *layout) applyOverlay(name, manifestDir, overlay string) error {
	dir := filepath.Join(l.StateDir, "addons", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// kustomize accepts only relative paths for bases.
	base, err := filepath.Rel(dir, filepath.Join(l.RepoRoot, manifestDir))
	if err != nil {
		return err
	}
	k := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- %s\n%s", base, overlay)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		return err
	}
	_, err = l.kubectl("", "apply", "--server-side", "--force-conflicts", "-k", dir)
	return err
}
