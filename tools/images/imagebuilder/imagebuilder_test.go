package imagebuilder

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
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
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	found := false
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == "tool" {
			got, _ := io.ReadAll(tr)
			found = bytes.Equal(got, content) && h.Mode&0o111 != 0
		}
	}
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
	layers, _ := img.Layers()
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		got[h.Name] = string(b)
	}
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

// TestDefaultsHaveDistinctTarballs: two default images with one tarball name would overwrite
// each other in the image directory, and the nodes would get only one of them (testserver
// v1 and v2 share a binary name).
func TestDefaultsHaveDistinctTarballs(t *testing.T) {
	seen := map[string]string{}
	for _, im := range Defaults("/bin") {
		if other, ok := seen[im.File()]; ok {
			t.Errorf("%s and %s both write %s", other, im.Ref, im.File())
		}
		seen[im.File()] = im.Ref
	}
	if seen["testserver-v2.tar"] != TestServerImageV2 {
		t.Errorf("testserver v2 tarball: %v", seen)
	}
}
