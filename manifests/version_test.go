package manifests_test

import (
	"strings"
	"testing"

	"github.com/staticip/staticip/internal/version"
)

// The images of staticip's own binaries carry the release the binaries report
// (internal/version.Version, --version): one number, set in one place. staticip/coredns is
// CoreDNS' own release.
func TestImageTagsAreTheVersion(t *testing.T) {
	found := 0
	for path, docs := range yamlDocs(t) {
		for _, doc := range docs {
			for _, line := range strings.Split(string(doc), "\n") {
				image, ok := strings.CutPrefix(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "- ")), "image:")
				if !ok {
					continue
				}
				image = strings.Trim(strings.TrimSpace(image), `"'`)
				name, tag, _ := strings.Cut(image, ":")
				if !strings.HasPrefix(name, "staticip/") || name == "staticip/coredns" {
					continue
				}
				found++
				if tag != version.Version {
					t.Errorf("%s: image %s: tag %q, want the release internal/version.Version %q", path, image, tag, version.Version)
				}
			}
		}
	}
	if found == 0 {
		t.Fatal("no staticip image found under manifests/")
	}
}
