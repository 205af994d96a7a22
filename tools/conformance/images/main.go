// Command images builds, without a registry, the test images the upstream conformance specs
// of tools/conformance run, under the names the suite asks for: every image twice in one
// tarball, under the registry --kube-test-repo-list remaps to (--registry) and under its
// literal upstream name (some specs name it literally), and writes that repo list.
//
//	tools/run.sh conformance/images --rootfs-layer L.tar --rootfs DIR --agnhost BIN --out DIR
//
// agnhost, its previous version, nginx and glibc-dns-testing are agnhost on a Debian userland
// (tools/conformance/rootfs.sh: the specs run sh, curl, nc, dig, getent, awk in them);
// busybox is Debian's busybox-static with its applets; pause is tools/images/pause.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/staticip/staticip/internal/reporoot"
	"github.com/staticip/staticip/tools/images/imagebuilder"
)

// testImage is one image of k8s.io/kubernetes/test/utils/image's list.
type testImage struct {
	upstream string // registry.k8s.io/... as the suite names it without a repo list
	name     string // name and tag below the remapped registry
}

// Upstream registries (test/utils/image/manifest.go) and the images the selected specs use.
const (
	e2eRegistry = "registry.k8s.io/e2e-test-images"
	gcRegistry  = "registry.k8s.io"
	debianPath  = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

func main() {
	rootfsLayer := flag.String("rootfs-layer", "", "tar of the Debian userland (rootfs.sh's directory, without dev/proc/sys)")
	rootfs := flag.String("rootfs", "", "the Debian userland directory (busybox-static, for the busybox image)")
	agnhost := flag.String("agnhost", "", "agnhost binary built from k8s.io/kubernetes/test/images/agnhost")
	agnhostSrc := flag.String("agnhost-src", "", "k8s.io/kubernetes/test/images/agnhost in the module cache (porter/localhost.crt, .key)")
	registry := flag.String("registry", "localhost/conformance", "registry every upstream registry is remapped to")
	out := flag.String("out", "", "directory for the image tarballs and repo-list.yaml")
	flag.Parse()
	if err := run(*rootfsLayer, *rootfs, *agnhost, *agnhostSrc, *registry, *out); err != nil {
		fmt.Fprintln(os.Stderr, "conformance images:", err)
		os.Exit(1)
	}
}

func run(rootfsLayer, rootfs, agnhost, agnhostSrc, registry, out string) error {
	root, err := reporoot.Find()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	debian, err := tarball.LayerFromFile(rootfsLayer, tarball.WithCompressedCaching)
	if err != nil {
		return err
	}
	agnhostFiles, err := agnhostLayer()
	if err != nil {
		return err
	}
	busyboxBin := filepath.Join(rootfs, "bin", "busybox")
	applets, err := busyboxApplets(busyboxBin)
	if err != nil {
		return err
	}
	extra := map[string]string{
		"/localhost.crt": filepath.Join(agnhostSrc, "porter", "localhost.crt"),
		"/localhost.key": filepath.Join(agnhostSrc, "porter", "localhost.key"),
	}
	onDebian := func(env string, args ...string) imagebuilder.Image {
		return imagebuilder.Image{
			Binary: agnhost, Path: "/agnhost", Args: args, Extra: extra,
			Env:  []string{debianPath, env},
			Base: []v1.Layer{debian, agnhostFiles},
		}
	}
	type build struct {
		ti testImage
		im imagebuilder.Image
	}
	// Env tells the agnhost images apart (own image IDs), as upstream's are different images.
	builds := []build{
		{testImage{e2eRegistry + "/agnhost:2.63.0", "agnhost:2.63.0"}, onDebian("IMAGE=agnhost:2.63.0", "pause")},
		{testImage{e2eRegistry + "/agnhost:2.55", "agnhost:2.55"}, onDebian("IMAGE=agnhost:2.55", "pause")},
		// nginx serves :80 (the EndpointSlice/Endpoints specs only need a Ready pod on it).
		{testImage{e2eRegistry + "/nginx:1.15-4", "nginx:1.15-4"}, onDebian("IMAGE=nginx:1.15-4", "netexec", "--http-port=80")},
		{testImage{e2eRegistry + "/nginx:1.27-0", "nginx:1.27-0"}, onDebian("IMAGE=nginx:1.27-0", "netexec", "--http-port=80")},
		{testImage{e2eRegistry + "/glibc-dns-testing:2.0.0", "glibc-dns-testing:2.0.0"}, onDebian("IMAGE=glibc-dns-testing:2.0.0", "pause")},
		{testImage{e2eRegistry + "/busybox:1.37.0-1", "busybox:1.37.0-1"}, imagebuilder.Image{
			Binary: busyboxBin, Path: "/bin/busybox", Args: []string{"sh"},
			Env:  []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"},
			Base: []v1.Layer{applets},
		}},
		{testImage{gcRegistry + "/pause:3.10.2", "pause:3.10.2"}, imagebuilder.Image{Package: "./tools/images/pause", Path: "/pause"}},
	}
	for _, b := range builds {
		im := b.im
		im.Ref = registry + "/" + b.ti.name
		im.Aliases = []string{b.ti.upstream}
		im.Tarball = strings.NewReplacer(":", "_", "/", "_").Replace(b.ti.name) + ".tar"
		p, err := imagebuilder.Build(root, out, im)
		if err != nil {
			return err
		}
		fmt.Printf("built %s (= %s) -> %s\n", im.Ref, b.ti.upstream, p)
	}
	return os.WriteFile(filepath.Join(out, "repo-list.yaml"), []byte(RepoList(registry)), 0o644)
}

// RepoList is the --kube-test-repo-list file: every registry the suite knows is remapped to
// registry, except the invalid one (specs expect pulls from it to fail).
func RepoList(registry string) string {
	var b strings.Builder
	for _, k := range []string{"promoterE2eRegistry", "buildImageRegistry", "gcEtcdRegistry", "gcRegistry",
		"sigStorageRegistry", "privateRegistry", "dockerLibraryRegistry", "cloudProviderGcpRegistry"} {
		fmt.Fprintf(&b, "%s: %s\n", k, registry)
	}
	return b.String()
}

// agnhostLayer holds what upstream's agnhost Dockerfile adds besides the binary: /uploads
// (netexec) and the agnhost-2 symlink (entrypoint tests).
func agnhostLayer() (v1.Layer, error) {
	return tarLayer([]*tar.Header{
		{Typeflag: tar.TypeDir, Name: "uploads/", Mode: 0o777},
		{Typeflag: tar.TypeSymlink, Name: "agnhost-2", Linkname: "agnhost", Mode: 0o777},
	})
}

// busyboxApplets is a layer with a symlink to /bin/busybox for every applet, as the busybox
// image has.
func busyboxApplets(busybox string) (v1.Layer, error) {
	out, err := exec.Command(busybox, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list-full: %w", busybox, err)
	}
	dirs := map[string]bool{}
	var links []*tar.Header
	for _, l := range strings.Fields(string(out)) {
		if l == "bin/busybox" {
			continue
		}
		dirs[filepath.Dir(l)+"/"] = true
		links = append(links, &tar.Header{Typeflag: tar.TypeSymlink, Name: l, Linkname: "/bin/busybox", Mode: 0o777})
	}
	var hdrs []*tar.Header
	for d := range dirs {
		hdrs = append(hdrs, &tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755})
	}
	sort.Slice(hdrs, func(i, j int) bool { return hdrs[i].Name < hdrs[j].Name })
	return tarLayer(append(hdrs, links...))
}

func tarLayer(hdrs []*tar.Header) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hdrs {
		h.ModTime = time.Unix(0, 0)
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
}
