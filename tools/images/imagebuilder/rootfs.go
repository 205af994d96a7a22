package imagebuilder

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// RootfsLayer is a layer with files of a root filesystem (rootfs "/": this machine's): each of
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
	return c.addELFDeps(content)
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

var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/lib", "/usr/lib"}

func (c *collector) addELFDeps(content []byte) error {
	f, err := elf.NewFile(bytes.NewReader(content))
	if err != nil {
		return nil // not an ELF file
	}
	defer f.Close()
	libs, _ := f.ImportedLibraries()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			interp, _ := io.ReadAll(prog.Open())
			if err := c.add(strings.TrimRight(string(interp), "\x00")); err != nil {
				return err
			}
		}
	}
	for _, lib := range libs {
		found := false
		for _, dir := range libDirs {
			if _, err := os.Stat(filepath.Join(c.rootfs, dir, lib)); err == nil {
				if err := c.add(path.Join(dir, lib)); err != nil {
					return err
				}
				found = true
				break
			}
		}
		if !found {
			return fmt.Errorf("library %s not found in %s", lib, c.rootfs)
		}
	}
	return nil
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
