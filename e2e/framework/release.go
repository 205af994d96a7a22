package framework

import (
	"bufio"
	"fmt"
	"sort"
	"strings"
)

// ParseImagesTxt reads a release's images.txt (`make release` writes one `<ref>@<digest>` a
// line: every image index it pushed, and the chart) into ref -> digest.
func ParseImagesTxt(text string) (map[string]string, error) {
	out := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		ref, digest, ok := strings.Cut(line, "@")
		if !ok || ref == "" || !strings.HasPrefix(digest, "sha256:") {
			return nil, fmt.Errorf("images.txt line %d: %q is not <ref>@sha256:<digest>", n, line)
		}
		out[ref] = digest
	}
	return out, sc.Err()
}

// ReleaseWorkload is a DaemonSet or Deployment as the release check sees it.
type ReleaseWorkload struct {
	// Name is Kind/namespace/name.
	Name string
	// TemplateImages are the images of the pod template's containers.
	TemplateImages []string
	// Desired is how many pods the workload wants (a DaemonSet's desiredNumberScheduled, a
	// Deployment's replicas).
	Desired int32
	// Pods are the workload's live pods (terminating ones left out).
	Pods []ReleasePod
}

// ReleasePod is one pod of a workload: each container's image, the image ID the kubelet
// reports (the digest the node pulled) and readiness.
type ReleasePod struct {
	Name       string
	Containers []ReleaseContainer
}

type ReleaseContainer struct {
	Image, ImageID string
	Ready          bool
}

// ReleaseRollout decides whether the workloads run one release, and only it: every workload
// whose pod template names an image under repo (`<registry>/staticip/`) is a component of
// the release; each of its template's images under repo must be an image of the release
// (ref -> index digest, ParseImagesTxt), and each of its Desired pods must run exactly those
// images, Ready, with the image ID the node pulled for the release's digest (the kubelet
// reports `<repo>@<digest>` for an image pulled by tag: the digest the tag resolved to, the
// index). components are the workloads of the release (sorted); problems say what is not so
// yet (empty when it is), one line each.
func ReleaseRollout(repo string, release map[string]string, workloads []ReleaseWorkload) (components, problems []string) {
	for _, w := range workloads {
		var ours []string
		for _, im := range w.TemplateImages {
			if strings.HasPrefix(im, repo) {
				ours = append(ours, im)
			}
		}
		if len(ours) == 0 {
			continue
		}
		components = append(components, w.Name)
		for _, im := range ours {
			if _, ok := release[im]; !ok {
				problems = append(problems, fmt.Sprintf("%s: its template names %s, not an image of the release", w.Name, im))
			}
		}
		if int32(len(w.Pods)) != w.Desired {
			problems = append(problems, fmt.Sprintf("%s: %d pods, %d wanted", w.Name, len(w.Pods), w.Desired))
		}
		for _, p := range w.Pods {
			if len(p.Containers) != len(w.TemplateImages) {
				problems = append(problems, fmt.Sprintf("%s: pod %s has %d containers, the template %d", w.Name, p.Name, len(p.Containers), len(w.TemplateImages)))
				continue
			}
			for i, c := range p.Containers {
				want := w.TemplateImages[i]
				switch {
				case c.Image != want:
					problems = append(problems, fmt.Sprintf("%s: pod %s runs %s, the template names %s", w.Name, p.Name, c.Image, want))
				case !c.Ready:
					problems = append(problems, fmt.Sprintf("%s: pod %s's container of %s is not Ready", w.Name, p.Name, c.Image))
				case strings.HasPrefix(want, repo):
					digest := release[want]
					if digest != "" && !strings.HasSuffix(c.ImageID, "@"+digest) {
						problems = append(problems, fmt.Sprintf("%s: pod %s runs %s as %q, not the release's %s", w.Name, p.Name, c.Image, c.ImageID, digest))
					}
				}
			}
		}
	}
	sort.Strings(components)
	return components, problems
}
