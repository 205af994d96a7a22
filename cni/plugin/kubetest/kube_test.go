// Package kubetest runs the staticip CNI plugin against a real kube-apiserver (testenv) and
// real network namespaces: annotation read, write-back, DEL keeping the reservation while the
// pod's StaticIP exists, and the owner hint of an out-of-range IP.
package kubetest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/staticip/staticip/apis/generated/clientset/versioned"
	jkev1 "github.com/staticip/staticip/apis/jke/v1"
	"github.com/staticip/staticip/apis/podip"
	"github.com/staticip/staticip/cni/nstest"
	"github.com/staticip/staticip/cni/plugin"
	"github.com/staticip/staticip/internal/testenv"
	"github.com/staticip/staticip/ipam"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// writeKubeconfig turns the test control plane's rest.Config into the kind of file the node
// agent gives the plugin.
func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	b64 := base64.StdEncoding.EncodeToString
	user := map[string]any{}
	if len(cfg.CertData) > 0 {
		user["client-certificate-data"] = b64(cfg.CertData)
		user["client-key-data"] = b64(cfg.KeyData)
	}
	if cfg.BearerToken != "" {
		user["token"] = cfg.BearerToken
	}
	cluster := map[string]any{"server": cfg.Host}
	if len(cfg.CAData) > 0 {
		cluster["certificate-authority-data"] = b64(cfg.CAData)
	} else {
		cluster["insecure-skip-tls-verify"] = true
	}
	kc := map[string]any{
		"apiVersion": "v1", "kind": "Config", "current-context": "test",
		"clusters": []any{map[string]any{"name": "test", "cluster": cluster}},
		"users":    []any{map[string]any{"name": "test", "user": user}},
		"contexts": []any{map[string]any{"name": "test", "context": map[string]any{"cluster": "test", "user": "test"}}},
	}
	data, _ := json.Marshal(kc) // JSON is YAML
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

type fixture struct {
	t       *testing.T
	ctx     context.Context
	kube    kubernetes.Interface
	sip     versioned.Interface
	ns      string
	host    *nstest.NetNS
	dataDir string
	conf    []byte
	plugin  *plugin.Plugin
	log     *strings.Builder
}

func newFixture(t *testing.T, subnet string) *fixture {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	env := testenv.Get(t)
	ctx := testenv.Context(t, 2*time.Minute)
	f := &fixture{t: t, ctx: ctx, kube: kubernetes.NewForConfigOrDie(env.Config), sip: versioned.NewForConfigOrDie(env.Config),
		ns: "cni-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")), dataDir: t.TempDir(), log: &strings.Builder{}}
	f.plugin = &plugin.Plugin{Log: f.log}
	if _, err := f.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	host, err := nstest.New("khost")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Close() })
	f.host = host
	f.conf, _ = json.Marshal(map[string]any{
		"cniVersion": "1.1.0", "name": "staticip", "type": "staticip", "dataDir": f.dataDir,
		"kubeconfig": writeKubeconfig(t, env.Config), "quarantine": "0s",
		"ranges": []map[string]any{{"subnet": subnet}},
	})
	return f
}

func (f *fixture) createPod(name string, annotations map[string]string, owners ...metav1.OwnerReference) *corev1.Pod {
	f.t.Helper()
	p, err := f.kube.CoreV1().Pods(f.ns).Create(f.ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations, OwnerReferences: owners},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "pause"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return p
}

func (f *fixture) args(pod *corev1.Pod, netns *nstest.NetNS, containerID string) *skel.CmdArgs {
	return &skel.CmdArgs{ContainerID: containerID, Netns: netns.Path(), IfName: "eth0", StdinData: f.conf,
		Args: fmt.Sprintf("IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s;K8S_POD_UID=%s", pod.Namespace, pod.Name, pod.UID)}
}

func (f *fixture) add(args *skel.CmdArgs) (string, error) {
	var res types.Result
	err := f.host.Do(func(ns.NetNS) error {
		var err error
		res, _, err = testutils.CmdAddWithArgs(args, func() error { return f.plugin.Add(args) })
		return err
	})
	if err != nil {
		return "", err
	}
	r, err := current.NewResultFromResult(res)
	if err != nil {
		return "", err
	}
	return r.IPs[0].Address.IP.String(), nil
}

func (f *fixture) mustAdd(args *skel.CmdArgs) string {
	f.t.Helper()
	ip, err := f.add(args)
	if err != nil {
		f.t.Fatalf("ADD: %v\nlog: %s", err, f.log)
	}
	return ip
}

func (f *fixture) del(args *skel.CmdArgs) {
	f.t.Helper()
	err := f.host.Do(func(ns.NetNS) error {
		return testutils.CmdDelWithArgs(args, func() error { return f.plugin.Del(args) })
	})
	if err != nil {
		f.t.Fatalf("DEL: %v", err)
	}
}

func (f *fixture) reservations() map[string]string {
	f.t.Helper()
	db, err := ipam.Open(ipam.ForNetwork(f.dataDir, "staticip"))
	if err != nil {
		f.t.Fatal(err)
	}
	defer db.Close()
	rs, err := db.Reservations()
	if err != nil {
		f.t.Fatal(err)
	}
	out := map[string]string{}
	for _, r := range rs {
		out[r.IP.String()] = r.Pod.Key()
	}
	return out
}

func (f *fixture) podNS() *nstest.NetNS {
	f.t.Helper()
	n, err := nstest.New("kpod")
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { n.Close() })
	return n
}

func TestAnnotationFromTheAPIServer(t *testing.T) {
	f := newFixture(t, "10.140.0.0/24")
	pod := f.createPod("web-0", map[string]string{podip.AnnotationIPAddress: "10.140.0.77"})
	if ip := f.mustAdd(f.args(pod, f.podNS(), "ctr-web-0")); ip != "10.140.0.77" {
		t.Fatalf("got %s, want the annotated 10.140.0.77", ip)
	}
	bad := f.createPod("web-bad", map[string]string{podip.AnnotationIPAddress: "10.140.0"})
	_, err := f.add(f.args(bad, f.podNS(), "ctr-web-bad"))
	var te *types.Error
	if !errors.As(err, &te) || te.Code != plugin.ErrCodeBadAnnotation ||
		!strings.Contains(te.Msg, fmt.Sprintf("pod %s/web-bad: annotation %s=\"10.140.0\" is not an IP address", f.ns, podip.AnnotationIPAddress)) {
		t.Fatalf("malformed annotation: %v", err)
	}
}

func TestWriteBackOfTheChosenIP(t *testing.T) {
	f := newFixture(t, "10.141.0.0/24")
	enabled := f.createPod("web-0", map[string]string{jkev1.AnnotationEnable: "true"})
	ip := f.mustAdd(f.args(enabled, f.podNS(), "ctr-enabled"))
	got, err := f.kube.CoreV1().Pods(f.ns).Get(f.ctx, "web-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Annotations[podip.AnnotationIPAddress] != ip {
		t.Fatalf("annotation %q, want the chosen %s", got.Annotations[podip.AnnotationIPAddress], ip)
	}
	plain := f.createPod("plain", nil)
	f.mustAdd(f.args(plain, f.podNS(), "ctr-plain"))
	got, _ = f.kube.CoreV1().Pods(f.ns).Get(f.ctx, "plain", metav1.GetOptions{})
	if _, ok := got.Annotations[podip.AnnotationIPAddress]; ok {
		t.Fatal("a pod without static IPs was annotated")
	}
}

func TestDelKeepsTheIPWhileTheStaticIPExists(t *testing.T) {
	f := newFixture(t, "10.142.0.0/24")
	// The pods of EnhancedStatefulSet web: the record's workload (a pod of no or another
	// workload asking for the IP is refused: TestReservationOfAnotherWorkloadIsNotTaken).
	web := metav1.OwnerReference{APIVersion: "jke.jdcloud.com/v1alpha1", Kind: "EnhancedStatefulSet", Name: "web",
		UID: "0f0e0d0c-0000-0000-0000-000000000002", Controller: new(true)}
	pod := f.createPod("web-1", map[string]string{jkev1.AnnotationEnable: "true"}, web)
	if _, err := f.sip.JkeV1().StaticIPs(f.ns).Create(f.ctx, &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Name: "web-1"},
		Spec: jkev1.StaticIPSpec{Pod: "web-1", Kind: "EnhancedStatefulSet", Ref: "web"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	netns := f.podNS()
	ip := f.mustAdd(f.args(pod, netns, "ctr-1"))
	f.del(f.args(pod, netns, "ctr-1"))
	if owner := f.reservations()[ip]; owner != f.ns+"/web-1" {
		t.Fatalf("after DEL with the StaticIP present: %s reserved for %q", ip, owner)
	}
	// Nobody else gets it, neither asked for nor as next free.
	other := f.createPod("other", map[string]string{podip.AnnotationIPAddress: ip})
	if _, err := f.add(f.args(other, f.podNS(), "ctr-other")); err == nil || !strings.Contains(err.Error(), "reserved for pod "+f.ns+"/web-1") {
		t.Fatalf("another pod asking for %s: %v", ip, err)
	}
	// The recreated pod (new UID; its annotation was written back by the first ADD) gets it.
	if err := f.kube.CoreV1().Pods(f.ns).Delete(f.ctx, "web-1", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	again := f.createPod("web-1", map[string]string{jkev1.AnnotationEnable: "true", podip.AnnotationIPAddress: ip}, web)
	if got := f.mustAdd(f.args(again, netns, "ctr-2")); got != ip {
		t.Fatalf("recreated pod got %s, want %s", got, ip)
	}
	// StaticIP released: the next DEL frees the IP for good.
	if err := f.sip.JkeV1().StaticIPs(f.ns).Delete(f.ctx, "web-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.del(f.args(again, netns, "ctr-2"))
	if owner, ok := f.reservations()[ip]; ok {
		t.Fatalf("after DEL without a StaticIP, %s is still reserved for %s", ip, owner)
	}
	if got := f.mustAdd(f.args(other, f.podNS(), "ctr-other-2")); got != ip {
		t.Fatalf("the freed IP was not given to the pod asking for it: %s", got)
	}
}

func TestOutOfRangeNamesTheOwningNode(t *testing.T) {
	f := newFixture(t, "10.143.0.0/24")
	name := "cni-" + fmt.Sprint(time.Now().UnixNano()%1000000)
	if _, err := f.sip.JkeV1().IPRanges().Create(f.ctx, &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: jkev1.IPRangeSpec{CIDR: "10.144.0.0/24", Node: "node-b"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.sip.JkeV1().IPRanges().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	pod := f.createPod("misplaced", map[string]string{podip.AnnotationIPAddress: "10.144.0.9"})
	_, err := f.add(f.args(pod, f.podNS(), "ctr-misplaced"))
	var te *types.Error
	if !errors.As(err, &te) || te.Code != plugin.ErrCodeOutOfRange ||
		!strings.Contains(te.Msg, "10.144.0.9 is outside every range of this node (10.143.0.0/24); it belongs to IPRange "+name+" (10.144.0.0/24) owned by node node-b") {
		t.Fatalf("got %v", err)
	}
}

// A node back from a fence, before its agent's first pass: its database still holds the range
// it served at ownership generation 0, but node failover has moved it to another node at
// generation 1. ADD must not hand out an address of it (the address lives on the other node
// now); it fails naming the move, and leaves no allocation behind. Once the agent has revoked
// the range, ADD fails as for any range the node does not own.
func TestAddRefusesARangeMovedWhileFenced(t *testing.T) {
	f := newFixture(t, "10.145.0.0/24")
	name := "cni-" + fmt.Sprint(time.Now().UnixNano()%1000000)
	if _, err := f.sip.JkeV1().IPRanges().Create(f.ctx, &jkev1.IPRange{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: jkev1.IPRangeSpec{CIDR: "10.145.0.0/24", Node: "node-spare", OwnerGeneration: 1}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.sip.JkeV1().IPRanges().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	// What the agent left before the fence: the range, served at generation 0.
	db, err := ipam.Open(ipam.ForNetwork(f.dataDir, "staticip"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.SetNodeRanges([]ipam.Range{{Subnet: netip.MustParsePrefix("10.145.0.0/24")}}); err != nil {
		t.Fatal(err)
	}
	if err := db.RecordServed(map[string]ipam.ServedRange{name: {Subnet: netip.MustParsePrefix("10.145.0.0/24")}}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	pod := f.createPod("back", nil)
	_, err = f.add(f.args(pod, f.podNS(), "ctr-back"))
	var te *types.Error
	if !errors.As(err, &te) || te.Code != plugin.ErrCodeOutOfRange ||
		!strings.Contains(te.Msg, "belongs to IPRange "+name+", which node failover moved to node \"node-spare\" (owner generation 1, this node served it at 0)") {
		t.Fatalf("ADD on a range moved while fenced: %v, want code %d naming the move", err, plugin.ErrCodeOutOfRange)
	}
	if res := f.reservations(); len(res) != 0 {
		t.Errorf("reservations after the refused ADD: %v", res)
	}
	db, err = ipam.Open(ipam.ForNetwork(f.dataDir, "staticip"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if allocs, _ := db.Allocations(); len(allocs) != 0 {
		t.Errorf("the refused ADD left allocations: %+v", allocs)
	}
}

// TestReservationOfAnotherWorkloadIsNotTaken: the IP a StaticIP keeps for pod web-0 of one
// workload is not given by pod name to a pod web-0 of another workload (the StaticIP
// controller refuses to annotate that pod, item 9 of issue 11): EnhancedStatefulSet web against
// a native StatefulSet web, and a native StatefulSet web against another API group's
// StatefulSet web (OpenKruise's) — the same kind and name, another workload. The other pod gets
// a free IP and the reservation stays for the workload it belongs to, whose pod still gets it.
func TestReservationOfAnotherWorkloadIsNotTaken(t *testing.T) {
	type owner struct{ apiVersion, kind string }
	for i, tc := range []struct {
		name           string
		recordKind     string
		owner, another owner
	}{
		{"ests-vs-sts", "EnhancedStatefulSet",
			owner{"jke.jdcloud.com/v1alpha1", "EnhancedStatefulSet"}, owner{"apps/v1", "StatefulSet"}},
		// A record without spec.apiGroup (written before it existed): its kind implies apps.
		{"other-group", "StatefulSet",
			owner{"apps/v1", "StatefulSet"}, owner{"apps.kruise.io/v1beta1", "StatefulSet"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, fmt.Sprintf("10.143.%d.0/24", i))
			ownedBy := func(o owner, annotations map[string]string) *corev1.Pod {
				t.Helper()
				p, err := f.kube.CoreV1().Pods(f.ns).Create(f.ctx, &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: "web-0", Annotations: annotations, OwnerReferences: []metav1.OwnerReference{{
						APIVersion: o.apiVersion, Kind: o.kind, Name: "web", UID: "0f0e0d0c-0000-0000-0000-000000000001", Controller: new(true)}}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "pause"}}},
				}, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				return p
			}
			gone := func() {
				t.Helper()
				if err := f.kube.CoreV1().Pods(f.ns).Delete(f.ctx, "web-0", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
					t.Fatal(err)
				}
			}
			sip, err := f.sip.JkeV1().StaticIPs(f.ns).Create(f.ctx, &jkev1.StaticIP{ObjectMeta: metav1.ObjectMeta{Name: "web-0"},
				Spec: jkev1.StaticIPSpec{Pod: "web-0", Kind: tc.recordKind, Ref: "web"}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			netns := f.podNS()
			first := ownedBy(tc.owner, map[string]string{jkev1.AnnotationEnable: "true"})
			ip := f.mustAdd(f.args(first, netns, "ctr-own"))
			sip.Spec.IP = ip // what the StaticIP controller records
			if _, err := f.sip.JkeV1().StaticIPs(f.ns).Update(f.ctx, sip, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			f.del(f.args(first, netns, "ctr-own"))
			gone()
			if owner := f.reservations()[ip]; owner != f.ns+"/web-0" {
				t.Fatalf("after DEL %s reserved for %q, want %s/web-0", ip, owner, f.ns)
			}

			other := ownedBy(tc.another, nil)
			got := f.mustAdd(f.args(other, netns, "ctr-other"))
			if got == ip {
				t.Fatalf("pod web-0 of %s %s web got %s, the IP StaticIP web-0 keeps for %s web", tc.another.apiVersion, tc.another.kind, ip, tc.recordKind)
			}
			if owner := f.reservations()[ip]; owner != f.ns+"/web-0" {
				t.Fatalf("the reservation of %s moved: %q", ip, owner)
			}
			f.del(f.args(other, netns, "ctr-other"))
			gone()

			// Asking for that IP by annotation (or CNI_ARGS) is the same question: the reservation
			// under the name web-0 is not this pod's, so the IP it keeps is not free for it.
			asking := ownedBy(tc.another, map[string]string{podip.AnnotationIPAddress: ip})
			if got, err := f.add(f.args(asking, netns, "ctr-asking")); err == nil {
				t.Fatalf("pod web-0 of %s %s web asking for %s got %s, the IP StaticIP web-0 keeps for %s web", tc.another.apiVersion, tc.another.kind, ip, got, tc.recordKind)
			} else if !strings.Contains(err.Error(), "reserved for pod "+f.ns+"/web-0 of another workload") {
				t.Errorf("ADD asking for the IP of another workload: %v, want it named reserved for another workload", err)
			}
			if owner := f.reservations()[ip]; owner != f.ns+"/web-0" {
				t.Fatalf("the reservation of %s moved: %q", ip, owner)
			}
			gone()

			// The workload's own pod, recreated before its annotation is written, still gets it by name.
			again := ownedBy(tc.owner, nil)
			if got := f.mustAdd(f.args(again, netns, "ctr-own-2")); got != ip {
				t.Fatalf("%s web's pod web-0 got %s, want its reserved %s", tc.recordKind, got, ip)
			}
		})
	}
}
