// Package release holds the pure decisions of `make release` (tools/release): which version,
// which CHANGELOG section, which images with which labels and user, where they go, the
// names of the plugin's archives, the checksums file and the krew manifest made from them.
// The I/O (go build, image assembly and push, helm package/push, archives) is in main.go.
package release

import (
	"bufio"
	"bytes"
	_ "embed"
	"fmt"
	"path"
	"regexp"
	"sort"
	"strings"
	"text/template"
)

// Version is a release version: Tag is what the images, the plugin and the chart's
// appVersion carry (v0.2.0), SemVer the chart's version and the CHANGELOG heading (0.2.0:
// Helm wants SemVer 2 and Keep a Changelog writes versions without the v).
type Version struct {
	Tag        string
	SemVer     string
	Prerelease bool
}

var versionRE = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

// ParseVersion accepts vMAJOR.MINOR.PATCH with an optional -prerelease (no +build: OCI tags
// cannot hold a '+', and Helm would rewrite it).
func ParseVersion(s string) (Version, error) {
	m := versionRE.FindStringSubmatch(s)
	if m == nil {
		return Version{}, fmt.Errorf("VERSION %q: want vMAJOR.MINOR.PATCH[-PRERELEASE], e.g. v0.2.0 or v0.2.0-rc.1", s)
	}
	return Version{Tag: s, SemVer: strings.TrimPrefix(s, "v"), Prerelease: m[4] != ""}, nil
}

// ChangelogSection is the body of the CHANGELOG section of v: the text under
// "## [0.2.0]" (any " - date" after it) up to the next "## " heading. A release without its
// section is refused. A prerelease (v0.2.0-rc.1, or the kind e2e's v0.1.0-dev.<commit>) may
// go out with the [Unreleased] section when it has none of its own: that is what it contains.
// The returned heading says which section it is.
func ChangelogSection(changelog []byte, v Version) (heading, body string, err error) {
	sections := changelogSections(changelog)
	if b, ok := sections[v.SemVer]; ok {
		if strings.TrimSpace(b.body) == "" {
			return "", "", fmt.Errorf("CHANGELOG.md: section [%s] is empty", v.SemVer)
		}
		return b.heading, b.body, nil
	}
	if v.Prerelease {
		if b, ok := sections["Unreleased"]; ok && strings.TrimSpace(b.body) != "" {
			return b.heading, b.body, nil
		}
	}
	return "", "", fmt.Errorf("CHANGELOG.md has no section \"## [%s] - YYYY-MM-DD\": write the release's changes there first (RELEASING.md)", v.SemVer)
}

type section struct{ heading, body string }

// changelogSections maps "0.2.0" / "Unreleased" to their sections ("## [X]..." headings).
func changelogSections(changelog []byte) map[string]section {
	out := map[string]section{}
	var cur string
	var head string
	var body strings.Builder
	flush := func() {
		if cur != "" {
			if _, dup := out[cur]; !dup {
				out[cur] = section{heading: head, body: strings.TrimSpace(body.String()) + "\n"}
			}
		}
		body.Reset()
	}
	sc := bufio.NewScanner(bytes.NewReader(changelog))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			flush()
			cur, head = "", line
			rest := strings.TrimSpace(strings.TrimPrefix(line, "## "))
			if strings.HasPrefix(rest, "[") {
				if i := strings.Index(rest, "]"); i > 0 {
					cur = strings.TrimPrefix(rest[1:i], "v")
				}
			}
			continue
		}
		if cur != "" {
			body.WriteString(line)
			body.WriteByte('\n')
		}
	}
	flush()
	return out
}

// Image is one released image: Name is both the binary (the entrypoint /Name) and the
// image's last path element; Extra are more binaries in the image (path → binary name).
// User is the image's USER: non-root where the component runs without root (as its
// manifest's securityContext runs it), empty (root) where it must be.
type Image struct {
	Name  string
	Extra map[string]string
	User  string
	// Module is a separate Go module dir (tools/coredns) whose Package builds the binary;
	// empty: a main package of the repository's module named Name.
	Module, Package string
	// Tag is a fixed tag (CoreDNS's own version); empty: the release version.
	Tag string
	// HostFiles are executables with their libraries (imagebuilder.ExecutablesLayer), each
	// linked from /: the agent's nft. The image of the build machine's platform takes this
	// machine's; every other platform's takes them from Debian's packages of its architecture
	// (imagebuilder.DebianRoot), and the release fails when it cannot.
	HostFiles []string
}

// NonRoot is the USER of the images that need no root: distroless's nonroot, the uid the
// manifests run them as (runAsUser: 65532).
const NonRoot = "65532:65532"

// Images are staticip's images. Root where the manifests need it:
//   - staticip-agent writes the plugin into the host's /opt/cni/bin and its state into root's
//     host directories, with CAP_NET_ADMIN only and no CAP_DAC_OVERRIDE (manifests/cni);
//   - statefulset-grid-daemon writes into a root-owned host directory (runAsUser: 0);
//   - CoreDNS (the edge DNS, manifests/edge/coredns) binds :53 with NET_BIND_SERVICE, which a
//     non-root process would not have (Kubernetes gives no ambient capabilities).
//
// staticip-controller-manager, staticip-scheduler and application-grid-wrapper run as 65532.
func Images(corednsVersion string) []Image {
	return []Image{
		{Name: "staticip-agent", Extra: map[string]string{"/staticip": "staticip"}, HostFiles: []string{"/usr/sbin/nft"}},
		{Name: "staticip-controller-manager", User: NonRoot},
		{Name: "staticip-scheduler", User: NonRoot},
		{Name: "application-grid-wrapper", User: NonRoot},
		{Name: "statefulset-grid-daemon"},
		{Name: "coredns", Module: "tools/coredns", Package: "github.com/coredns/coredns", Tag: corednsVersion},
	}
}

// Meta is what the OCI labels say about a release.
type Meta struct {
	Source   string // https://github.com/staticip/staticip
	Version  string // v0.2.0
	Revision string // the commit
	Created  string // RFC 3339, the commit's time (reproducible images)
	Licenses string // SPDX expression
}

// Labels are the OCI image-spec annotations (org.opencontainers.image.*) of an image,
// used as its config labels and its index's annotations.
func Labels(m Meta, title string) map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":    title,
		"org.opencontainers.image.source":   m.Source,
		"org.opencontainers.image.version":  m.Version,
		"org.opencontainers.image.revision": m.Revision,
		"org.opencontainers.image.created":  m.Created,
		"org.opencontainers.image.licenses": m.Licenses,
	}
	for k, v := range l {
		if v == "" {
			delete(l, k)
		}
	}
	return l
}

// Platform is an OS/architecture pair.
type Platform struct{ OS, Arch string }

func (p Platform) String() string { return p.OS + "/" + p.Arch }

// ParsePlatforms reads "linux/amd64,linux/arm64".
func ParsePlatforms(s string) ([]Platform, error) {
	var out []Platform
	seen := map[Platform]bool{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		os, arch, ok := strings.Cut(f, "/")
		if !ok || os == "" || arch == "" || strings.Contains(arch, "/") {
			return nil, fmt.Errorf("platform %q: want OS/ARCH, e.g. linux/arm64", f)
		}
		p := Platform{os, arch}
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no platform in %q", s)
	}
	return out, nil
}

// Repository splits REGISTRY (host[:port][/path]) into the chart's image.registry and
// image.repository values: images are REGISTRY/<name>:<tag>.
func Repository(registry string) (host, repo string, err error) {
	registry = strings.TrimSuffix(registry, "/")
	host, repo, _ = strings.Cut(registry, "/")
	if host == "" || strings.Contains(registry, "://") || strings.ContainsAny(registry, " @") {
		return "", "", fmt.Errorf("REGISTRY %q: want host[:port][/path], e.g. ghcr.io/staticip or 10.254.0.1:5000/staticip", registry)
	}
	return host, repo, nil
}

// ImageRef is where an image of the release goes.
func ImageRef(registry string, im Image, v Version) string {
	tag := im.Tag
	if tag == "" {
		tag = v.Tag
	}
	return strings.TrimSuffix(registry, "/") + "/" + im.Name + ":" + tag
}

// ChartRepo is the OCI repository `helm push` is given (the chart lands at
// <ChartRepo>/staticip:<SemVer>).
func ChartRepo(registry string) string {
	return "oci://" + strings.TrimSuffix(registry, "/") + "/charts"
}

// ChartValues sets image.registry and image.repository in the chart's values.yaml text
// (line edits inside the top-level `image:` block, so that every comment stays: the values
// table is generated from them). It fails when either key is not there.
func ChartValues(values []byte, registry, repository string) ([]byte, error) {
	lines := strings.Split(string(values), "\n")
	in := false
	set := map[string]bool{}
	for i, l := range lines {
		if !strings.HasPrefix(l, " ") && !strings.HasPrefix(l, "#") && strings.TrimSpace(l) != "" {
			in = strings.TrimSpace(l) == "image:"
			continue
		}
		if !in {
			continue
		}
		for key, val := range map[string]string{"registry": registry, "repository": repository} {
			if strings.HasPrefix(l, "  "+key+":") {
				lines[i] = fmt.Sprintf("  %s: %q", key, val)
				set[key] = true
			}
		}
	}
	if !set["registry"] || !set["repository"] {
		return nil, fmt.Errorf("values.yaml: no image.registry or image.repository line to set")
	}
	return []byte(strings.Join(lines, "\n")), nil
}

// CheckRenderedImages fails unless every image the rendered chart names is one of want
// (the release's references): a chart that would pull something the release did not push.
func CheckRenderedImages(rendered []byte, want []string) error {
	ok := map[string]bool{}
	for _, w := range want {
		ok[w] = true
	}
	var bad []string
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(rendered))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "- "))
		if len(f) == 2 && f[0] == "image:" {
			n++
			if ref := strings.Trim(f[1], `"'`); !ok[ref] {
				bad = append(bad, ref)
			}
		}
	}
	if n == 0 {
		return fmt.Errorf("the rendered chart names no image")
	}
	if len(bad) > 0 {
		return fmt.Errorf("the chart names images the release does not push: %s", strings.Join(bad, ", "))
	}
	return nil
}

// Archive is one kubectl-staticip archive.
type Archive struct {
	Platform
	File   string // base name
	SHA256 string // hex
}

// PluginBinary is the plugin's file name on a platform.
func PluginBinary(p Platform) string {
	if p.OS == "windows" {
		return "kubectl-staticip.exe"
	}
	return "kubectl-staticip"
}

// ArchiveName is kubectl-staticip_v0.2.0_linux_amd64.tar.gz (.zip on Windows).
func ArchiveName(v Version, p Platform) string {
	ext := ".tar.gz"
	if p.OS == "windows" {
		ext = ".zip"
	}
	return fmt.Sprintf("kubectl-staticip_%s_%s_%s%s", v.Tag, p.OS, p.Arch, ext)
}

// Checksums is the checksums file in sha256sum's format ("<hex>  <name>", sorted by
// name), so that `sha256sum -c checksums.txt` checks a download.
func Checksums(files map[string]string) []byte {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var b bytes.Buffer
	for _, n := range names {
		fmt.Fprintf(&b, "%s  %s\n", files[n], n)
	}
	return b.Bytes()
}

//go:embed krew.yaml.tmpl
var krewTemplate string

var hexSHA256 = regexp.MustCompile(`^[0-9a-f]{64}$`)

// KrewManifest is the krew Plugin manifest for the archives, each URI baseURL/<file>
// (baseURL: where the release's files are downloaded from, e.g.
// https://github.com/staticip/staticip/releases/download/v0.2.0).
func KrewManifest(v Version, baseURL string, archives []Archive) ([]byte, error) {
	if !strings.HasPrefix(baseURL, "https://") && !strings.HasPrefix(baseURL, "http://") && !strings.HasPrefix(baseURL, "file://") {
		return nil, fmt.Errorf("krew base URL %q: want an http(s):// or file:// URL", baseURL)
	}
	if len(archives) == 0 {
		return nil, fmt.Errorf("krew manifest: no archives")
	}
	type plat struct {
		OS, Arch, URI, SHA256, Bin string
	}
	var plats []plat
	for _, a := range archives {
		if !hexSHA256.MatchString(a.SHA256) || strings.Trim(a.SHA256, "0") == "" {
			return nil, fmt.Errorf("archive %s: sha256 %q is not a digest", a.File, a.SHA256)
		}
		plats = append(plats, plat{OS: a.OS, Arch: a.Arch, URI: strings.TrimSuffix(baseURL, "/") + "/" + path.Base(a.File), SHA256: a.SHA256, Bin: PluginBinary(a.Platform)})
	}
	sort.Slice(plats, func(i, j int) bool { return plats[i].OS+plats[i].Arch < plats[j].OS+plats[j].Arch })
	t, err := template.New("krew").Option("missingkey=error").Parse(krewTemplate)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	err = t.Execute(&b, map[string]any{"Version": v.Tag, "Platforms": plats})
	return b.Bytes(), err
}
