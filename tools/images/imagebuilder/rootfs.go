package imagebuilder

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// ExecutablesLayer is RootfsLayer of files with each file also linked from / (an image's
// PATH=/ finds it): the agent's nft, which knftables execs.
func ExecutablesLayer(rootfs string, files []string, opts ...tarball.LayerOption) (v1.Layer, error) {
	links := map[string]string{}
	for _, f := range files {
		links["/"+path.Base(f)] = strings.TrimPrefix(path.Clean(f), "/")
	}
	return RootfsLayer(rootfs, files, links, opts...)
}

// RootfsLayer is a layer with files of a root filesystem (rootfs "/": this machine's; or a
// tree of another architecture's Debian packages, DebianRoot): each of
// paths — a file or a whole directory — with every shared library its ELF files need
// (DT_NEEDED, transitively) and the dynamic loader, each with the symlinks on its way
// (usrmerge's /lib -> usr/lib); links are more symlinks, name in the image → target. E.g.
// kube-proxy's iptables on kind (tools/kind/images) and the agent's nft (Image.HostFiles).
func RootfsLayer(rootfs string, paths []string, links map[string]string, opts ...tarball.LayerOption) (v1.Layer, error) {
	c := &collector{rootfs: rootfs, entries: map[string]*tar.Header{}, contents: map[string][]byte{}}
	for _, p := range paths {
		if err := c.add(p); err != nil {
			return nil, err
		}
	}
	for name, target := range links {
		name = strings.TrimPrefix(path.Clean(name), "/")
		c.entries[name] = &tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777}
	}
	return c.layer(opts...)
}

type collector struct {
	rootfs   string
	entries  map[string]*tar.Header // name in the layer (no leading slash) -> header
	contents map[string][]byte
	// missing, when set, collects the libraries not found instead of failing (DebianRoot
	// fetches their packages).
	missing *[]missingLib
}

// add puts p (absolute inside the rootfs) into the layer: the symlinks and directories on
// its way, and the file (with its ELF dependencies) or the whole directory it names.
func (c *collector) add(p string) error {
	resolved, err := c.resolve(p, 0)
	if err != nil {
		return err
	}
	host := filepath.Join(c.rootfs, resolved)
	st, err := os.Lstat(host)
	if err != nil {
		return err
	}
	name := strings.TrimPrefix(resolved, "/")
	if _, done := c.entries[name]; done {
		return nil
	}
	if st.IsDir() {
		c.entries[name] = &tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o755}
		list, err := os.ReadDir(host)
		if err != nil {
			return err
		}
		for _, e := range list {
			if err := c.add(path.Join(resolved, e.Name())); err != nil {
				return err
			}
		}
		return nil
	}
	content, err := os.ReadFile(host)
	if err != nil {
		return err
	}
	c.entries[name] = &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: int64(st.Mode().Perm()), Size: int64(len(content))}
	c.contents[name] = content
	return c.addELFDeps(name, content)
}

// resolve walks p component by component inside the rootfs, recording every symlink it
// passes (so the layer has it too), and returns the path it ends at.
func (c *collector) resolve(p string, depth int) (string, error) {
	if depth > 40 {
		return "", fmt.Errorf("%s: too many symlinks", p)
	}
	parts := strings.Split(strings.Trim(path.Clean(p), "/"), "/")
	cur := "/"
	for i, part := range parts {
		next := path.Join(cur, part)
		st, err := os.Lstat(filepath.Join(c.rootfs, next))
		if err != nil {
			return "", err
		}
		if st.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink(filepath.Join(c.rootfs, next))
			if err != nil {
				return "", err
			}
			name := strings.TrimPrefix(next, "/")
			c.entries[name] = &tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777}
			if !path.IsAbs(target) {
				target = path.Join(cur, target)
			}
			return c.resolve(path.Join(append([]string{target}, parts[i+1:]...)...), depth+1)
		}
		if i < len(parts)-1 {
			name := strings.TrimPrefix(next, "/")
			if _, ok := c.entries[name]; !ok {
				c.entries[name] = &tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o755}
			}
		}
		cur = next
	}
	return cur, nil
}

// multiarchTriplets are Debian's library directories per machine (/lib/<triplet>): a root
// of another architecture (DebianRoot) has its libraries there.
var multiarchTriplets = map[elf.Machine]string{
	elf.EM_X86_64: "x86_64-linux-gnu", elf.EM_AARCH64: "aarch64-linux-gnu", elf.EM_ARM: "arm-linux-gnueabihf",
	elf.EM_386: "i386-linux-gnu", elf.EM_PPC64: "powerpc64le-linux-gnu", elf.EM_S390: "s390x-linux-gnu",
	elf.EM_RISCV: "riscv64-linux-gnu",
}

// libDirs are where the loader of an ELF file of machine m looks for its libraries.
func libDirs(m elf.Machine) []string {
	var dirs []string
	if t, ok := multiarchTriplets[m]; ok {
		dirs = append(dirs, "/lib/"+t, "/usr/lib/"+t)
	}
	return append(dirs, "/lib64", "/lib", "/usr/lib")
}

// missingLib is a DT_NEEDED entry (or the PT_INTERP path) of file that the rootfs lacks.
type missingLib struct{ file, soname string }

func (c *collector) addELFDeps(name string, content []byte) error {
	f, err := elf.NewFile(bytes.NewReader(content))
	if err != nil {
		return nil // not an ELF file
	}
	defer f.Close()
	libs, err := f.ImportedLibraries()
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			raw, _ := io.ReadAll(prog.Open())
			interp := strings.TrimRight(string(raw), "\x00")
			err := c.add(interp)
			if errors.Is(err, fs.ErrNotExist) && c.missing != nil {
				*c.missing = append(*c.missing, missingLib{file: "/" + name, soname: interp})
				continue
			}
			if err != nil {
				return fmt.Errorf("/%s: its interpreter: %w", name, err)
			}
		}
	}
	for _, lib := range libs {
		dir := c.findLib(f.Machine, lib)
		if dir == "" {
			if c.missing != nil {
				*c.missing = append(*c.missing, missingLib{file: "/" + name, soname: lib})
				continue
			}
			return fmt.Errorf("library %s (needed by /%s, %s) not found in %s", lib, name, f.Machine, c.rootfs)
		}
		if err := c.add(path.Join(dir, lib)); err != nil {
			return err
		}
	}
	return nil
}

// findLib is the first library directory of the rootfs with soname for machine m (a
// library of another machine, e.g. an i386 one in /lib, is passed over), "" if none.
func (c *collector) findLib(m elf.Machine, soname string) string {
	for _, dir := range libDirs(m) {
		f, err := elf.Open(filepath.Join(c.rootfs, dir, soname))
		if err != nil {
			continue
		}
		same := f.Machine == m
		f.Close()
		if same {
			return dir
		}
	}
	return ""
}

func (c *collector) layer(opts ...tarball.LayerOption) (v1.Layer, error) {
	names := make([]string, 0, len(c.entries))
	for n := range c.entries {
		names = append(names, n)
	}
	sort.Strings(names) // parents before children, and a stable digest
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		h := *c.entries[n]
		h.ModTime = time.Unix(0, 0)
		if err := tw.WriteHeader(&h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(c.contents[n]); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }, opts...)
}
