// Package imagebuilder turns static Go binaries into single-layer container images, written
// as docker-archive tarballs that `ctr images import` (and `docker load`) accept. No
// registry, no Dockerfile: go-containerregistry assembles the layer, config and manifest.
package imagebuilder

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/staticip/staticip"
)

// Image is one image to build.
type Image struct {
	// Ref is the full image name pods use, e.g. localhost/staticip/testserver:v1.
	Ref string
	// Aliases are more names for the same image in the same tarball (tools/conformance: the
	// remapped and the literal upstream name of a test image).
	Aliases []string
	// Package is a Go main package (import path or ./relative to the repo root) built
	// statically into the image; empty when Binary names a prebuilt static binary. A ./path
	// is built in its own directory, so in whichever module holds it (the product's, tools/
	// or e2e/: one repository, three go.mod files).
	Package string
	// Binary is a prebuilt static binary (used when Package is empty).
	Binary string
	// Path is where the binary lives in the image, e.g. /testserver.
	Path string
	// Args are the default arguments after the binary (the image's CMD).
	Args []string
	// Extra are more files for the image, path in the image → file on the host; e.g. the
	// agent image also carries the CNI plugin it installs on its node.
	Extra map[string]string
	// Env is added to the image's environment (after PATH=/). It also makes two images of
	// one binary different images (different IDs), not two tags of one.
	Env []string
	// Tarball names the tarball in the output directory; default <base of Path>.tar. Two
	// images with the same Path need their own.
	Tarball string
	// Base are layers below the binary's, e.g. the iptables binaries and libraries
	// kube-proxy shells out to (tools/kind/images); most images have none.
	Base []v1.Layer
	// HostFiles are executables of this machine, with the shared libraries and the loader they
	// need (RootfsLayer of "/"), in a layer above Base and below the binary's; each is also
	// linked from / so that the image's PATH=/ finds it: the agent's nft, which knftables execs.
	HostFiles []string
}

// Sources are the host files an image is made of (empty for a Package image, which is
// built from source).
func (im Image) Sources() []string {
	var out []string
	if im.Package == "" {
		out = append(out, im.Binary)
	}
	for _, src := range im.Extra {
		out = append(out, src)
	}
	return append(out, im.HostFiles...)
}

// Stale reports whether the tarball of im in outDir is missing or older than one of its
// sources, so that an image of a binary rebuilt by `make build` is rebuilt too.
func (im Image) Stale(outDir string) bool {
	st, err := os.Stat(filepath.Join(outDir, im.File()))
	if err != nil {
		return true
	}
	for _, src := range im.Sources() {
		if s, err := os.Stat(src); err != nil || s.ModTime().After(st.ModTime()) {
			return true
		}
	}
	return false
}

// File is the tarball name of an image inside an output directory.
func (im Image) File() string {
	if im.Tarball != "" {
		return im.Tarball
	}
	return filepath.Base(im.Path) + ".tar"
}

// Build builds im into outDir/<File()> and returns that path. repoRoot is where Package
// builds from.
func Build(repoRoot, outDir string, im Image) (string, error) {
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return "", err
	}
	bin := im.Binary
	if im.Package != "" {
		bin = filepath.Join(outDir, ".bin", filepath.Base(im.Path))
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, im.Package)
		cmd.Dir = repoRoot
		if strings.HasPrefix(im.Package, "./") {
			cmd = exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, ".")
			cmd.Dir = filepath.Join(repoRoot, im.Package)
		}
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("go build %s: %w\n%s", im.Package, err, out)
		}
	}
	files := map[string][]byte{}
	for path, src := range mergeFiles(im.Path, bin, im.Extra) {
		content, err := os.ReadFile(src)
		if err != nil {
			return "", fmt.Errorf("image %s: %w", im.Ref, err)
		}
		files[path] = content
	}
	for path, content := range legalFiles() {
		if _, clash := files[path]; clash {
			return "", fmt.Errorf("image %s: %s is the project's own file in every image", im.Ref, path)
		}
		files[path] = content
	}
	layer, err := Layer(files)
	if err != nil {
		return "", err
	}
	base := append([]v1.Layer{}, im.Base...)
	if len(im.HostFiles) > 0 {
		hostLayer, err := ExecutablesLayer("/", im.HostFiles)
		if err != nil {
			return "", fmt.Errorf("image %s: files of this machine: %w", im.Ref, err)
		}
		base = append(base, hostLayer)
	}
	img, err := mutate.AppendLayers(empty.Image, append(base, layer)...)
	if err != nil {
		return "", err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return "", err
	}
	cfg = cfg.DeepCopy()
	cfg.OS = "linux"
	cfg.Architecture = "amd64"
	cfg.Config.Entrypoint = []string{im.Path}
	cfg.Config.Cmd = im.Args
	cfg.Config.Env = withDefaultPath(im.Env)
	// A fixed creation time keeps the image ID stable across builds of the same binary.
	cfg.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return "", err
	}
	tag, err := name.NewTag(im.Ref)
	if err != nil {
		return "", fmt.Errorf("image name %q: %w", im.Ref, err)
	}
	refs := map[name.Reference]v1.Image{tag: img}
	for _, a := range im.Aliases {
		t, err := name.NewTag(a)
		if err != nil {
			return "", fmt.Errorf("image name %q: %w", a, err)
		}
		refs[t] = img
	}
	out := filepath.Join(outDir, im.File())
	tmp := out + ".tmp"
	if err := tarball.MultiRefWriteToFile(tmp, refs); err != nil {
		return "", err
	}
	return out, os.Rename(tmp, out)
}

// withDefaultPath is env with PATH=/ in front unless env sets its own PATH (an image whose
// binaries live in /usr/local/bin, or that shells out to /usr/sbin/iptables).
func withDefaultPath(env []string) []string {
	for _, e := range env {
		if strings.HasPrefix(e, "PATH=") {
			return append([]string{}, env...)
		}
	}
	return append([]string{"PATH=/"}, env...)
}

// legalFiles are the files every image carries in its own (top) layer, whatever it is built
// from: the project's license and notice (Apache-2.0 §4).
func legalFiles() map[string][]byte {
	return map[string][]byte{"/LICENSE": staticip.License, "/NOTICE": staticip.Notice}
}

func mergeFiles(path, bin string, extra map[string]string) map[string]string {
	out := map[string]string{path: bin}
	for p, src := range extra {
		out[p] = src
	}
	return out
}

// Layer is a layer holding executables and the license (path in the image → content, each at the
// root), plus /tmp and /etc so that programs and the kubelet's /etc/hosts and
// /etc/resolv.conf bind mounts have a place to go. opts set e.g. the OCI media type
// (tools/release's images are OCI; the tarballs here keep Docker's).
func Layer(files map[string][]byte, opts ...tarball.LayerOption) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	for _, dir := range []string{"etc/", "tmp/"} {
		mode := int64(0o755)
		if dir == "tmp/" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: mode, ModTime: epoch}); err != nil {
			return nil, err
		}
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths) // a stable layer digest for the same files
	for _, path := range paths {
		content := files[path]
		mode := int64(0o755)
		if _, legal := legalFiles()[path]; legal {
			mode = 0o644
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(path, "/"), Mode: mode, Size: int64(len(content)), ModTime: epoch}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(content); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, opts...)
}

// Import loads an image tarball into one containerd's k8s.io namespace (the namespace the
// CRI plugin, and so the kubelet, sees).
func Import(containerdSocket, tarPath string) error {
	out, err := exec.Command("ctr", "--address", containerdSocket, "--namespace", "k8s.io", "images", "import", tarPath).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr images import %s into %s: %w: %s", tarPath, containerdSocket, err, out)
	}
	return nil
}

// Names of the images every local cluster node gets.
const (
	PauseImage      = "localhost/staticip/pause:v1"
	TestServerImage = "localhost/staticip/testserver:v1"
	// TestServerV2Image is the same testserver as another image (its own ID): rolling
	// updates v1 -> v2 in the e2e suite and the demo change a real image.
	TestServerV2Image = "localhost/staticip/testserver:v2"
	CoreDNSImage      = "localhost/staticip/coredns:v1"
	// staticip's own components, from the binaries `make build` puts in _output/bin.
	AgentImage = "localhost/staticip/staticip-agent:v1"
	// AgentNFT is the nft binary the agent image carries (Debian's nftables, tools/deps/cni.list).
	AgentNFT               = "/usr/sbin/nft"
	ControllerManagerImage = "localhost/staticip/staticip-controller-manager:v1"
	GridWrapperImage       = "localhost/staticip/application-grid-wrapper:v1"
	// StatefulSetGridDaemonImage is statefulset-grid-daemon (manifests/edge).
	StatefulSetGridDaemonImage = "localhost/staticip/statefulset-grid-daemon:v1"
)

// Defaults are the images the local cluster needs. staticip's own binaries are added here
// as they appear (Package: "./cni/cmd/staticip-agent", Ref: localhost/staticip/...:v1).
func Defaults(binDir string) []Image {
	return []Image{
		{Ref: PauseImage, Package: "./tools/images/pause", Path: "/pause"},
		{Ref: TestServerImage, Package: "./e2e/testserver", Path: "/testserver", Args: []string{"serve"}},
		{Ref: TestServerV2Image, Package: "./e2e/testserver", Path: "/testserver", Args: []string{"serve"},
			Env: []string{"TESTSERVER_VERSION=v2"}, Tarball: "testserver-v2.tar"},
		{Ref: CoreDNSImage, Binary: filepath.Join(binDir, "coredns"), Path: "/coredns"},
		// The agent image carries the plugin binary it installs into the node's CNI bin dir,
		// and nft (Debian's, with its libraries) for its outgoing NAT table (cni/README.md).
		{Ref: AgentImage, Binary: filepath.Join(binDir, "staticip-agent"), Path: "/staticip-agent",
			Extra: map[string]string{"/staticip": filepath.Join(binDir, "staticip")}, HostFiles: []string{AgentNFT}},
		{Ref: ControllerManagerImage, Binary: filepath.Join(binDir, "staticip-controller-manager"), Path: "/staticip-controller-manager"},
		{Ref: GridWrapperImage, Binary: filepath.Join(binDir, "application-grid-wrapper"), Path: "/application-grid-wrapper"},
		{Ref: StatefulSetGridDaemonImage, Binary: filepath.Join(binDir, "statefulset-grid-daemon"), Path: "/statefulset-grid-daemon"},
	}
}
