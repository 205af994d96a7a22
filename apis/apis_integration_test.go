package apis_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	"github.com/staticip/staticip/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestControlPlaneIsReal proves the tests talk to the kube-apiserver built from the pinned module.
func TestControlPlaneIsReal(t *testing.T) {
	env := testenv.Get(t)
	if !strings.HasPrefix(env.ServerVersion, "v1.36.") {
		t.Fatalf("API server version %q, want the pinned v1.36.x", env.ServerVersion)
	}
}

func dynamicClients(t *testing.T) (dynamic.Interface, meta.RESTMapper) {
	t.Helper()
	env := testenv.Get(t)
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	return dynamic.NewForConfigOrDie(env.Config), mapper
}

func readObjects(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if err.Error() == "EOF" {
				break
			}
			t.Fatalf("%s: %v", path, err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
	return out
}

// containsAll reports the first path at which want has a value got lacks or differs in:
// read back equal means nothing the user wrote was pruned or changed (the server may add
// defaults and metadata).
func containsAll(path string, want, got interface{}) string {
	switch w := want.(type) {
	case map[string]interface{}:
		g, ok := got.(map[string]interface{})
		if !ok {
			return fmt.Sprintf("%s: want object, got %T", path, got)
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				return fmt.Sprintf("%s.%s: missing (pruned?)", path, k)
			}
			if d := containsAll(path+"."+k, wv, gv); d != "" {
				return d
			}
		}
		return ""
	case []interface{}:
		g, ok := got.([]interface{})
		if !ok || len(g) != len(w) {
			return fmt.Sprintf("%s: want list of %d, got %v", path, len(w), got)
		}
		for i := range w {
			if d := containsAll(fmt.Sprintf("%s[%d]", path, i), w[i], g[i]); d != "" {
				return d
			}
		}
		return ""
	default:
		// JSON numbers decode as int64 or float64 depending on the path taken.
		if fmt.Sprint(want) != fmt.Sprint(got) {
			return fmt.Sprintf("%s: want %v, got %v", path, want, got)
		}
		return ""
	}
}

func examplesDir(t *testing.T) string {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "manifests", "examples")
}

// TestExamplesApplyAndReadBack creates every published example unchanged and reads it back.
func TestExamplesApplyAndReadBack(t *testing.T) {
	dyn, mapper := dynamicClients(t)
	ctx := testenv.Context(t, 2*time.Minute)
	files, _ := filepath.Glob(filepath.Join(examplesDir(t), "*.yaml"))
	if len(files) < 5 {
		t.Fatalf("found %d examples, want the 5 published ones", len(files))
	}
	for _, f := range files {
		for _, obj := range readObjects(t, f) {
			t.Run(filepath.Base(f), func(t *testing.T) {
				gvk := obj.GroupVersionKind()
				m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
				if err != nil {
					t.Fatalf("no REST mapping for %s (CRD not installed?): %v", gvk, err)
				}
				ns := obj.GetNamespace()
				if ns == "" && m.Scope.Name() == meta.RESTScopeNameNamespace {
					ns = "default"
				}
				res := dyn.Resource(m.Resource).Namespace(ns)
				if _, err := res.Create(ctx, obj.DeepCopy(), metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
					t.Fatalf("create %s %s: %v", gvk.Kind, obj.GetName(), err)
				}
				got, err := res.Get(ctx, obj.GetName(), metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if d := containsAll("spec", obj.Object["spec"], got.Object["spec"]); d != "" {
					t.Errorf("%s %s does not read back equal: %s", gvk.Kind, obj.GetName(), d)
				}
				for k, v := range obj.GetAnnotations() {
					if got.GetAnnotations()[k] != v {
						t.Errorf("annotation %s lost", k)
					}
				}
			})
		}
	}
}

// TestSharedExamplesUnchanged keeps manifests/examples identical to the design's examples
// (../shared/examples beside the repository) wherever that folder exists.
func TestSharedExamplesUnchanged(t *testing.T) {
	root, _ := testenv.RepoRoot()
	shared := filepath.Join(root, "..", "shared", "examples")
	files, _ := filepath.Glob(filepath.Join(shared, "*.yaml"))
	if len(files) == 0 {
		t.Skipf("no %s beside this checkout; manifests/examples is the reference", shared)
	}
	for _, f := range files {
		want, _ := os.ReadFile(f)
		got, err := os.ReadFile(filepath.Join(examplesDir(t), filepath.Base(f)))
		if err != nil || !bytes.Equal(want, got) {
			t.Errorf("manifests/examples/%s differs from %s", filepath.Base(f), f)
		}
	}
}

type badCase struct {
	name string
	// obj is created; when update is set, obj is created first and then update is applied to it.
	obj    string
	update func(u *unstructured.Unstructured)
	// wantField is the field path the API server must name in its error.
	wantField string
}

const (
	sipTmpl    = "apiVersion: jke.jdcloud.com/v1\nkind: StaticIP\nmetadata: {name: %s, namespace: default}\nspec: %s\n"
	iprTmpl    = "apiVersion: jke.jdcloud.com/v1\nkind: IPRange\nmetadata: {name: %s}\nspec: %s\n"
	ippTmpl    = "apiVersion: jke.jdcloud.com/v1\nkind: IPPool\nmetadata: {name: %s}\nspec: %s\n"
	nfoTmpl    = "apiVersion: jke.jdcloud.com/v1alpha1\nkind: NodeFailover\nmetadata: {name: %s}\nspec: %s\n"
	estsTmpl   = "apiVersion: jke.jdcloud.com/v1alpha1\nkind: EnhancedStatefulSet\nmetadata: {name: %s, namespace: default}\nspec: {selector: {matchLabels: {a: b}}, template: {metadata: {labels: {a: b}}, spec: {containers: [{name: c, image: i}]}}, %s}\n"
	gridTmpl   = "apiVersion: superedge.io/v1\nkind: %s\nmetadata: {name: %s, namespace: default}\nspec: {gridUniqKey: %s, template: %s}\n"
	sgKeysTmpl = "apiVersion: superedge.io/v1\nkind: ServiceGrid\nmetadata: {name: %s, namespace: default}\nspec: {gridUniqKey: zone, template: {ports: [{port: 80}]}, topologyKeys: %s}\n"
	bgpcTmpl   = "apiVersion: jke.jdcloud.com/v1\nkind: BGPConfiguration\nmetadata: {name: %s}\nspec: %s\n"
	bgppTmpl   = "apiVersion: jke.jdcloud.com/v1\nkind: BGPPeer\nmetadata: {name: %s}\nspec: %s\n"
	podTmplOK  = "{selector: {matchLabels: {a: b}}, template: {metadata: {labels: {a: b}}, spec: {containers: [{name: c, image: i}]}}}"
)

func badCases() []badCase {
	return []badCase{
		{name: "staticip-ip-not-an-ip", obj: fmt.Sprintf(sipTmpl, "bad-ip-1", "{ip: not-an-ip}"), wantField: "spec.ip"},
		{name: "staticip-ip-octet-out-of-range", obj: fmt.Sprintf(sipTmpl, "bad-ip-2", "{ip: 10.10.0.300}"), wantField: "spec.ip"},
		{name: "staticip-ip-with-prefix", obj: fmt.Sprintf(sipTmpl, "bad-ip-3", "{ip: 10.10.0.1/24}"), wantField: "spec.ip"},
		{name: "staticip-ip-changes-once-set", obj: fmt.Sprintf(sipTmpl, "bad-ip-4", "{ip: 10.10.0.4}"),
			update: func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, "10.10.0.5", "spec", "ip")
			}, wantField: "spec"},
		{name: "staticip-ip-removed-once-set", obj: fmt.Sprintf(sipTmpl, "bad-ip-5", "{ip: 10.10.0.6}"),
			update: func(u *unstructured.Unstructured) { unstructured.RemoveNestedField(u.Object, "spec", "ip") }, wantField: "spec"},
		// Dual-stack records (spec.ips, one address per family, the first = ip).
		{name: "staticip-ips-two-of-one-family", obj: fmt.Sprintf(sipTmpl, "bad-ips-1", "{ip: 10.10.0.8, ips: [10.10.0.8, 10.10.0.9]}"), wantField: "spec"},
		{name: "staticip-ips-three", obj: fmt.Sprintf(sipTmpl, "bad-ips-2", "{ip: 10.10.0.8, ips: [10.10.0.8, 'fd00::8', 10.10.0.9]}"), wantField: "spec.ips"},
		{name: "staticip-ips-not-an-ip", obj: fmt.Sprintf(sipTmpl, "bad-ips-3", "{ip: 10.10.0.8, ips: [10.10.0.8, 'fd00::x']}"), wantField: "spec.ips[1]"},
		{name: "staticip-ips-first-is-not-ip", obj: fmt.Sprintf(sipTmpl, "bad-ips-4", "{ip: 10.10.0.8, ips: ['fd00::8', 10.10.0.8]}"), wantField: "spec"},
		{name: "staticip-ips-without-ip", obj: fmt.Sprintf(sipTmpl, "bad-ips-5", "{ips: [10.10.0.8]}"), wantField: "spec"},
		{name: "staticip-ips-change-once-dual", obj: fmt.Sprintf(sipTmpl, "bad-ips-6", "{ip: 10.10.0.8, ips: [10.10.0.8, 'fd00::8']}"),
			update: func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedStringSlice(u.Object, []string{"10.10.0.8", "fd00::9"}, "spec", "ips")
			}, wantField: "spec"},
		{name: "staticip-ips-removed-once-dual", obj: fmt.Sprintf(sipTmpl, "bad-ips-7", "{ip: 10.10.0.8, ips: [10.10.0.8, 'fd00::8']}"),
			update: func(u *unstructured.Unstructured) { unstructured.RemoveNestedField(u.Object, "spec", "ips") }, wantField: "spec"},
		{name: "staticip-apigroup-with-version", obj: fmt.Sprintf(sipTmpl, "bad-group-1", "{apiGroup: apps/v1, kind: StatefulSet, ref: web}"), wantField: "spec.apiGroup"},
		{name: "staticip-apigroup-uppercase", obj: fmt.Sprintf(sipTmpl, "bad-group-2", "{apiGroup: Apps, kind: StatefulSet, ref: web}"), wantField: "spec.apiGroup"},
		{name: "staticip-bad-retention", obj: fmt.Sprintf(sipTmpl, "bad-ret", "{retentionPolicy: {whenScaled: Maybe}}"), wantField: "spec.retentionPolicy.whenScaled"},
		{name: "staticip-bad-phase", obj: fmt.Sprintf(sipTmpl, "bad-phase", "{ip: 10.10.0.7}"),
			update: func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, "Lost", "status", "phase")
			}, wantField: "status.phase"},
		{name: "iprange-cidr-missing", obj: fmt.Sprintf(iprTmpl, "bad-cidr-0", "{node: n1}"), wantField: "spec.cidr"},
		{name: "iprange-cidr-not-a-cidr", obj: fmt.Sprintf(iprTmpl, "bad-cidr-1", "{cidr: 10.1.0.0}"), wantField: "spec.cidr"},
		{name: "iprange-cidr-garbage", obj: fmt.Sprintf(iprTmpl, "bad-cidr-2", "{cidr: ten.one/24}"), wantField: "spec.cidr"},
		{name: "iprange-cidr-not-aligned", obj: fmt.Sprintf(iprTmpl, "bad-cidr-3", "{cidr: 10.1.0.1/24}"), wantField: "spec.cidr"},
		{name: "iprange-ipv6-not-aligned", obj: fmt.Sprintf(iprTmpl, "bad-cidr-4", "{cidr: 'fd00::1/64'}"), wantField: "spec.cidr"},
		{name: "iprange-gateway-outside", obj: fmt.Sprintf(iprTmpl, "bad-gw-1", "{cidr: 10.1.0.0/24, gateway: 10.2.0.1}"), wantField: "spec.gateway"},
		{name: "iprange-gateway-not-ip", obj: fmt.Sprintf(iprTmpl, "bad-gw-2", "{cidr: 10.1.0.0/24, gateway: gw}"), wantField: "spec.gateway"},
		{name: "iprange-exclude-not-ip", obj: fmt.Sprintf(iprTmpl, "bad-ex-1", "{cidr: 10.1.0.0/24, excludeIPs: [10.1.0.9, nine]}"), wantField: "spec.excludeIPs[1]"},
		{name: "iprange-exclude-outside", obj: fmt.Sprintf(iprTmpl, "bad-ex-2", "{cidr: 10.1.0.0/24, excludeIPs: [10.9.0.9]}"), wantField: "spec.excludeIPs"},
		{name: "iprange-rangestart-outside", obj: fmt.Sprintf(iprTmpl, "bad-rs", "{cidr: 10.1.0.0/24, rangeStart: 10.1.1.1}"), wantField: "spec.rangeStart"},
		{name: "iprange-ownergeneration-goes-down", obj: fmt.Sprintf(iprTmpl, "bad-og-1", "{cidr: 10.1.0.0/24, node: n1, ownerGeneration: 3}"),
			update: func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, int64(2), "spec", "ownerGeneration")
			}, wantField: "spec.ownerGeneration"},
		{name: "iprange-ownergeneration-removed", obj: fmt.Sprintf(iprTmpl, "bad-og-2", "{cidr: 10.1.0.0/24, node: n1, ownerGeneration: 3}"),
			update: func(u *unstructured.Unstructured) {
				unstructured.RemoveNestedField(u.Object, "spec", "ownerGeneration")
			},
			wantField: "spec.ownerGeneration"},
		{name: "iprange-ownergeneration-negative", obj: fmt.Sprintf(iprTmpl, "bad-og-3", "{cidr: 10.1.0.0/24, ownerGeneration: -1}"), wantField: "spec.ownerGeneration"},
		{name: "ippool-cidrs-missing", obj: fmt.Sprintf(ippTmpl, "bad-ipp-0", "{blockSize: 24}"), wantField: "spec.cidrs"},
		{name: "ippool-cidrs-empty", obj: fmt.Sprintf(ippTmpl, "bad-ipp-1", "{cidrs: []}"), wantField: "spec.cidrs"},
		{name: "ippool-cidr-not-a-cidr", obj: fmt.Sprintf(ippTmpl, "bad-ipp-2", "{cidrs: [10.244.0.0]}"), wantField: "spec.cidrs[0]"},
		{name: "ippool-cidr-not-aligned", obj: fmt.Sprintf(ippTmpl, "bad-ipp-3", "{cidrs: [10.244.0.1/16]}"), wantField: "spec.cidrs[0]"},
		{name: "ippool-blocksize-wider-than-cidr", obj: fmt.Sprintf(ippTmpl, "bad-ipp-4", "{cidrs: [10.244.0.0/16], blockSize: 12}"), wantField: "spec.blockSize"},
		{name: "ippool-blocksize-beyond-ipv4", obj: fmt.Sprintf(ippTmpl, "bad-ipp-5", "{cidrs: [10.244.0.0/16], blockSize: 64}"), wantField: "spec.blockSize"},
		{name: "ippool-too-many-blocks", obj: fmt.Sprintf(ippTmpl, "bad-ipp-6", "{cidrs: ['fd00::/48']}"), wantField: "spec.cidrs"},
		{name: "ippool-mixed-families", obj: fmt.Sprintf(ippTmpl, "bad-ipp-7", "{cidrs: [10.244.0.0/16, 'fd00::/104']}"), wantField: "spec.cidrs"},
		{name: "ippool-exclude-outside", obj: fmt.Sprintf(ippTmpl, "bad-ipp-8", "{cidrs: [10.244.0.0/16], excludeIPs: [10.9.0.1]}"), wantField: "spec.excludeIPs"},
		{name: "ippool-bad-mode", obj: fmt.Sprintf(ippTmpl, "bad-ipp-9", "{cidrs: [10.244.0.0/16], mode: Random}"), wantField: "spec.mode"},
		{name: "ippool-cidr-removed", obj: fmt.Sprintf(ippTmpl, "bad-ipp-10", "{cidrs: [10.244.0.0/16, 10.245.0.0/16]}"),
			update: func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedStringSlice(u.Object, []string{"10.244.0.0/16"}, "spec", "cidrs")
			}, wantField: "spec.cidrs"},
		{name: "ippool-cidr-changed", obj: fmt.Sprintf(ippTmpl, "bad-ipp-11", "{cidrs: [10.244.0.0/16]}"),
			update: func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedStringSlice(u.Object, []string{"10.246.0.0/16"}, "spec", "cidrs")
			}, wantField: "spec.cidrs"},
		{name: "ippool-blocksize-changed", obj: fmt.Sprintf(ippTmpl, "bad-ipp-12", "{cidrs: [10.244.0.0/16], blockSize: 24}"),
			update: func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, int64(25), "spec", "blockSize")
			}, wantField: "spec.blockSize"},
		{name: "ippool-blocksize-set-later", obj: fmt.Sprintf(ippTmpl, "bad-ipp-13", "{cidrs: [10.244.0.0/16]}"),
			update: func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, int64(24), "spec", "blockSize")
			}, wantField: "spec.blockSize"},
		// BGP (issue 36): bad addresses, AS numbers and timers never reach an agent.
		// A rule on the object itself (it sees metadata.name) names no field: the API server says "<nil>".
		{name: "bgpconfiguration-not-default", obj: fmt.Sprintf(bgpcTmpl, "other", "{asNumber: 64512}"), wantField: "<nil>"},
		{name: "bgpconfiguration-asn-zero", obj: fmt.Sprintf(bgpcTmpl, "default", "{asNumber: 0}"), wantField: "spec.asNumber"},
		{name: "bgpconfiguration-asn-beyond-4-bytes", obj: fmt.Sprintf(bgpcTmpl, "default", "{asNumber: 4294967296}"), wantField: "spec.asNumber"},
		{name: "bgpconfiguration-holdtime-too-short", obj: fmt.Sprintf(bgpcTmpl, "default", "{asNumber: 64512, holdTime: 2s}"), wantField: "spec.holdTime"},
		{name: "bgpconfiguration-keepalive-over-third", obj: fmt.Sprintf(bgpcTmpl, "default", "{asNumber: 64512, holdTime: 9s, keepaliveTime: 4s}"), wantField: "spec"},
		{name: "bgpconfiguration-restart-time-too-long", obj: fmt.Sprintf(bgpcTmpl, "default", "{asNumber: 64512, gracefulRestart: {enabled: true, restartTime: 2h}}"), wantField: "spec.gracefulRestart.restartTime"},
		{name: "bgpconfiguration-listen-port-negative", obj: fmt.Sprintf(bgpcTmpl, "default", "{asNumber: 64512, listenPort: -1}"), wantField: "spec.listenPort"},
		{name: "bgppeer-ip-not-an-ip", obj: fmt.Sprintf(bgppTmpl, "bad-bgpp-1", "{peerIP: router, asNumber: 64513}"), wantField: "spec.peerIP"},
		{name: "bgppeer-ip-with-prefix", obj: fmt.Sprintf(bgppTmpl, "bad-bgpp-2", "{peerIP: 192.0.2.1/24, asNumber: 64513}"), wantField: "spec.peerIP"},
		{name: "bgppeer-ip-loopback", obj: fmt.Sprintf(bgppTmpl, "bad-bgpp-3", "{peerIP: 127.0.0.1, asNumber: 64513}"), wantField: "spec.peerIP"},
		{name: "bgppeer-ip-multicast", obj: fmt.Sprintf(bgppTmpl, "bad-bgpp-4", "{peerIP: 224.0.0.5, asNumber: 64513}"), wantField: "spec.peerIP"},
		{name: "bgppeer-ip-unspecified", obj: fmt.Sprintf(bgppTmpl, "bad-bgpp-5", "{peerIP: '::', asNumber: 64513}"), wantField: "spec.peerIP"},
		{name: "bgppeer-asn-missing", obj: fmt.Sprintf(bgppTmpl, "bad-bgpp-6", "{peerIP: 192.0.2.1}"), wantField: "spec.asNumber"},
		{name: "bgppeer-asn-negative", obj: fmt.Sprintf(bgppTmpl, "bad-bgpp-7", "{peerIP: 192.0.2.1, asNumber: -5}"), wantField: "spec.asNumber"},
		{name: "bgppeer-multihop-zero", obj: fmt.Sprintf(bgppTmpl, "bad-bgpp-8", "{peerIP: 192.0.2.1, asNumber: 64513, ebgpMultihop: 0}"), wantField: "spec.ebgpMultihop"},
		{name: "bgppeer-multihop-over-255", obj: fmt.Sprintf(bgppTmpl, "bad-bgpp-9", "{peerIP: 192.0.2.1, asNumber: 64513, ebgpMultihop: 256}"), wantField: "spec.ebgpMultihop"},
		{name: "bgppeer-password-key-missing", obj: fmt.Sprintf(bgppTmpl, "bad-bgpp-10", "{peerIP: 192.0.2.1, asNumber: 64513, password: {secretKeyRef: {name: s}}}"), wantField: "spec.password.secretKeyRef.key"},
		{name: "bgppeer-port-zero", obj: fmt.Sprintf(bgppTmpl, "bad-bgpp-11", "{peerIP: 192.0.2.1, asNumber: 64513, port: 0}"), wantField: "spec.port"},
		{name: "nodefailover-name-not-node", obj: fmt.Sprintf(nfoTmpl, "bad-nfo-1", "{node: other}"), wantField: "spec.node"},
		{name: "nodefailover-node-changes", obj: fmt.Sprintf(nfoTmpl, "bad-nfo-2", "{node: bad-nfo-2}"),
			update: func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, "n9", "spec", "node")
			}, wantField: "spec.node"},
		{name: "nodefailover-target-changes", obj: fmt.Sprintf(nfoTmpl, "bad-nfo-3", "{node: bad-nfo-3, target: spare-1}"),
			update: func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, "spare-2", "spec", "target")
			}, wantField: "spec.target"},
		{name: "nodefailover-target-removed", obj: fmt.Sprintf(nfoTmpl, "bad-nfo-4", "{node: bad-nfo-4, target: spare-1}"),
			update:    func(u *unstructured.Unstructured) { unstructured.RemoveNestedField(u.Object, "spec", "target") },
			wantField: "spec.target"},
		{name: "nodefailover-target-is-node", obj: fmt.Sprintf(nfoTmpl, "bad-nfo-5", "{node: bad-nfo-5, target: bad-nfo-5}"), wantField: "spec.target"},
		{name: "nodefailover-bad-phase", obj: fmt.Sprintf(nfoTmpl, "bad-nfo-6", "{node: bad-nfo-6}"),
			update: func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, "Halfway", "status", "phase")
			}, wantField: "status.phase"},
		{name: "nodefailover-moved-range-generation-zero", obj: fmt.Sprintf(nfoTmpl, "bad-nfo-7", "{node: bad-nfo-7}"),
			update: func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedSlice(u.Object, []any{map[string]any{"name": "r", "cidr": "10.1.0.0/24",
					"fromNode": "bad-nfo-7", "toNode": "s", "ownerGeneration": int64(0)}}, "status", "movedRanges")
			}, wantField: "status.movedRanges[0].ownerGeneration"},
		{name: "ests-negative-partition", obj: fmt.Sprintf(estsTmpl, "bad-part", "updateStrategy: {rollingUpdate: {partition: -1}}"), wantField: "spec.updateStrategy.rollingUpdate.partition"},
		{name: "ests-maxunavailable-zero", obj: fmt.Sprintf(estsTmpl, "bad-mu-1", "updateStrategy: {rollingUpdate: {maxUnavailable: 0}}"), wantField: "spec.updateStrategy.rollingUpdate.maxUnavailable"},
		{name: "ests-maxunavailable-zero-percent", obj: fmt.Sprintf(estsTmpl, "bad-mu-2", "updateStrategy: {rollingUpdate: {maxUnavailable: '0%'}}"), wantField: "spec.updateStrategy.rollingUpdate.maxUnavailable"},
		{name: "ests-maxunavailable-over-100-percent", obj: fmt.Sprintf(estsTmpl, "bad-mu-3", "updateStrategy: {rollingUpdate: {maxUnavailable: '150%'}}"), wantField: "spec.updateStrategy.rollingUpdate.maxUnavailable"},
		{name: "ests-maxunavailable-negative", obj: fmt.Sprintf(estsTmpl, "bad-mu-4", "updateStrategy: {rollingUpdate: {maxUnavailable: -2}}"), wantField: "spec.updateStrategy.rollingUpdate.maxUnavailable"},
		{name: "ests-maxunavailable-word", obj: fmt.Sprintf(estsTmpl, "bad-mu-5", "updateStrategy: {rollingUpdate: {maxUnavailable: two}}"), wantField: "spec.updateStrategy.rollingUpdate.maxUnavailable"},
		{name: "ests-bad-pod-update-policy", obj: fmt.Sprintf(estsTmpl, "bad-pup", "updateStrategy: {rollingUpdate: {podUpdatePolicy: Sometimes}}"), wantField: "spec.updateStrategy.rollingUpdate.podUpdatePolicy"},
		{name: "ests-rollingupdate-with-ondelete", obj: fmt.Sprintf(estsTmpl, "bad-ondel", "updateStrategy: {type: OnDelete, rollingUpdate: {partition: 1}}"), wantField: "spec.updateStrategy"},
		{name: "ests-negative-replicas", obj: fmt.Sprintf(estsTmpl, "bad-rep", "replicas: -1"), wantField: "spec.replicas"},
		{name: "ests-bad-pod-management", obj: fmt.Sprintf(estsTmpl, "bad-pmp", "podManagementPolicy: Random"), wantField: "spec.podManagementPolicy"},
		// Immutable after creation, like a StatefulSet's (CEL transition rules on oldSelf).
		{name: "ests-selector-changed", obj: fmt.Sprintf(estsTmpl, "imm-sel", "serviceName: s"),
			update: func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, "c", "spec", "selector", "matchLabels", "a")
				_ = unstructured.SetNestedField(u.Object, "c", "spec", "template", "metadata", "labels", "a")
			}, wantField: "spec.selector"},
		{name: "ests-servicename-changed", obj: fmt.Sprintf(estsTmpl, "imm-svc", "serviceName: s"),
			update: func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, "other", "spec", "serviceName")
			}, wantField: "spec.serviceName"},
		{name: "ests-servicename-added", obj: fmt.Sprintf(estsTmpl, "imm-svc2", "replicas: 1"),
			update: func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, "late", "spec", "serviceName")
			}, wantField: "spec.serviceName"},
		{name: "ests-podmanagementpolicy-changed", obj: fmt.Sprintf(estsTmpl, "imm-pmp", "podManagementPolicy: Parallel"),
			update: func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, "OrderedReady", "spec", "podManagementPolicy")
			}, wantField: "spec.podManagementPolicy"},
		{name: "ests-volumeclaimtemplates-added", obj: fmt.Sprintf(estsTmpl, "imm-vct", "replicas: 1"),
			update: func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedSlice(u.Object, []any{map[string]any{"metadata": map[string]any{"name": "data"},
					"spec": map[string]any{"accessModes": []any{"ReadWriteOnce"}, "resources": map[string]any{"requests": map[string]any{"storage": "1Gi"}}}}},
					"spec", "volumeClaimTemplates")
			}, wantField: "spec.volumeClaimTemplates"},
		{name: "deploymentgrid-key-with-space", obj: fmt.Sprintf(gridTmpl, "DeploymentGrid", "bad-key-1", "'zone 1'", podTmplOK), wantField: "spec.gridUniqKey"},
		{name: "statefulsetgrid-key-empty", obj: fmt.Sprintf(gridTmpl, "StatefulSetGrid", "bad-key-2", "''", podTmplOK), wantField: "spec.gridUniqKey"},
		{name: "statefulsetgrid-key-leading-dash", obj: fmt.Sprintf(gridTmpl, "StatefulSetGrid", "bad-key-3", "-zone", podTmplOK), wantField: "spec.gridUniqKey"},
		{name: "servicegrid-key-bad-prefix", obj: fmt.Sprintf(gridTmpl, "ServiceGrid", "bad-key-4", "'Bad_Prefix/zone'", "{ports: [{port: 80}]}"), wantField: "spec.gridUniqKey"},
		{name: "servicegrid-key-two-slashes", obj: fmt.Sprintf(gridTmpl, "ServiceGrid", "bad-key-5", "'a.io/b/c'", "{ports: [{port: 80}]}"), wantField: "spec.gridUniqKey"},
		// spec.topologyKeys: the rule of superedgev1.ValidateTopologyKeys, as CEL.
		{name: "servicegrid-topologykeys-duplicate", obj: fmt.Sprintf(sgKeysTmpl, "bad-keys-1", `[zone, zone]`), wantField: "spec.topologyKeys"},
		{name: "servicegrid-topologykeys-empty-key", obj: fmt.Sprintf(sgKeysTmpl, "bad-keys-2", `[""]`), wantField: "spec.topologyKeys[0]"},
		{name: "servicegrid-topologykeys-any-not-last", obj: fmt.Sprintf(sgKeysTmpl, "bad-keys-3", `["*", zone]`), wantField: "spec.topologyKeys"},
		{name: "servicegrid-topologykeys-empty-list", obj: fmt.Sprintf(sgKeysTmpl, "bad-keys-4", `[]`), wantField: "spec.topologyKeys"},
		{name: "deploymentgrid-key-missing", obj: "apiVersion: superedge.io/v1\nkind: DeploymentGrid\nmetadata: {name: bad-key-6, namespace: default}\nspec: {template: " + podTmplOK + "}\n", wantField: "spec.gridUniqKey"},
		// A selector that does not match the template's labels is not rejected here: a CEL rule
		// over the pod template's unbounded label map exceeds the CRD cost budget 100x. The grid
		// controllers report it (Ready=False InvalidSpec, an Event, nothing created):
		// controllers/test/integration TestGridInvalidSpec.
		{name: "deploymentgrid-selector-missing", obj: fmt.Sprintf(gridTmpl, "DeploymentGrid", "bad-sel-4", "zone",
			"{template: {metadata: {labels: {a: b}}, spec: {containers: [{name: c, image: i}]}}}"), wantField: "spec.template.selector"},
		{name: "deploymentgrid-selector-changed", obj: fmt.Sprintf(gridTmpl, "DeploymentGrid", "bad-sel-5", "zone", podTmplOK),
			update: func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedStringMap(u.Object, map[string]string{"a": "b", "n": "m"}, "spec", "template", "template", "metadata", "labels")
				_ = unstructured.SetNestedStringMap(u.Object, map[string]string{"a": "b", "n": "m"}, "spec", "template", "selector", "matchLabels")
			}, wantField: "spec.template.selector"},
		{name: "statefulsetgrid-servicename-changed", obj: fmt.Sprintf(gridTmpl, "StatefulSetGrid", "bad-svc-1", "zone",
			"{serviceName: one, selector: {matchLabels: {a: b}}, template: {metadata: {labels: {a: b}}, spec: {containers: [{name: c, image: i}]}}}"),
			update: func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, "two", "spec", "template", "serviceName")
			}, wantField: "spec.template.serviceName"},
		{name: "statefulsetgrid-podmanagement-changed", obj: fmt.Sprintf(gridTmpl, "StatefulSetGrid", "bad-pmp-1", "zone", podTmplOK),
			update: func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, "Parallel", "spec", "template", "podManagementPolicy")
			}, wantField: "spec.template.podManagementPolicy"},
	}
}

// TestInvalidObjectsRejected: the API server itself (OpenAPI + CEL in the CRDs) rejects
// bad objects and names the offending field.
func TestInvalidObjectsRejected(t *testing.T) {
	dyn, mapper := dynamicClients(t)
	ctx := testenv.Context(t, 2*time.Minute)
	for _, tc := range badCases() {
		t.Run(tc.name, func(t *testing.T) {
			dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(tc.obj), 4096)
			obj := &unstructured.Unstructured{}
			if err := dec.Decode(&obj.Object); err != nil {
				t.Fatalf("test object does not parse: %v", err)
			}
			gvk := obj.GroupVersionKind()
			m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				t.Fatal(err)
			}
			var res dynamic.ResourceInterface = dyn.Resource(m.Resource)
			if m.Scope.Name() == meta.RESTScopeNameNamespace {
				res = dyn.Resource(m.Resource).Namespace("default")
			}
			if tc.update != nil {
				created, err := res.Create(ctx, obj, metav1.CreateOptions{})
				if err != nil {
					t.Fatalf("the valid original must be accepted: %v", err)
				}
				tc.update(created)
				if strings.HasPrefix(tc.wantField, "status") {
					_, err = res.UpdateStatus(ctx, created, metav1.UpdateOptions{})
				} else {
					_, err = res.Update(ctx, created, metav1.UpdateOptions{})
				}
				assertInvalid(t, err, tc.wantField)
				return
			}
			_, err = res.Create(ctx, obj, metav1.CreateOptions{})
			assertInvalid(t, err, tc.wantField)
		})
	}
}

func assertInvalid(t *testing.T, err error, wantField string) {
	t.Helper()
	if err == nil {
		t.Fatalf("accepted; want Invalid on %s", wantField)
	}
	if !apierrors.IsInvalid(err) {
		t.Fatalf("want an Invalid error on %s, got %v", wantField, err)
	}
	status, ok := err.(apierrors.APIStatus)
	if !ok || status.Status().Details == nil {
		t.Fatalf("no details in %v", err)
	}
	var fields []string
	for _, c := range status.Status().Details.Causes {
		fields = append(fields, c.Field)
		if c.Field == wantField {
			t.Logf("rejected as expected: %s", c.Message)
			return
		}
	}
	sort.Strings(fields)
	t.Fatalf("error names fields %v, want %s: %v", fields, wantField, err)
}

// TestStaticIPIPSetOnce: a Pending StaticIP is created without an IP, gets one later, and
// keeps it from then on.
func TestStaticIPIPSetOnce(t *testing.T) {
	dyn, mapper := dynamicClients(t)
	ctx := testenv.Context(t, time.Minute)
	m, err := mapper.RESTMapping(schema.GroupKind{Group: "jke.jdcloud.com", Kind: "StaticIP"}, "v1")
	if err != nil {
		t.Fatal(err)
	}
	res := dyn.Resource(m.Resource).Namespace("default")
	obj := &unstructured.Unstructured{}
	if err := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(fmt.Sprintf(sipTmpl, "set-once", "{pod: set-once}")), 4096).Decode(&obj.Object); err != nil {
		t.Fatal(err)
	}
	created, err := res.Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a StaticIP without ip must be accepted: %v", err)
	}
	_ = unstructured.SetNestedField(created.Object, "10.10.0.77", "spec", "ip")
	updated, err := res.Update(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("setting the ip of a Pending StaticIP must be accepted: %v", err)
	}
	_ = unstructured.SetNestedField(updated.Object, "node-9", "spec", "node")
	moved, err := res.Update(ctx, updated, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("moving the StaticIP to another node (failover) must be accepted: %v", err)
	}
	// A single-stack record gains its other family's address once (a second pool family).
	_ = unstructured.SetNestedStringSlice(moved.Object, []string{"10.10.0.77", "fd00::77"}, "spec", "ips")
	dual, err := res.Update(ctx, moved, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("a single-stack record gaining its IPv6 address must be accepted: %v", err)
	}
	_ = unstructured.SetNestedField(dual.Object, "node-8", "spec", "node")
	if _, err := res.Update(ctx, dual, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("moving a dual-stack StaticIP (failover) must be accepted: %v", err)
	}
}

// TestIPPoolDefaultsAndGrowth: a minimal pool gets its defaults (Blocks, None, 5m; blockSize
// stays unset and means /24 or /120), and growing it by a CIDR is accepted.
func TestIPPoolDefaultsAndGrowth(t *testing.T) {
	dyn, mapper := dynamicClients(t)
	ctx := testenv.Context(t, time.Minute)
	m, err := mapper.RESTMapping(schema.GroupKind{Group: "jke.jdcloud.com", Kind: "IPPool"}, "v1")
	if err != nil {
		t.Fatal(err)
	}
	res := dyn.Resource(m.Resource)
	for _, tc := range []struct{ name, spec string }{
		{"ipp-ok-v4", "{cidrs: [10.244.0.0/16]}"},
		{"ipp-ok-v6", "{cidrs: ['fd00:10:244::/104'], excludeIPs: ['fd00:10:244::5']}"},
		{"ipp-ok-full", "{cidrs: [10.250.0.0/20], blockSize: 26, mode: NodePodCIDR, gatewayPolicy: FirstHost, releaseAfter: 30s, nodeSelector: {matchLabels: {pool: a}}, excludeIPs: [10.250.0.1]}"},
	} {
		dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(fmt.Sprintf(ippTmpl, tc.name, tc.spec)), 4096)
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); err != nil {
			t.Fatal(err)
		}
		created, err := res.Create(ctx, obj, metav1.CreateOptions{FieldValidation: "Strict"})
		if err != nil {
			t.Fatalf("%s: a valid pool must be accepted: %v", tc.name, err)
		}
		if tc.name == "ipp-ok-v4" {
			spec, _, _ := unstructured.NestedMap(created.Object, "spec")
			if spec["mode"] != "Blocks" || spec["gatewayPolicy"] != "None" || spec["releaseAfter"] != "5m" || spec["blockSize"] != nil {
				t.Errorf("defaults: got %v, want mode Blocks, gatewayPolicy None, releaseAfter 5m, no blockSize", spec)
			}
		}
		cidrs, _, _ := unstructured.NestedStringSlice(created.Object, "spec", "cidrs")
		grown := append(cidrs, map[bool]string{true: "fd00:10:245::/104", false: "10.251.0.0/20"}[strings.Contains(cidrs[0], ":")])
		_ = unstructured.SetNestedStringSlice(created.Object, grown, "spec", "cidrs")
		if _, err := res.Update(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Errorf("%s: adding a CIDR (pool growth) must be accepted: %v", tc.name, err)
		}
	}
}

// TestCRDsServed: every kind the design names is served, with its short name, as discovery
// (and so kubectl) sees it.
func TestCRDsServed(t *testing.T) {
	env := testenv.Get(t)
	dc := discovery.NewDiscoveryClientForConfigOrDie(env.Config)
	want := map[schema.GroupVersionKind]string{
		{Group: "jke.jdcloud.com", Version: "v1", Kind: "StaticIP"}:                  "sip",
		{Group: "jke.jdcloud.com", Version: "v1", Kind: "IPRange"}:                   "ipr",
		{Group: "jke.jdcloud.com", Version: "v1", Kind: "IPPool"}:                    "ipp",
		{Group: "jke.jdcloud.com", Version: "v1", Kind: "BGPConfiguration"}:          "bgpconfig",
		{Group: "jke.jdcloud.com", Version: "v1", Kind: "BGPPeer"}:                   "bgpp",
		{Group: "jke.jdcloud.com", Version: "v1", Kind: "BGPNodeStatus"}:             "bgpns",
		{Group: "jke.jdcloud.com", Version: "v1alpha1", Kind: "EnhancedStatefulSet"}: "ests",
		{Group: "jke.jdcloud.com", Version: "v1alpha1", Kind: "NodeFailover"}:        "nfo",
		{Group: "superedge.io", Version: "v1", Kind: "DeploymentGrid"}:               "dg",
		{Group: "superedge.io", Version: "v1", Kind: "StatefulSetGrid"}:              "ssg",
		{Group: "superedge.io", Version: "v1", Kind: "ServiceGrid"}:                  "sg",
	}
	for gvk, short := range want {
		list, err := dc.ServerResourcesForGroupVersion(gvk.GroupVersion().String())
		if err != nil {
			t.Errorf("%s not served: %v", gvk.GroupVersion(), err)
			continue
		}
		found := false
		for _, r := range list.APIResources {
			if r.Kind == gvk.Kind && !strings.Contains(r.Name, "/") {
				found = true
				if !reflect.DeepEqual(r.ShortNames, []string{short}) {
					t.Errorf("%s short names %v, want [%s]", gvk.Kind, r.ShortNames, short)
				}
			}
		}
		if !found {
			t.Errorf("%s not served", gvk)
		}
	}
}
