package imagebuilder

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestBuildWritesLoadableImage builds an image from a file and reads the tarball back the
// way a runtime would: the tag, entrypoint, platform and the binary's bytes must survive.
func TestBuildWritesLoadableImage(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "tool")
	content := []byte("#!not really a binary\n")
	if err := os.WriteFile(bin, content, 0o755); err != nil {
		t.Fatal(err)
	}
	im := Image{Ref: "localhost/staticip/tool:v1", Binary: bin, Path: "/tool", Args: []string{"serve"}}
	path, err := Build(dir, filepath.Join(dir, "out"), im)
	if err != nil {
		t.Fatal(err)
	}
	tag, _ := name.NewTag(im.Ref)
	img, err := tarball.ImageFromPath(path, &tag)
	if err != nil {
		t.Fatalf("read back %s: %v", path, err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || cfg.Architecture != "amd64" {
		t.Errorf("platform %s/%s", cfg.OS, cfg.Architecture)
	}
	if len(cfg.Config.Entrypoint) != 1 || cfg.Config.Entrypoint[0] != "/tool" || len(cfg.Config.Cmd) != 1 || cfg.Config.Cmd[0] != "serve" {
		t.Errorf("entrypoint %v cmd %v", cfg.Config.Entrypoint, cfg.Config.Cmd)
	}
	files := layerFiles(t, img)
	found := bytes.Equal([]byte(files["tool"].content), content) && files["tool"].mode&0o111 != 0
	if !found {
		t.Error("the layer lacks the executable binary at /tool")
	}

	// Same input, same image: rebuilding does not churn image IDs on every node.
	again, err := Build(dir, filepath.Join(dir, "out2"), im)
	if err != nil {
		t.Fatal(err)
	}
	img2, _ := tarball.ImageFromPath(again, &tag)
	d1, _ := img.Digest()
	d2, _ := img2.Digest()
	if d1 != d2 {
		t.Errorf("rebuild changed the digest: %s -> %s", d1, d2)
	}
}

type layerFile struct {
	mode    int64
	content string
	// typeflag and linkname: a directory, a symlink (to linkname) or a file.
	typeflag byte
	linkname string
}

// layerFiles reads the only layer of img: file name → mode and content.
func layerFiles(t *testing.T, img v1.Image) map[string]layerFile {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	return readTar(t, rc)
}

func TestBuildRejectsBadName(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "tool")
	if err := os.WriteFile(bin, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Build(dir, dir, Image{Ref: "Not A Name!", Binary: bin, Path: "/tool"}); err == nil {
		t.Fatal("Build accepted an invalid image name")
	}
	if _, err := Build(dir, dir, Image{Ref: "localhost/x:v1", Binary: filepath.Join(dir, "missing"), Path: "/x"}); err == nil {
		t.Fatal("Build accepted a missing binary")
	}
}

// TestExtraFilesAndStaleness: an image with extra files carries them all, and its tarball is
// stale once any source binary is newer (so `localcluster up` ships what `make build` built).
func TestExtraFilesAndStaleness(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	im := Image{Ref: "localhost/staticip/agent:v1", Binary: write("agent", "agent-bytes"), Path: "/agent",
		Extra: map[string]string{"/plugin": write("plugin", "plugin-bytes")}}
	out := filepath.Join(dir, "out")
	if !im.Stale(out) {
		t.Fatal("no tarball yet, but not stale")
	}
	path, err := Build(dir, out, im)
	if err != nil {
		t.Fatal(err)
	}
	tag, _ := name.NewTag(im.Ref)
	img, err := tarball.ImageFromPath(path, &tag)
	if err != nil {
		t.Fatal(err)
	}
	files := layerFiles(t, img)
	got := map[string]string{"agent": files["agent"].content, "plugin": files["plugin"].content}
	if got["agent"] != "agent-bytes" || got["plugin"] != "plugin-bytes" {
		t.Errorf("layer files %v, want agent and plugin with their bytes", got)
	}
	if im.Stale(out) {
		t.Error("stale right after a build")
	}
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(im.Extra["/plugin"], later, later); err != nil {
		t.Fatal(err)
	}
	if !im.Stale(out) {
		t.Error("an extra file newer than the tarball does not make it stale")
	}
}

// TestSecondTagOfOneBinaryIsAnotherImage: the testserver's v2 (same binary, Env and its own
// tarball) must not overwrite v1's tarball and must be another image, so that an update
// v1 -> v2 changes the image the kubelet runs, not only a tag.
func TestSecondTagOfOneBinaryIsAnotherImage(t *testing.T) {
	var v1, v2 Image
	for _, im := range Defaults(t.TempDir()) {
		switch im.Ref {
		case TestServerImage:
			v1 = im
		case TestServerV2Image:
			v2 = im
		}
	}
	if v1.Ref == "" || v2.Ref == "" {
		t.Fatalf("Defaults lacks %s or %s", TestServerImage, TestServerV2Image)
	}
	if v1.File() == v2.File() {
		t.Fatalf("v1 and v2 share the tarball %s", v1.File())
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "testserver")
	if err := os.WriteFile(bin, []byte("same bytes"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	ids := map[string]string{}
	for _, im := range []Image{v1, v2} {
		im.Package, im.Binary = "", bin
		path, err := Build(dir, out, im)
		if err != nil {
			t.Fatal(err)
		}
		tag, _ := name.NewTag(im.Ref)
		img, err := tarball.ImageFromPath(path, &tag)
		if err != nil {
			t.Fatalf("read back %s: %v", path, err)
		}
		id, err := img.ConfigName()
		if err != nil {
			t.Fatal(err)
		}
		ids[im.Ref] = id.String()
	}
	if ids[v1.Ref] == ids[v2.Ref] {
		t.Errorf("%s and %s are one image (%s)", v1.Ref, v2.Ref, ids[v1.Ref])
	}
}

// TestAliasesNameTheSameImage: an image with aliases is one tarball that a runtime reads back
// under every name, as the same image (tools/conformance imports the remapped and the
// literal upstream name of a test image).
func TestAliasesNameTheSameImage(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "tool")
	if err := os.WriteFile(bin, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	im := Image{Ref: "localhost/e2e/agnhost:2.63.0", Aliases: []string{"registry.k8s.io/e2e-test-images/agnhost:2.63.0"}, Binary: bin, Path: "/agnhost"}
	path, err := Build(dir, filepath.Join(dir, "out"), im)
	if err != nil {
		t.Fatal(err)
	}
	var digests []v1.Hash
	for _, ref := range append([]string{im.Ref}, im.Aliases...) {
		tag, _ := name.NewTag(ref)
		img, err := tarball.ImageFromPath(path, &tag)
		if err != nil {
			t.Fatalf("%s is not in %s: %v", ref, path, err)
		}
		d, _ := img.Digest()
		digests = append(digests, d)
	}
	if digests[0] != digests[1] {
		t.Errorf("the names are different images: %v", digests)
	}
	if _, err := Build(dir, filepath.Join(dir, "bad"), Image{Ref: im.Ref, Aliases: []string{"Bad Name"}, Binary: bin, Path: "/x"}); err == nil {
		t.Error("a bad alias was accepted")
	}
}

// TestEveryImageCarriesTheLicense reads each kind of image the builder makes (a prebuilt
// binary, one with extra files, one over base layers like kind's kube-proxy, and every image
// the local cluster gets, with stand-in binaries) as the runtime's flattened filesystem:
// each must have /LICENSE equal to the repository's LICENSE and /NOTICE, both not
// executable, whatever else is in the image.
func TestEveryImageCarriesTheLicense(t *testing.T) {
	want, err := os.ReadFile("../../../LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(want, []byte("Apache License\n                           Version 2.0, January 2004")) {
		t.Fatal("LICENSE at the repository root is not the Apache License 2.0")
	}
	notice, err := os.ReadFile("../../../NOTICE")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	binDir := filepath.Join(dir, "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		t.Fatal(err)
	}
	stub := func(name string) string {
		p := filepath.Join(binDir, name)
		if err := os.WriteFile(p, []byte("#!stub "+name+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	base, err := Layer(map[string][]byte{"/usr/sbin/iptables": []byte("iptables")})
	if err != nil {
		t.Fatal(err)
	}
	images := []Image{
		{Ref: "localhost/staticip/plain:v1", Binary: stub("plain"), Path: "/plain"},
		{Ref: "localhost/staticip/extra:v1", Binary: stub("extra"), Path: "/extra", Extra: map[string]string{"/other": stub("other")}},
		{Ref: "localhost/staticip/based:v1", Binary: stub("kube-proxy"), Path: "/usr/local/bin/kube-proxy", Base: []v1.Layer{base}},
	}
	for _, im := range Defaults(binDir) {
		if im.Package != "" { // built from source: the same layer code as a prebuilt binary
			im.Package, im.Binary = "", stub(filepath.Base(im.Path)+"-from-source")
		}
		for _, src := range im.Sources() {
			if _, err := os.Stat(src); err != nil {
				stub(filepath.Base(src))
			}
		}
		images = append(images, im)
	}
	for _, im := range images {
		path, err := Build(dir, filepath.Join(dir, "out"), im)
		if err != nil {
			t.Fatalf("%s: %v", im.Ref, err)
		}
		tag, _ := name.NewTag(im.Ref)
		img, err := tarball.ImageFromPath(path, &tag)
		if err != nil {
			t.Fatal(err)
		}
		fs := flattened(t, img)
		for file, content := range map[string][]byte{"LICENSE": want, "NOTICE": notice} {
			got, ok := fs[file]
			switch {
			case !ok:
				t.Errorf("%s: no /%s in the image", im.Ref, file)
			case got.content != string(content):
				t.Errorf("%s: /%s differs from the repository's %s", im.Ref, file, file)
			case got.mode&0o111 != 0:
				t.Errorf("%s: /%s is executable (mode %o)", im.Ref, file, got.mode)
			}
		}
	}
}

// TestAnImageMayNotReplaceTheLicense: a file of the image's own at /LICENSE is refused, not
// silently shipped instead of the project's.
func TestAnImageMayNotReplaceTheLicense(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "tool")
	if err := os.WriteFile(bin, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	im := Image{Ref: "localhost/staticip/tool:v1", Binary: bin, Path: "/tool", Extra: map[string]string{"/LICENSE": bin}}
	if _, err := Build(dir, filepath.Join(dir, "out"), im); err == nil {
		t.Fatal("an image with its own /LICENSE was built")
	}
}

// flattened is the filesystem a runtime unpacks from img (all layers): name → mode, content.
func flattened(t *testing.T, img v1.Image) map[string]layerFile {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	return readTar(t, rc)
}

// readTar reads a tar stream into name → mode, content.
func readTar(t *testing.T, r io.Reader) map[string]layerFile {
	t.Helper()
	files := map[string]layerFile{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		files[h.Name] = layerFile{mode: h.Mode, content: string(b), typeflag: h.Typeflag, linkname: h.Linkname}
	}
}

// TestAgentImageRunsNFT (issue 36): the agent image's nft — this machine's, with the libraries
// and the loader it needs — runs inside the image's own filesystem (chroot), and applies a
// table in a fresh network namespace: what knftables execs for the agent's outgoing NAT.
func TestAgentImageRunsNFT(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for chroot and a network namespace")
	}
	if _, err := os.Stat(AgentNFT); err != nil {
		t.Fatalf("%s: %v (Debian nftables, tools/deps/cni.list: make deps)", AgentNFT, err)
	}
	dir := t.TempDir()
	binDir := filepath.Join(dir, "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		t.Fatal(err)
	}
	var agent Image
	for _, im := range Defaults(binDir) {
		if im.Ref == AgentImage {
			agent = im
		}
	}
	for _, f := range []string{"staticip-agent", "staticip"} {
		if err := os.WriteFile(filepath.Join(binDir, f), []byte("#!stub\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	path, err := Build(dir, filepath.Join(dir, "out"), agent)
	if err != nil {
		t.Fatal(err)
	}
	tag, _ := name.NewTag(agent.Ref)
	img, err := tarball.ImageFromPath(path, &tag)
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "rootfs")
	extractLayer(t, flattened(t, img), root)
	out, err := exec.Command("chroot", root, "/nft", "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("nft in the agent image: %v: %s", err, out)
	}
	t.Logf("in the image: %s", bytes.TrimSpace(out))
	cmd := exec.Command("unshare", "--net", "chroot", root, "/nft", "-f", "-")
	cmd.Stdin = strings.NewReader(`table inet staticip {
	set s { type ipv4_addr; flags interval; elements = { 10.0.0.0/8 }; }
	chain postrouting { type nat hook postrouting priority srcnat; ip saddr @s ip daddr != @s masquerade; }
}
`)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft -f in the agent image, in a new network namespace: %v: %s", err, out)
	}
}
