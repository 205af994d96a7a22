package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/staticip/staticip/internal/reporoot"
	"github.com/staticip/staticip/tools/release/release"
)

// TestAgentIndexCarriesNFTForEveryPlatform builds the release's staticip-agent index for
// linux/amd64 and linux/arm64 (stub Go binaries; the nft layers are the real ones: this
// machine's for its own platform, Debian's arm64 packages for the other, cached in
// _output/debian after a first download of ~14 MB) and checks that every platform's image
// has /nft → /usr/sbin/nft, an ELF file of that platform's machine, with its interpreter.
func TestAgentIndexCarriesNFTForEveryPlatform(t *testing.T) {
	if runtime.GOOS != "linux" || (runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64") {
		t.Skipf("the release builds on linux/amd64 or linux/arm64, not %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	repo, err := reporoot.Find()
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	platforms := []release.Platform{{OS: "linux", Arch: "amd64"}, {OS: "linux", Arch: "arm64"}}
	for _, p := range platforms {
		for _, b := range []string{"staticip-agent", "staticip"} {
			f := filepath.Join(out, "bin", p.OS+"_"+p.Arch, b)
			if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(f, []byte("#!stub "+b+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	var agent release.Image
	for _, im := range release.Images("v1.12.0") {
		if im.Name == "staticip-agent" {
			agent = im
		}
	}
	v, _ := release.ParseVersion("v0.1.0-rc.test")
	meta := release.Meta{Source: "https://example.invalid/staticip", Version: v.Tag, Created: "2026-01-01T00:00:00Z"}
	idx, err := buildIndex(out, filepath.Join(repo, "_output", "debian"), agent, platforms, v, meta, []byte("license"), []byte("notice"),
		map[string]string{"staticip-agent": "stub/staticip-agent", "staticip": "stub/staticip"}) // built: the stubs above
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	if len(manifest.Manifests) != len(platforms) {
		t.Fatalf("%d images, want %d", len(manifest.Manifests), len(platforms))
	}
	for _, desc := range manifest.Manifests {
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		files := map[string]*tar.Header{}
		contents := map[string][]byte{}
		rc := mutate.Extract(img)
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = h
			contents[h.Name], _ = io.ReadAll(tr)
		}
		rc.Close()
		arch := desc.Platform.Architecture
		if h := files["nft"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "usr/sbin/nft" {
			t.Errorf("linux/%s: /nft is %+v, want a link to usr/sbin/nft (knftables execs nft from PATH=/)", arch, h)
		}
		h := files["usr/sbin/nft"]
		if h == nil {
			t.Errorf("linux/%s: the agent image has no /usr/sbin/nft: its outgoing NAT fails", arch)
			continue
		}
		f, err := elf.NewFile(bytes.NewReader(contents["usr/sbin/nft"]))
		if err != nil {
			t.Errorf("linux/%s: /usr/sbin/nft: %v", arch, err)
			continue
		}
		if f.Machine != machines[arch] {
			t.Errorf("linux/%s: /usr/sbin/nft is %s, want %s", arch, f.Machine, machines[arch])
		}
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				interp, _ := io.ReadAll(prog.Open())
				// The loader's path, possibly through /lib's usrmerge link.
				p := string(bytes.TrimRight(interp, "\x00"))[1:]
				if files[p] == nil && files["usr/"+p] == nil {
					t.Errorf("linux/%s: interpreter %s not in the image", arch, p)
				}
			}
		}
		t.Logf("linux/%s: /usr/sbin/nft %s, %d bytes", arch, f.Machine, h.Size)
	}
}
