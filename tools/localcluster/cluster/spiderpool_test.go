package cluster

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestSpiderpoolPoolRangeIsInTheNodeSubnetAboveTheNodes(t *testing.T) {
	subnet, first, last, gw, err := spiderpoolPoolRange("172.27.0.0/24")
	if err != nil {
		t.Fatal(err)
	}
	if subnet != "172.27.0.0/24" || first != "172.27.0.64" || last != "172.27.0.254" || gw != "172.27.0.1" {
		t.Errorf("pool %s %s-%s gw %s", subnet, first, last, gw)
	}
	// Node addresses are .11 and up (newLayout); the pool must not cover any.
	l := newLayout(Options{Nodes: 40, NodeSubnet: "172.27.0.0/24", PodCIDR: "10.245.0.0/16", ServiceCIDR: "10.97.0.0/16", Prefix: "c2", StateDir: "/s"})
	for _, n := range l.nodes {
		if last, _ := strconv.Atoi(n.ip[strings.LastIndex(n.ip, ".")+1:]); last >= 64 {
			t.Errorf("node %s at %s is inside the pool", n.name, n.ip)
		}
	}
	if _, _, _, _, err := spiderpoolPoolRange("172.27.0.0/16"); err == nil {
		t.Error("a /16 node subnet was accepted")
	}
}

func TestSpiderpoolConflistIsMacvlanSpiderpoolCoordinatorWithTheNodesPaths(t *testing.T) {
	n := nodeLayout{cniDir: "/var/lib/staticip-c2/cni/node-2"}
	b, err := spiderpoolConflist("c2-localcluster", "eth0", spiderpoolDirs(n))
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		CNIVersion string `json:"cniVersion"`
		Name       string `json:"name"`
		Plugins    []struct {
			Type   string `json:"type"`
			Master string `json:"master"`
			Mode   string `json:"mode"`
			IPAM   struct {
				Type   string `json:"type"`
				Socket string `json:"ipam_unix_socket_path"`
				Log    string `json:"log_file_path"`
				Level  string `json:"log_level"`
			} `json:"ipam"`
			LogOptions struct {
				LogFile  string `json:"logFile"`
				LogLevel string `json:"logLevel"`
			} `json:"logOptions"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(b, &conf); err != nil {
		t.Fatal(err)
	}
	if conf.CNIVersion != "0.3.1" || conf.Name != "c2-localcluster" || len(conf.Plugins) != 2 {
		t.Fatalf("conflist %s", b)
	}
	mv, co := conf.Plugins[0], conf.Plugins[1]
	if mv.Type != "macvlan" || mv.Master != "eth0" || mv.Mode != "bridge" || mv.IPAM.Type != "spiderpool" {
		t.Errorf("first plugin %+v", mv)
	}
	if mv.IPAM.Socket != "/var/lib/staticip-c2/cni/node-2/spidernet/spiderpool.sock" {
		t.Errorf("IPAM socket %s: want the node's own", mv.IPAM.Socket)
	}
	if co.Type != "coordinator" || !strings.HasPrefix(co.LogOptions.LogFile, n.cniDir) || !strings.HasPrefix(mv.IPAM.Log, n.cniDir) {
		t.Errorf("coordinator %+v, IPAM log %s: want logs under the node's CNI dir", co, mv.IPAM.Log)
	}
	// Every peer logs at its own default level (podburst compares them): none is forced.
	if co.LogOptions.LogLevel != "" || mv.IPAM.Level != "" {
		t.Errorf("log level forced (coordinator %q, IPAM %q): want each plugin's default", co.LogOptions.LogLevel, mv.IPAM.Level)
	}
}

func TestSpiderpoolValues(t *testing.T) {
	v, err := spiderpoolValues("/var/lib/staticip-c2", "172.27.0.0/24")
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := yaml.Unmarshal([]byte(v), &got); err != nil {
		t.Fatalf("values are not YAML: %v\n%s", err, v)
	}
	get := func(path string) any {
		var cur any = got
		for _, k := range strings.Split(path, ".") {
			m, ok := cur.(map[string]any)
			if !ok {
				return nil
			}
			cur = m[k]
		}
		return cur
	}
	for path, want := range map[string]any{
		"spiderpoolAgent.tuneSysctlConfig":      false,
		"spiderpoolAgent.image.pullPolicy":      "Never",
		"spiderpoolAgent.image.registry":        "localhost",
		"spiderpoolAgent.image.repository":      "spiderpool/spiderpool-agent",
		"spiderpoolAgent.image.tag":             spiderpoolVersion,
		"spiderpoolController.image.pullPolicy": "Never",
		"spiderpoolController.image.repository": "spiderpool/spiderpool-controller",
		"spiderpoolInit.image.repository":       "spiderpool/spiderpool-controller",
		"spiderpoolController.tls.method":       "auto",
		"spiderpoolController.cleanup.enable":   false,
		"multus.multusCNI.install":              false,
		"multus.enableMultusConfig":             false,
		"plugins.installRdmaCNI":                false,
		"ipam.enableIPv6":                       false,
		"clusterDefaultPool.installIPv4IPPool":  true,
		"clusterDefaultPool.ipv4Subnet":         "172.27.0.0/24",
		"clusterDefaultPool.ipv4Gateway":        "172.27.0.1",
		"clusterDefaultPool.ipv4IPPoolName":     spiderpoolPool,
		"global.cniConfHostPath":                "/var/lib/staticip-c2/spiderpool/net.d",
	} {
		if g := get(path); g != want {
			t.Errorf("%s = %v, want %v", path, g, want)
		}
	}
	if r, _ := get("clusterDefaultPool.ipv4IPRanges").([]any); len(r) != 1 || r[0] != "172.27.0.64-172.27.0.254" {
		t.Errorf("ipv4IPRanges %v", r)
	}
}

func TestSpiderpoolOverlayMountsTheNodesOwnDirs(t *testing.T) {
	o := spiderpoolOverlay("/var/lib/staticip-c2/cni")
	var k struct {
		Patches []struct {
			Patch string `json:"patch"`
		} `json:"patches"`
	}
	if err := yaml.Unmarshal([]byte(o), &k); err != nil || len(k.Patches) != 1 {
		t.Fatalf("overlay %v:\n%s", err, o)
	}
	var ops []struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}
	if err := yaml.Unmarshal([]byte(k.Patches[0].Patch), &ops); err != nil {
		t.Fatal(err)
	}
	var mounts []map[string]any
	for _, op := range ops {
		if op.Path == "/spec/template/spec/containers/0/volumeMounts" {
			for _, m := range op.Value.([]any) {
				mounts = append(mounts, m.(map[string]any))
			}
		}
	}
	want := map[string]string{"/host/opt/cni/bin": "$(SPIDERPOOL_NODE_NAME)/spiderpool", "/var/run/spidernet": "$(SPIDERPOOL_NODE_NAME)/spidernet"}
	for _, m := range mounts {
		if sub, ok := want[m["mountPath"].(string)]; ok {
			if m["subPathExpr"] != sub || m["name"] != "node-cni" {
				t.Errorf("mount %v: want node-cni subPathExpr %s", m, sub)
			}
			delete(want, m["mountPath"].(string))
		}
	}
	if len(want) != 0 {
		t.Errorf("mounts missing: %v", want)
	}
	if strings.Contains(o, "Bidirectional") {
		t.Errorf("Bidirectional propagation needs / to be a shared mount, which it is not here:\n%s", o)
	}
	if !strings.Contains(o, "path: /var/lib/staticip-c2/cni,") {
		t.Errorf("the node-cni volume is not <state>/cni:\n%s", o)
	}
}

func TestHostFilesWithLibrariesTakesTheLoaderAndLibc(t *testing.T) {
	if _, err := os.Stat("/bin/dash"); err != nil {
		t.Skip("no /bin/dash on this machine")
	}
	files, err := hostFilesWithLibraries(map[string]string{"/bin/sh": "/bin/dash"})
	if err != nil {
		t.Fatal(err)
	}
	if files["/bin/sh"] != "/bin/dash" {
		t.Errorf("/bin/sh -> %s", files["/bin/sh"])
	}
	var libc, loader bool
	for p := range files {
		libc = libc || strings.HasSuffix(p, "/libc.so.6")
		loader = loader || strings.Contains(p, "ld-linux")
	}
	if !libc || !loader {
		t.Errorf("files %v: want libc.so.6 and the loader", files)
	}
}
