package imagebuilder

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/staticip/staticip/internal/reporoot"
)

func TestParseDepends(t *testing.T) {
	for _, tc := range []struct {
		field string
		want  []string
	}{
		{"", nil},
		{"libnftables1 (= 1.0.6-2+deb12u2), libc6 (>= 2.34), libedit2 (>= 3.1-20130611-0)", []string{"libnftables1", "libc6", "libedit2"}},
		{"libgcc-s1, libc6:any (>= 2.36) | libc6.1", []string{"libgcc-s1", "libc6"}},
		{"libmd0 (>= 1.0.3-2),\nlibc6", []string{"libmd0", "libc6"}}, // folded (ParseControl joins with \n)
	} {
		got := ParseDepends(tc.field)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseDepends(%q) = %q, want %q", tc.field, got, tc.want)
		}
	}
}

func TestParseDpkgSearch(t *testing.T) {
	for _, tc := range []struct {
		out, file, want string
		wantErr         bool
	}{
		{"nftables: /usr/sbin/nft\n", "/usr/sbin/nft", "nftables", false},
		{"libnftables1:amd64: /usr/lib/x86_64-linux-gnu/libnftables.so.1\n", "/usr/lib/x86_64-linux-gnu/libnftables.so.1", "libnftables1", false},
		{"diversion by x from: /usr/sbin/nft\nnftables: /usr/sbin/nft\n", "/usr/sbin/nft", "nftables", false},
		{"a, b: /usr/share/doc\n", "/usr/share/doc", "", true},
		{"", "/usr/sbin/nft", "", true},
	} {
		got, err := ParseDpkgSearch(tc.out, tc.file)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseDpkgSearch(%q) = %q, %v; want %q (error %v)", tc.out, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestParseControl(t *testing.T) {
	f := ParseControl("Package: nftables\nVersion: 1.0.6-2+deb12u2\nDescription: x\n more\n\nPackage: other\n")
	want := map[string]string{"Package": "nftables", "Version": "1.0.6-2+deb12u2", "Description": "x\nmore"}
	if !reflect.DeepEqual(f, want) {
		t.Errorf("ParseControl = %q, want %q", f, want)
	}
}

// TestArm64AgentNFTLayer builds the release's linux/arm64 agent nft layer (tools/release:
// DebianRoot of arm64, then ExecutablesLayer) and checks it by reading the layer alone:
// /nft leads to /usr/sbin/nft, an aarch64 ELF whose interpreter is in the layer, and every
// DT_NEEDED of it and of each library, transitively, is an aarch64 ELF in the layer's
// library directories. The first run downloads about 14 MB from deb.debian.org (apt's arm64
// index and 10 packages, a few seconds); later runs find the tree in _output/debian and only
// check apt's index. With qemu-aarch64-static (make test-release fetches it into
// _output/debian/qemu) the arm64 nft also runs: `nft --version` in the layer's filesystem.
func TestArm64AgentNFTLayer(t *testing.T) {
	if _, err := exec.LookPath("apt-get"); err != nil {
		t.Skip("no apt-get: not a Debian machine")
	}
	repo, err := reporoot.Find()
	if err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(repo, "_output", "debian")
	var logs []string
	opts := DebianRootOptions{CacheDir: cache, Arch: "arm64", Files: []string{AgentNFT},
		Logf: func(format string, args ...any) {
			logs = append(logs, strings.TrimSpace(strings.ReplaceAll(format, "%s", "")))
			t.Logf(format, args...)
		}}
	root, pkgs, err := DebianRoot(opts)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pkgs {
		names = append(names, p.Name)
		if p.Arch != "arm64" {
			t.Errorf("package %s is not arm64", p)
		}
	}
	// What nft 1.0.6 needs, by its ELF files (readelf -d of Debian's arm64 packages):
	// nft -> libnftables1, libedit2, libc6; libnftables1 -> libmnl0, libnftnl11, libxtables12,
	// libgmp10, libjansson4; libedit2 -> libtinfo6, libbsd0 -> libmd0. Nothing else is fetched.
	want := []string{"libbsd0", "libc6", "libedit2", "libgmp10", "libjansson4", "libmd0", "libmnl0", "libnftables1", "libnftnl11", "libtinfo6", "libxtables12", "nftables"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("packages = %v, want %v", names, want)
	}
	// A second call takes the cached tree, offline: no apt-get update, no download.
	logs = nil
	offline := opts
	offline.Offline = true
	root2, _, err := DebianRoot(offline)
	if err != nil {
		t.Fatal(err)
	}
	if root2 != root || len(logs) != 1 || !strings.HasPrefix(logs[0], ": cached tree") {
		t.Errorf("second DebianRoot: %s (first %s), logs %q: want the cached tree", root2, root, logs)
	}

	layer, err := ExecutablesLayer(root, []string{AgentNFT})
	if err != nil {
		t.Fatal(err)
	}
	files := layerPaths(t, layer)
	nft := lookupInLayer(t, files, "/nft")
	if nft != AgentNFT {
		t.Errorf("/nft leads to %s, want %s", nft, AgentNFT)
	}
	checked := map[string]bool{}
	var check func(p string)
	check = func(p string) {
		if checked[p] {
			return
		}
		checked[p] = true
		f, err := elf.NewFile(bytes.NewReader([]byte(files[p].content)))
		if err != nil {
			t.Errorf("%s in the layer: not an ELF file: %v", p, err)
			return
		}
		defer f.Close()
		if f.Machine != elf.EM_AARCH64 {
			t.Errorf("%s: machine %s, want EM_AARCH64", p, f.Machine)
		}
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				interp, _ := io.ReadAll(prog.Open())
				check(lookupInLayer(t, files, strings.TrimRight(string(interp), "\x00")))
			}
		}
		needed, err := f.ImportedLibraries()
		if err != nil {
			t.Errorf("%s: %v", p, err)
		}
		for _, lib := range needed {
			found := ""
			for _, dir := range []string{"/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib", "/usr/lib"} {
				if _, ok := files[path.Join(dir, lib)]; ok {
					found = path.Join(dir, lib)
					break
				}
			}
			if found == "" {
				t.Errorf("%s needs %s: not in the layer", p, lib)
				continue
			}
			check(lookupInLayer(t, files, found))
		}
	}
	check(nft)
	var libs []string
	for p := range checked {
		libs = append(libs, path.Base(p))
	}
	slices.Sort(libs)
	t.Logf("aarch64 ELF files of the layer, each with its DT_NEEDED present: %s", strings.Join(libs, " "))
	if len(checked) < 12 { // nft, the loader and 10 libraries
		t.Errorf("only %d ELF files checked: %v", len(checked), libs)
	}

	t.Run("qemu", func(t *testing.T) {
		qemu := filepath.Join(cache, "qemu", "usr", "bin", "qemu-aarch64-static")
		if _, err := os.Stat(qemu); err != nil {
			if qemu, err = exec.LookPath("qemu-aarch64-static"); err != nil {
				t.Skip("no qemu-aarch64-static (make test-release fetches Debian's into _output/debian/qemu; binfmt is not needed): the arm64 nft is checked by its ELF files only")
			}
		}
		if os.Geteuid() != 0 {
			t.Skip("needs root for chroot")
		}
		dir := t.TempDir()
		extractLayer(t, files, dir)
		content, err := os.ReadFile(qemu)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "qemu-aarch64-static"), content, 0o755); err != nil {
			t.Fatal(err)
		}
		// qemu-user runs the arm64 loader, which loads the layer's libraries: no binfmt
		// registration, and nothing of this machine's inside the chroot but qemu itself.
		// nft 1.0.6 opens its netlink socket before it reads its arguments, and qemu-user
		// emulates no NETLINK_NETFILTER socket: so nft's own "Unable to initialize Netlink
		// socket" is as far as it gets here — after the loader mapped every library and nft's
		// main ran. A library missing from the layer stops it earlier, in the loader.
		run := func() string {
			out, _ := exec.Command("chroot", dir, "/qemu-aarch64-static", "/nft", "--version").CombinedOutput()
			return string(bytes.TrimSpace(out))
		}
		out := run()
		if !strings.HasPrefix(out, "nftables v") && !strings.Contains(out, "Unable to initialize Netlink socket: Protocol not supported") {
			t.Fatalf("arm64 nft --version under qemu: %q, want its version or its own netlink error", out)
		}
		t.Logf("arm64 nft in the layer, under qemu-user: %s", out)
		lib := lookupInLayer(t, files, "/usr/lib/aarch64-linux-gnu/libnftnl.so.11")
		if err := os.Remove(filepath.Join(dir, lib)); err != nil {
			t.Fatal(err)
		}
		if out := run(); !strings.Contains(out, "error while loading shared libraries: libnftnl.so.11") {
			t.Fatalf("without %s: %q, want the loader's error", lib, out)
		}
	})
}

// layerPaths reads a layer: absolute path (no trailing slash) → its entry.
func layerPaths(t *testing.T, layer v1.Layer) map[string]layerFile {
	t.Helper()
	rc, err := layer.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]layerFile{}
	for name, f := range readTar(t, rc) {
		files["/"+strings.TrimSuffix(name, "/")] = f
	}
	return files
}

// lookupInLayer follows p's symlinks inside the layer to a regular file and returns its path.
func lookupInLayer(t *testing.T, files map[string]layerFile, p string) string {
	t.Helper()
	for depth := 0; depth < 40; depth++ {
		parts := strings.Split(strings.Trim(path.Clean(p), "/"), "/")
		cur := "/"
		resolved := true
		for i, part := range parts {
			next := path.Join(cur, part)
			f, ok := files[next]
			if !ok {
				t.Errorf("%s: %s is not in the layer", p, next)
				return p
			}
			if f.typeflag == tar.TypeSymlink {
				target := f.linkname
				if !path.IsAbs(target) {
					target = path.Join(cur, target)
				}
				p = path.Join(append([]string{target}, parts[i+1:]...)...)
				resolved = false
				break
			}
			cur = next
		}
		if resolved {
			if files[cur].typeflag != tar.TypeReg {
				t.Errorf("%s is not a regular file in the layer", cur)
			}
			return cur
		}
	}
	t.Errorf("%s: too many symlinks", p)
	return p
}

// extractLayer writes a layer's entries (readTar's or layerPaths') under root.
func extractLayer(t *testing.T, files map[string]layerFile, root string) {
	t.Helper()
	var names []string
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names) // parents first
	for _, name := range names {
		f, p := files[name], filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch f.typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeSymlink:
			err = os.Symlink(f.linkname, p)
		case tar.TypeReg:
			err = os.WriteFile(p, []byte(f.content), os.FileMode(f.mode)&0o777)
		}
		if err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
	}
}
