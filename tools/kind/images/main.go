// Command images builds, without a registry, the images kubeadm's control plane pulls on a
// kind node — kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy, etcd,
// CoreDNS, pause — under exactly the references `kubeadm config images list` prints, from
// the binaries tools/build-k8s-bins.sh built. kube-proxy also gets the node rootfs's
// iptables (nft backend) with the libraries it loads, which it shells out to.
//
// With --fixtures it builds the images the e2e suite runs with imagePullPolicy Never (pause,
// testserver v1 and v2, from tools/images), for `kind load image-archive`; staticip's own
// images come from the registry kind.sh releases into (make release).
// With --app-images it builds staticip's own images under the given references from
// _output/bin, plus those fixtures (a cluster without a registry).
//
//	tools/run.sh kind/images --refs refs.txt --bin-dir _output/bin --rootfs DIR --out DIR
//	tools/run.sh kind/images --fixtures --out DIR
//	tools/run.sh kind/images --app-images staticip/staticip-agent:latest,... --bin-dir _output/bin --out DIR
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/staticip/staticip/internal/reporoot"
	"github.com/staticip/staticip/tools/images/imagebuilder"
)

func main() {
	refsFile := flag.String("refs", "", "file with one image reference a line (kubeadm config images list)")
	binDir := flag.String("bin-dir", "_output/bin", "directory with the built Kubernetes binaries")
	rootfs := flag.String("rootfs", "", "node rootfs (debootstrap) to take kube-proxy's iptables from")
	out := flag.String("out", "", "directory for the image tarballs")
	appImages := flag.String("app-images", "", "comma-separated references of staticip images the manifests name")
	fixtures := flag.Bool("fixtures", false, "only the e2e suite's own images (built from source)")
	flag.Parse()
	var err error
	switch {
	case *refsFile != "":
		err = run(*refsFile, *binDir, *rootfs, *out)
	case *fixtures:
		err = runFixtures(*binDir, *out)
	default:
		err = runApp(strings.Split(*appImages, ","), *binDir, *out)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kind images:", err)
		os.Exit(1)
	}
}

func run(refsFile, binDir, rootfs, out string) error {
	refs, err := readLines(refsFile)
	if err != nil {
		return err
	}
	root, bin, err := workDirs(binDir)
	if err != nil {
		return err
	}
	for _, ref := range refs {
		im, err := imageFor(ref, bin)
		if err != nil {
			return err
		}
		if name(ref) == "kube-proxy" {
			layer, err := imagebuilder.RootfsLayer(rootfs, []string{"/usr/sbin/xtables-nft-multi", "/usr/lib/x86_64-linux-gnu/xtables"}, iptablesLinks())
			if err != nil {
				return fmt.Errorf("kube-proxy's iptables from %s: %w", rootfs, err)
			}
			im.Base = append(im.Base, layer)
		}
		p, err := imagebuilder.Build(root, out, im)
		if err != nil {
			return err
		}
		fmt.Printf("built %s -> %s\n", ref, p)
	}
	return nil
}

// iptablesCommands are the names kube-proxy runs; all are the nft-backed multi-call
// binary, as Debian's alternatives point them by default.
var iptablesCommands = []string{
	"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore",
	"iptables-nft", "iptables-nft-save", "iptables-nft-restore", "ip6tables-nft", "ip6tables-nft-save", "ip6tables-nft-restore",
}

// iptablesLinks link every iptables command in /usr/sbin to the multi-call binary.
func iptablesLinks() map[string]string {
	links := map[string]string{}
	for _, cmd := range iptablesCommands {
		links["/usr/sbin/"+cmd] = "xtables-nft-multi"
	}
	return links
}

// systemPath is the PATH of the control-plane images: kubeadm's manifests name the
// binaries bare (command: kube-apiserver) or under /usr/local/bin (kube-proxy), and
// kube-proxy runs iptables from /usr/sbin.
const systemPath = "PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"

// imageFor maps one reference kubeadm expects to the image built for it.
func imageFor(ref, bin string) (imagebuilder.Image, error) {
	n := name(ref)
	tarball := strings.NewReplacer("/", "_", ":", "_").Replace(ref) + ".tar"
	switch n {
	case "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy", "etcd":
		return imagebuilder.Image{Ref: ref, Binary: filepath.Join(bin, n), Path: "/usr/local/bin/" + n,
			Env: []string{systemPath}, Tarball: tarball}, nil
	case "coredns":
		return imagebuilder.Image{Ref: ref, Binary: filepath.Join(bin, "coredns"), Path: "/coredns", Tarball: tarball}, nil
	case "pause":
		return imagebuilder.Image{Ref: ref, Package: "./tools/images/pause", Path: "/pause", Tarball: tarball}, nil
	}
	return imagebuilder.Image{}, fmt.Errorf("no local build for image %s (kubeadm expects it; add it to tools/kind/images)", ref)
}

// name is the last path element of a reference without its tag: coredns for
// registry.k8s.io/coredns/coredns:v1.13.1.
func name(ref string) string {
	base := path.Base(ref)
	if i := strings.IndexAny(base, ":@"); i >= 0 {
		base = base[:i]
	}
	return base
}

func readLines(file string) ([]string, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	return lines, sc.Err()
}

// runFixtures builds the e2e suite's images: the tools/images defaults built from a Go
// package (pause, testserver v1/v2), none of staticip's components.
func runFixtures(binDir, out string) error {
	root, bin, err := workDirs(binDir)
	if err != nil {
		return err
	}
	for _, im := range imagebuilder.Defaults(bin) {
		if im.Package == "" {
			continue
		}
		p, err := imagebuilder.Build(root, out, im)
		if err != nil {
			return err
		}
		fmt.Printf("built %s -> %s\n", im.Ref, p)
	}
	return nil
}

// runApp builds the manifests' images of staticip's binaries and the e2e suite's images.
func runApp(refs []string, binDir, out string) error {
	root, bin, err := workDirs(binDir)
	if err != nil {
		return err
	}
	defaults := imagebuilder.Defaults(bin)
	images := append([]imagebuilder.Image{}, defaults...)
	for _, ref := range refs {
		if ref = strings.TrimSpace(ref); ref != "" {
			images = append(images, appImage(ref, bin, defaults))
		}
	}
	for _, im := range images {
		p, err := imagebuilder.Build(root, out, im)
		if err != nil {
			return err
		}
		fmt.Printf("built %s -> %s\n", im.Ref, p)
	}
	return nil
}

// appImage is the image for a reference a manifest names: the tools/images definition of
// the binary with that name (the agent's also carries the CNI plugin), else the binary
// `make build` put in binDir, under the manifest's reference.
func appImage(ref, bin string, defaults []imagebuilder.Image) imagebuilder.Image {
	n := name(ref)
	for _, d := range defaults {
		if d.Path == "/"+n && d.Package == "" {
			d.Ref, d.Tarball, d.Env = ref, "app-"+n+".tar", nil
			return d
		}
	}
	return imagebuilder.Image{Ref: ref, Binary: filepath.Join(bin, n), Path: "/" + n, Tarball: "app-" + n + ".tar"}
}

// workDirs are the repository root (the working directory, where packages build from) and
// the absolute binary directory.
func workDirs(binDir string) (root, bin string, err error) {
	if root, err = reporoot.Find(); err != nil {
		return "", "", err
	}
	bin, err = filepath.Abs(binDir)
	return root, bin, err
}
