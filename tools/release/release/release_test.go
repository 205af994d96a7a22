package release

import (
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct {
		in         string
		semver     string
		prerelease bool
		bad        bool
	}{
		{in: "v0.2.0", semver: "0.2.0"},
		{in: "v1.10.3-rc.1", semver: "1.10.3-rc.1", prerelease: true},
		{in: "v0.1.0-dev.ab12cd3", semver: "0.1.0-dev.ab12cd3", prerelease: true},
		{in: "0.2.0", bad: true},          // the tag carries the v
		{in: "v0.2", bad: true},           // not SemVer
		{in: "v01.2.3", bad: true},        // leading zero
		{in: "v0.2.0+build.1", bad: true}, // '+' is no OCI tag character
		{in: "", bad: true},
	} {
		v, err := ParseVersion(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("ParseVersion(%q) = %+v, want an error", tc.in, v)
			}
			continue
		}
		if err != nil || v.Tag != tc.in || v.SemVer != tc.semver || v.Prerelease != tc.prerelease {
			t.Errorf("ParseVersion(%q) = %+v, %v", tc.in, v, err)
		}
	}
}

const changelog = `# Changelog

## [Unreleased]

### Added

- something new

## [0.2.0] - 2026-12-01

### Fixed

- a bug

## [0.1.0] - 2026-11-28

## [v0.0.9] - 2026-11-01

- old
`

func TestChangelogSection(t *testing.T) {
	for _, tc := range []struct {
		version, heading, body, err string
	}{
		{version: "v0.2.0", heading: "## [0.2.0] - 2026-12-01", body: "### Fixed\n\n- a bug\n"},
		{version: "v0.0.9", heading: "## [v0.0.9] - 2026-11-01", body: "- old\n"},
		// A final release needs its own section, even when Unreleased has content.
		{version: "v0.3.0", err: `no section "## [0.3.0]`},
		// A prerelease without a section of its own goes out with Unreleased.
		{version: "v0.3.0-rc.1", heading: "## [Unreleased]", body: "### Added\n\n- something new\n"},
		// An empty section is refused, not released with no notes.
		{version: "v0.1.0", err: "section [0.1.0] is empty"},
	} {
		h, b, err := ChangelogSection([]byte(changelog), mustVersion(t, tc.version))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err %v, want %q", tc.version, err, tc.err)
			}
			continue
		}
		if err != nil || h != tc.heading || b != tc.body {
			t.Errorf("%s: %q %q %v, want %q %q", tc.version, h, b, err, tc.heading, tc.body)
		}
	}
	if _, _, err := ChangelogSection([]byte("# Changelog\n\n## [Unreleased]\n\n"), mustVersion(t, "v0.1.0-rc.1")); err == nil {
		t.Error("a prerelease went out with an empty Unreleased section")
	}
}

func TestLabels(t *testing.T) {
	m := Meta{Source: "https://github.com/staticip/staticip", Version: "v0.2.0", Revision: "abc", Created: "2026-11-28T00:00:00Z", Licenses: "Apache-2.0"}
	l := Labels(m, "staticip-agent")
	want := map[string]string{
		"org.opencontainers.image.title":    "staticip-agent",
		"org.opencontainers.image.source":   "https://github.com/staticip/staticip",
		"org.opencontainers.image.version":  "v0.2.0",
		"org.opencontainers.image.revision": "abc",
		"org.opencontainers.image.created":  "2026-11-28T00:00:00Z",
		"org.opencontainers.image.licenses": "Apache-2.0",
	}
	if len(l) != len(want) {
		t.Errorf("labels %v", l)
	}
	for k, v := range want {
		if l[k] != v {
			t.Errorf("%s = %q, want %q", k, l[k], v)
		}
	}
	// An unknown value is left out, never written as "".
	m.Revision = ""
	if _, ok := Labels(m, "x")["org.opencontainers.image.revision"]; ok {
		t.Error("empty revision written as a label")
	}
}

// TestImagesRunAsTheirManifests: the image's default user is the one its manifest runs it
// as — non-root for the three that need no root, root for the agent, the grid daemon and
// CoreDNS (see Images' comment).
func TestImagesRunAsTheirManifests(t *testing.T) {
	want := map[string]string{
		"staticip-agent": "", "statefulset-grid-daemon": "", "coredns": "",
		"staticip-controller-manager": NonRoot, "staticip-scheduler": NonRoot, "application-grid-wrapper": NonRoot,
	}
	got := map[string]string{}
	for _, im := range Images("v1.15.0") {
		got[im.Name] = im.User
	}
	if len(got) != len(want) {
		t.Errorf("images %v", got)
	}
	for n, u := range want {
		if got[n] != u {
			t.Errorf("%s: user %q, want %q", n, got[n], u)
		}
	}
}

func TestRegistryAndRefs(t *testing.T) {
	v := mustVersion(t, "v0.2.0")
	host, repo, err := Repository("10.254.0.1:5000/staticip/")
	if err != nil || host != "10.254.0.1:5000" || repo != "staticip" {
		t.Errorf("Repository = %q %q %v", host, repo, err)
	}
	if _, _, err := Repository("https://ghcr.io/x"); err == nil {
		t.Error("a URL accepted as REGISTRY")
	}
	if got := ImageRef("ghcr.io/staticip", Image{Name: "staticip-agent"}, v); got != "ghcr.io/staticip/staticip-agent:v0.2.0" {
		t.Errorf("ImageRef = %s", got)
	}
	if got := ImageRef("ghcr.io/staticip", Image{Name: "coredns", Tag: "v1.15.0"}, v); got != "ghcr.io/staticip/coredns:v1.15.0" {
		t.Errorf("ImageRef = %s", got)
	}
	if got := ChartRepo("ghcr.io/staticip/"); got != "oci://ghcr.io/staticip/charts" {
		t.Errorf("ChartRepo = %s", got)
	}
	p, err := ParsePlatforms("linux/amd64, linux/arm64,linux/amd64")
	if err != nil || len(p) != 2 || p[1] != (Platform{"linux", "arm64"}) {
		t.Errorf("ParsePlatforms = %v %v", p, err)
	}
	for _, bad := range []string{"", "linux", "linux/", "linux/arm/v7"} {
		if _, err := ParsePlatforms(bad); err == nil {
			t.Errorf("ParsePlatforms(%q) accepted", bad)
		}
	}
}

func TestChartValuesKeepsCommentsAndSetsTheRegistry(t *testing.T) {
	in := `# top comment
image:
  # Registry host (and port)
  registry: ""
  repository: staticip
  tag: ""
agent:
  # not this one
  registry: other
`
	out, err := ChartValues([]byte(in), "10.254.0.1:5000", "staticip")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(strings.Replace(in, `  registry: ""`, `  registry: "10.254.0.1:5000"`, 1), "  repository: staticip", `  repository: "staticip"`, 1)
	if string(out) != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
	if _, err := ChartValues([]byte("image:\n  tag: x\n"), "r", "p"); err == nil {
		t.Error("values without image.registry accepted")
	}
}

func TestCheckRenderedImages(t *testing.T) {
	want := []string{"r:5000/staticip/staticip-agent:v0.2.0", "r:5000/staticip/staticip-scheduler:v0.2.0"}
	ok := "spec:\n  containers:\n  - image: r:5000/staticip/staticip-agent:v0.2.0\n    image: \"r:5000/staticip/staticip-scheduler:v0.2.0\"\n"
	if err := CheckRenderedImages([]byte(ok), want); err != nil {
		t.Error(err)
	}
	bad := ok + "  - image: staticip/staticip-agent:v0.1.0\n"
	if err := CheckRenderedImages([]byte(bad), want); err == nil || !strings.Contains(err.Error(), "staticip/staticip-agent:v0.1.0") {
		t.Errorf("err %v", err)
	}
	if err := CheckRenderedImages([]byte("kind: ConfigMap\n"), want); err == nil {
		t.Error("a chart with no image passed")
	}
}

func TestChecksums(t *testing.T) {
	got := string(Checksums(map[string]string{"b.zip": strings.Repeat("b", 64), "a.tar.gz": strings.Repeat("a", 64)}))
	want := strings.Repeat("a", 64) + "  a.tar.gz\n" + strings.Repeat("b", 64) + "  b.zip\n"
	if got != want {
		t.Errorf("got %q, want %q (sha256sum -c format, sorted)", got, want)
	}
}

// TestKrewManifest generates the manifest from archives and reads it back as krew would:
// krew's apiVersion and kind, the plugin name kubectl resolves (kubectl-staticip ->
// `kubectl staticip`), and per platform a selector, the archive's URL under the base URL,
// its sha256 and the binary's name (.exe on Windows); no placeholder left.
func TestKrewManifest(t *testing.T) {
	v := mustVersion(t, "v0.2.0")
	base := "https://github.com/staticip/staticip/releases/download/v0.2.0/"
	var archives []Archive
	for i, p := range []Platform{{"linux", "amd64"}, {"windows", "amd64"}, {"darwin", "arm64"}} {
		archives = append(archives, Archive{Platform: p, File: ArchiveName(v, p), SHA256: strings.Repeat(string(rune('a'+i)), 64)})
	}
	raw, err := KrewManifest(v, base, archives)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			Version          string `json:"version"`
			Homepage         string `json:"homepage"`
			ShortDescription string `json:"shortDescription"`
			Description      string `json:"description"`
			Caveats          string `json:"caveats"`
			Platforms        []struct {
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				} `json:"selector"`
				URI    string `json:"uri"`
				SHA256 string `json:"sha256"`
				Bin    string `json:"bin"`
			} `json:"platforms"`
		} `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(raw, &m); err != nil {
		t.Fatalf("%v\n%s", err, raw)
	}
	if m.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || m.Kind != "Plugin" || m.Metadata.Name != "staticip" {
		t.Errorf("header = %s %s %s", m.APIVersion, m.Kind, m.Metadata.Name)
	}
	if m.Spec.Version != "v0.2.0" || m.Spec.ShortDescription == "" || len(m.Spec.Platforms) != 3 {
		t.Errorf("spec = %+v", m.Spec)
	}
	want := map[string]struct{ uri, sha, bin string }{
		"linux/amd64":   {base + "kubectl-staticip_v0.2.0_linux_amd64.tar.gz", strings.Repeat("a", 64), "kubectl-staticip"},
		"windows/amd64": {base + "kubectl-staticip_v0.2.0_windows_amd64.zip", strings.Repeat("b", 64), "kubectl-staticip.exe"},
		"darwin/arm64":  {base + "kubectl-staticip_v0.2.0_darwin_arm64.tar.gz", strings.Repeat("c", 64), "kubectl-staticip"},
	}
	for _, p := range m.Spec.Platforms {
		key := p.Selector.MatchLabels["os"] + "/" + p.Selector.MatchLabels["arch"]
		w, ok := want[key]
		if !ok || p.URI != w.uri || p.SHA256 != w.sha || p.Bin != w.bin {
			t.Errorf("platform %s: %+v, want %+v", key, p, w)
		}
	}
	if regexp.MustCompile(`example\.invalid|0{64}|<no value>`).Match(raw) {
		t.Errorf("placeholder left in\n%s", raw)
	}
	// A zero or malformed digest, or no base URL, is refused rather than published.
	archives[0].SHA256 = strings.Repeat("0", 64)
	if _, err := KrewManifest(v, base, archives); err == nil {
		t.Error("an all-zero sha256 accepted")
	}
	archives[0].SHA256 = strings.Repeat("a", 64)
	if _, err := KrewManifest(v, "", archives); err == nil {
		t.Error("an empty base URL accepted")
	}
}

func mustVersion(t *testing.T, s string) Version {
	t.Helper()
	v, err := ParseVersion(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
