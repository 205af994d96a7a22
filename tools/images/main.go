// Command images builds the local cluster's container images (pause, testserver, CoreDNS,
// and staticip's own binaries as they appear) from static Go binaries into docker-archive
// tarballs, and optionally imports them into containerd sockets.
//
//	tools/run.sh images --out _output/images [--image REF=PACKAGE ...] [--import /path/to/containerd.sock ...]
//
// Every tarball in the output directory is imported into every node by `localcluster up`.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/staticip/staticip/internal/reporoot"
	"github.com/staticip/staticip/tools/images/imagebuilder"
)

func main() {
	out := flag.String("out", "_output/images", "directory for the image tarballs")
	binDir := flag.String("bin-dir", "_output/bin", "directory with prebuilt binaries (coredns)")
	only := flag.String("only", "", "comma-separated image refs to build (default: all)")
	var sockets, extra multiFlag
	flag.Var(&sockets, "import", "containerd socket to import the images into (repeatable)")
	flag.Var(&extra, "image", "extra image REF=PACKAGE, e.g. localhost/staticip/agent:v1=./cni/cmd/staticip-agent (repeatable)")
	flag.Parse()

	root, err := reporoot.Find()
	if err != nil {
		fail(err)
	}
	bin, _ := filepath.Abs(*binDir)
	images := imagebuilder.Defaults(bin)
	for _, e := range extra {
		ref, pkg, ok := strings.Cut(e, "=")
		if !ok || ref == "" || pkg == "" {
			fail(fmt.Errorf("--image %q: want REF=PACKAGE", e))
		}
		images = append(images, imagebuilder.Image{Ref: ref, Package: pkg, Path: "/" + filepath.Base(pkg)})
	}
	for _, im := range images {
		if *only != "" && !strings.Contains(","+*only+",", ","+im.Ref+",") {
			continue
		}
		path, err := imagebuilder.Build(root, *out, im)
		if err != nil {
			fail(err)
		}
		fmt.Printf("built %s -> %s\n", im.Ref, path)
		for _, s := range sockets {
			if err := imagebuilder.Import(s, path); err != nil {
				fail(err)
			}
			fmt.Printf("imported %s into %s\n", im.Ref, s)
		}
	}
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func fail(err error) {
	fmt.Fprintln(os.Stderr, "images:", err)
	os.Exit(1)
}
