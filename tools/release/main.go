// Command release publishes a staticip release (`make release VERSION=v0.2.0
// REGISTRY=ghcr.io/staticip`, RELEASING.md):
//
//   - an OCI image index per component (release.Images), one image per --platforms entry,
//     cross-compiled with CGO_ENABLED=0, assembled with go-containerregistry, labelled per the
//     OCI image spec, pushed to REGISTRY/<name>:VERSION;
//   - the chart, version VERSION without the v, appVersion VERSION, image.registry and
//     image.repository pointing at REGISTRY, pushed with `helm push` to oci://REGISTRY/charts;
//   - kubectl-staticip archives per --plugin-platforms (tar.gz, zip on Windows, with LICENSE
//     when the tree has one), checksums.txt (sha256sum format: the archives and the chart),
//     and the krew manifest made from them (staticip.yaml);
//   - RELEASE_NOTES.md, the CHANGELOG section of VERSION (refused when missing).
//
// Everything lands in --out/VERSION; images.txt lists each pushed reference with its digest.
// A registry with a private CA: point SSL_CERT_FILE at it (Go's and helm's TLS read it).
package main

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/staticip/staticip"
	"github.com/staticip/staticip/tools/images/imagebuilder"
	"github.com/staticip/staticip/tools/release/release"
)

const versionPkg = "github.com/staticip/staticip/internal/version.Version"

type options struct {
	version, registry, out, helm, krewBase, source, licenses, debianCache string
	platforms, pluginPlatforms                                            []release.Platform
}

func main() {
	var o options
	var platforms, pluginPlatforms string
	flag.StringVar(&o.version, "version", "", "release version, vX.Y.Z[-pre]")
	flag.StringVar(&o.registry, "registry", "", "host[:port][/path] the images and the chart are pushed to")
	flag.StringVar(&platforms, "platforms", "linux/amd64,linux/arm64", "image platforms")
	flag.StringVar(&pluginPlatforms, "plugin-platforms", "linux/amd64,linux/arm64,darwin/amd64,darwin/arm64,windows/amd64,windows/arm64", "kubectl-staticip archive platforms")
	flag.StringVar(&o.out, "out", "_output/release", "output directory (VERSION/ is made in it)")
	flag.StringVar(&o.debianCache, "debian-cache", "_output/debian", "where other architectures' Debian packages (the agent's nft) are fetched and kept")
	flag.StringVar(&o.helm, "helm", "_output/bin/helm", "helm binary")
	flag.StringVar(&o.krewBase, "krew-base-url", "https://github.com/staticip/staticip/releases/download/{VERSION}", "where the archives are downloaded from ({VERSION} is replaced)")
	flag.StringVar(&o.source, "source", "https://github.com/staticip/staticip", "org.opencontainers.image.source")
	flag.StringVar(&o.licenses, "licenses", "Apache-2.0", "org.opencontainers.image.licenses (SPDX)")
	flag.Parse()
	var err error
	if o.platforms, err = release.ParsePlatforms(platforms); err != nil {
		fail(err)
	}
	if o.pluginPlatforms, err = release.ParsePlatforms(pluginPlatforms); err != nil {
		fail(err)
	}
	if err := run(context.Background(), o); err != nil {
		fail(err)
	}
}

func run(ctx context.Context, o options) error {
	start := time.Now()
	v, err := release.ParseVersion(o.version)
	if err != nil {
		return err
	}
	regHost, regRepo, err := release.Repository(o.registry)
	if err != nil {
		return err
	}
	changelog, err := os.ReadFile("CHANGELOG.md")
	if err != nil {
		return err
	}
	heading, notes, err := release.ChangelogSection(changelog, v)
	if err != nil {
		return err
	}
	out := filepath.Join(o.out, v.Tag)
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "RELEASE_NOTES.md"), []byte(heading+"\n\n"+notes), 0o644); err != nil {
		return err
	}
	log("version %s (chart %s), notes from %q", v.Tag, v.SemVer, heading)

	meta := release.Meta{Source: o.source, Version: v.Tag, Licenses: o.licenses}
	meta.Revision, _ = output("git", "rev-parse", "HEAD")
	created, _ := output("git", "log", "-1", "--format=%ct")
	epoch := time.Unix(0, 0).UTC()
	if sec, err := parseInt(created); err == nil {
		epoch = time.Unix(sec, 0).UTC()
	}
	meta.Created = epoch.Format(time.RFC3339)
	// Apache-2.0 §4: LICENSE and NOTICE travel with every image and archive (the root package
	// embeds them, as tools/images/imagebuilder uses them).
	license, notice := staticip.License, staticip.Notice

	mains, err := mainPackages()
	if err != nil {
		return err
	}
	corednsVersion, err := outputIn("tools/coredns", "go", "list", "-m", "-f", "{{.Version}}", "github.com/coredns/coredns")
	if err != nil {
		return fmt.Errorf("CoreDNS's version (tools/coredns): %w", err)
	}

	// Images.
	var pushed []string
	var refs []string
	for _, im := range release.Images(corednsVersion) {
		ref := release.ImageRef(o.registry, im, v)
		t := time.Now()
		idx, err := buildIndex(out, o.debianCache, im, o.platforms, v, meta, license, notice, mains)
		if err != nil {
			return fmt.Errorf("image %s: %w", im.Name, err)
		}
		tag, err := name.NewTag(ref)
		if err != nil {
			return err
		}
		if err := remote.WriteIndex(tag, idx, remote.WithContext(ctx)); err != nil {
			return fmt.Errorf("push %s: %w", ref, err)
		}
		d, err := idx.Digest()
		if err != nil {
			return err
		}
		pushed = append(pushed, ref+"@"+d.String())
		refs = append(refs, ref)
		log("pushed %s@%s (%s, %.0fs)", ref, d, platformList(o.platforms), time.Since(t).Seconds())
	}

	// The chart.
	chart, err := releaseChart(out, o, v, regHost, regRepo, refs)
	if err != nil {
		return err
	}
	sums := map[string]string{}
	if sums[filepath.Base(chart.file)], err = fileSHA256(chart.file); err != nil {
		return err
	}
	pushed = append(pushed, strings.TrimPrefix(release.ChartRepo(o.registry), "oci://")+"/staticip:"+v.SemVer+"@"+chart.digest)

	// kubectl-staticip.
	plugin, ok := mains["kubectl-staticip"]
	if !ok {
		return fmt.Errorf("no main package kubectl-staticip in the module")
	}
	var archives []release.Archive
	for _, p := range o.pluginPlatforms {
		bin, err := goBuild(out, plugin, "", p, "-s -w -X "+versionPkg+"="+v.Tag, release.PluginBinary(p))
		if err != nil {
			return err
		}
		file := filepath.Join(out, release.ArchiveName(v, p))
		if err := writeArchive(file, release.PluginBinary(p), bin, license, notice, epoch); err != nil {
			return err
		}
		sum, err := fileSHA256(file)
		if err != nil {
			return err
		}
		sums[filepath.Base(file)] = sum
		archives = append(archives, release.Archive{Platform: p, File: filepath.Base(file), SHA256: sum})
		log("archive %s", filepath.Base(file))
	}
	if err := os.RemoveAll(filepath.Join(out, "bin")); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "checksums.txt"), release.Checksums(sums), 0o644); err != nil {
		return err
	}
	krew, err := release.KrewManifest(v, strings.ReplaceAll(o.krewBase, "{VERSION}", v.Tag), archives)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "staticip.yaml"), krew, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "images.txt"), []byte(strings.Join(pushed, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	log("released %s in %.0fs: %s (images.txt, checksums.txt, staticip.yaml, RELEASE_NOTES.md)", v.Tag, time.Since(start).Seconds(), out)
	return nil
}

// executablesRoot is where im's HostFiles for p come from: this machine's root for its own
// platform; for another, a tree of Debian's packages of p's architecture (imagebuilder.
// DebianRoot, cached in debianCache). A failure is the release's: no image ships without them.
func executablesRoot(debianCache string, im release.Image, p release.Platform) (string, error) {
	if p.OS == "linux" && p.Arch == runtime.GOARCH {
		return "/", nil
	}
	arch := imagebuilder.DebianArch(p.Arch)
	if p.OS != "linux" || arch == "" {
		return "", fmt.Errorf("no Debian packages of %s for %s", p, strings.Join(im.HostFiles, ", "))
	}
	root, _, err := imagebuilder.DebianRoot(imagebuilder.DebianRootOptions{CacheDir: debianCache, Arch: arch, Files: im.HostFiles,
		Logf: func(format string, args ...any) { log("debian "+format, args...) }})
	return root, err
}

// buildIndex builds im for every platform and returns the OCI index of those images.
func buildIndex(out, debianCache string, im release.Image, platforms []release.Platform, v release.Version, meta release.Meta, license, notice []byte, mains map[string]string) (v1.ImageIndex, error) {
	labels := release.Labels(meta, im.Name)
	if im.Tag != "" {
		labels["org.opencontainers.image.version"] = im.Tag
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var adds []mutate.IndexAddendum
	for _, p := range platforms {
		files := map[string][]byte{}
		bins := map[string]string{"/" + im.Name: im.Name}
		for path, b := range im.Extra {
			bins[path] = b
		}
		for path, b := range bins {
			var built string
			var err error
			if im.Module != "" {
				built, err = goBuild(out, im.Package, im.Module, p, "-s -w", b)
			} else {
				pkg, ok := mains[b]
				if !ok {
					return nil, fmt.Errorf("no main package %s in the module", b)
				}
				built, err = goBuild(out, pkg, "", p, "-s -w -X "+versionPkg+"="+v.Tag, b)
			}
			if err != nil {
				return nil, err
			}
			if files[path], err = os.ReadFile(built); err != nil {
				return nil, err
			}
		}
		files["/LICENSE"], files["/NOTICE"] = license, notice
		layer, err := imagebuilder.Layer(files, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return nil, err
		}
		layers := []v1.Layer{layer}
		if len(im.HostFiles) > 0 {
			root, err := executablesRoot(debianCache, im, p)
			if err != nil {
				return nil, fmt.Errorf("%s for %s: %w", im.Name, p, err)
			}
			files, err := imagebuilder.ExecutablesLayer(root, im.HostFiles, tarball.WithMediaType(types.OCILayer))
			if err != nil {
				return nil, fmt.Errorf("%s for %s: %s of %s: %w", im.Name, p, strings.Join(im.HostFiles, ", "), root, err)
			}
			layers = append([]v1.Layer{files}, layers...)
		}
		img, err := mutate.AppendLayers(mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON), layers...)
		if err != nil {
			return nil, err
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		cfg = cfg.DeepCopy()
		cfg.OS, cfg.Architecture = p.OS, p.Arch
		cfg.Created = v1.Time{Time: mustTime(meta.Created)}
		cfg.Config.Entrypoint = []string{"/" + im.Name}
		cfg.Config.Env = []string{"PATH=/"}
		cfg.Config.User = im.User
		cfg.Config.Labels = labels
		if img, err = mutate.ConfigFile(img, cfg); err != nil {
			return nil, err
		}
		img = mutate.Annotations(img, labels).(v1.Image)
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: p.OS, Architecture: p.Arch}}})
	}
	idx = mutate.AppendManifests(idx, adds...)
	return mutate.Annotations(idx, labels).(v1.ImageIndex), nil
}

type chartResult struct{ file, digest string }

// releaseChart packages charts/staticip with the release's version, appVersion and
// registry, checks that every image it renders (edge components on) is one the release
// pushed, and pushes it.
func releaseChart(out string, o options, v release.Version, regHost, regRepo string, refs []string) (chartResult, error) {
	src := filepath.Join(out, "chart", "staticip")
	if err := os.MkdirAll(filepath.Dir(src), 0o755); err != nil {
		return chartResult{}, err
	}
	if b, err := exec.Command("cp", "-a", "charts/staticip", src).CombinedOutput(); err != nil {
		return chartResult{}, fmt.Errorf("copy the chart: %v: %s", err, b)
	}
	values, err := os.ReadFile(filepath.Join(src, "values.yaml"))
	if err != nil {
		return chartResult{}, err
	}
	if values, err = release.ChartValues(values, regHost, regRepo); err != nil {
		return chartResult{}, err
	}
	if err := os.WriteFile(filepath.Join(src, "values.yaml"), values, 0o644); err != nil {
		return chartResult{}, err
	}
	if b, err := exec.Command(o.helm, "package", src, "--version", v.SemVer, "--app-version", v.Tag, "-d", out).CombinedOutput(); err != nil {
		return chartResult{}, fmt.Errorf("helm package: %v: %s", err, b)
	}
	file := filepath.Join(out, "staticip-"+v.SemVer+".tgz")
	rendered, err := exec.Command(o.helm, "template", "staticip", file, "-n", "kube-system", "--set", "edge.enabled=true").Output()
	if err != nil {
		return chartResult{}, fmt.Errorf("helm template %s: %w", file, err)
	}
	if err := release.CheckRenderedImages(rendered, refs); err != nil {
		return chartResult{}, err
	}
	if err := os.RemoveAll(filepath.Join(out, "chart")); err != nil {
		return chartResult{}, err
	}
	b, err := exec.Command(o.helm, "push", file, release.ChartRepo(o.registry)).CombinedOutput()
	if err != nil {
		return chartResult{}, fmt.Errorf("helm push: %v: %s", err, b)
	}
	m := regexp.MustCompile(`Digest: (sha256:[0-9a-f]{64})`).FindSubmatch(b)
	if m == nil {
		return chartResult{}, fmt.Errorf("helm push printed no digest: %s", b)
	}
	log("pushed %s/staticip:%s@%s", release.ChartRepo(o.registry), v.SemVer, m[1])
	return chartResult{file: file, digest: string(m[1])}, nil
}

// goBuild cross-compiles pkg (in module dir, "" for the repository's) for p into
// out/bin/<os>_<arch>/<file>.
func goBuild(out, pkg, dir string, p release.Platform, ldflags, file string) (string, error) {
	bin, err := filepath.Abs(filepath.Join(out, "bin", p.OS+"_"+p.Arch, file))
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(bin); err == nil {
		return bin, nil // the same binary in two images (none today) or archives
	}
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=auto", "-ldflags", ldflags, "-o", bin, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Arch)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s for %s: %v\n%s", pkg, p, err, b)
	}
	return bin, nil
}

// mainPackages maps each main package's binary name to its import path (the module's,
// tools/ left out as `make build` does).
func mainPackages() (map[string]string, error) {
	s, err := output("go", "list", "-f", `{{if eq .Name "main"}}{{.ImportPath}}{{end}}`, "./...")
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, p := range strings.Fields(s) {
		if !strings.Contains(p, "/tools/") {
			m[filepath.Base(p)] = p
		}
	}
	return m, nil
}

// writeArchive writes the plugin, LICENSE and NOTICE into a .tar.gz or .zip with fixed times.
func writeArchive(file, binName, bin string, license, notice []byte, mtime time.Time) error {
	content, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	type entry struct {
		name string
		mode int64
		data []byte
	}
	entries := []entry{{binName, 0o755, content}}
	entries = append(entries, entry{"LICENSE", 0o644, license}, entry{"NOTICE", 0o644, notice})
	var buf bytes.Buffer
	if strings.HasSuffix(file, ".zip") {
		zw := zip.NewWriter(&buf)
		for _, e := range entries {
			h := &zip.FileHeader{Name: e.name, Method: zip.Deflate, Modified: mtime}
			h.SetMode(os.FileMode(e.mode))
			w, err := zw.CreateHeader(h)
			if err != nil {
				return err
			}
			if _, err := w.Write(e.data); err != nil {
				return err
			}
		}
		if err := zw.Close(); err != nil {
			return err
		}
	} else {
		gz := gzip.NewWriter(&buf)
		tw := tar.NewWriter(gz)
		for _, e := range entries {
			if err := tw.WriteHeader(&tar.Header{Name: e.name, Mode: e.mode, Size: int64(len(e.data)), ModTime: mtime, Typeflag: tar.TypeReg}); err != nil {
				return err
			}
			if _, err := tw.Write(e.data); err != nil {
				return err
			}
		}
		if err := tw.Close(); err != nil {
			return err
		}
		if err := gz.Close(); err != nil {
			return err
		}
	}
	return os.WriteFile(file, buf.Bytes(), 0o644)
}

func fileSHA256(file string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func output(name string, args ...string) (string, error) { return outputIn("", name, args...) }

func outputIn(dir, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	b, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return "", fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, ee.Stderr)
		}
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

func parseInt(s string) (int64, error) {
	var n int64
	_, err := fmt.Sscan(s, &n)
	return n, err
}

func mustTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Unix(0, 0).UTC()
	}
	return t
}

func platformList(ps []release.Platform) string {
	var s []string
	for _, p := range ps {
		s = append(s, p.String())
	}
	return strings.Join(s, ", ")
}

func log(format string, args ...any) { fmt.Fprintf(os.Stderr, "release: "+format+"\n", args...) }

func fail(err error) {
	fmt.Fprintln(os.Stderr, "release:", err)
	os.Exit(1)
}
