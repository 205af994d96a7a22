package framework

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseImagesTxt(t *testing.T) {
	got, err := ParseImagesTxt("r:5000/staticip/staticip-agent:v1@sha256:aa\n\nr:5000/staticip/charts/staticip:1@sha256:bb\n")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"r:5000/staticip/staticip-agent:v1": "sha256:aa", "r:5000/staticip/charts/staticip:1": "sha256:bb"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for _, bad := range []string{"r/staticip/agent:v1", "r/staticip/agent:v1@md5:aa", "@sha256:aa"} {
		if _, err := ParseImagesTxt(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestReleaseRollout(t *testing.T) {
	const repo = "r:5000/staticip/"
	rel := map[string]string{
		repo + "staticip-agent:v2":              "sha256:a2",
		repo + "staticip-controller-manager:v2": "sha256:c2",
	}
	agent := func(pods ...ReleasePod) ReleaseWorkload {
		return ReleaseWorkload{Name: "DaemonSet/kube-system/staticip-agent", TemplateImages: []string{repo + "staticip-agent:v2"}, Desired: 2, Pods: pods}
	}
	pod := func(name, image, id string, ready bool) ReleasePod {
		return ReleasePod{Name: name, Containers: []ReleaseContainer{{Image: image, ImageID: id, Ready: ready}}}
	}
	okPod := func(name string) ReleasePod {
		return pod(name, repo+"staticip-agent:v2", repo+"staticip-agent@sha256:a2", true)
	}
	kubeProxy := ReleaseWorkload{Name: "DaemonSet/kube-system/kube-proxy", TemplateImages: []string{"registry.k8s.io/kube-proxy:v1.36.3"}, Desired: 2,
		Pods: []ReleasePod{pod("kp", "registry.k8s.io/kube-proxy:v1.36.3", "sha256:x", false)}}
	for _, tc := range []struct {
		name       string
		workloads  []ReleaseWorkload
		components []string
		problems   []string // substrings, one per problem
	}{
		{name: "rolled", workloads: []ReleaseWorkload{agent(okPod("a1"), okPod("a2")), kubeProxy},
			components: []string{"DaemonSet/kube-system/staticip-agent"}},
		{name: "template still names the previous release",
			workloads:  []ReleaseWorkload{{Name: "Deployment/staticip-system/m", TemplateImages: []string{repo + "staticip-controller-manager:v1"}, Desired: 1, Pods: []ReleasePod{pod("m1", repo+"staticip-controller-manager:v1", repo+"staticip-controller-manager@sha256:c1", true)}}},
			components: []string{"Deployment/staticip-system/m"},
			problems:   []string{"staticip-controller-manager:v1, not an image of the release"}},
		{name: "a pod of the old template left", workloads: []ReleaseWorkload{agent(okPod("a1"), pod("a2", repo+"staticip-agent:v1", repo+"staticip-agent@sha256:a1", true))},
			components: []string{"DaemonSet/kube-system/staticip-agent"},
			problems:   []string{"pod a2 runs " + repo + "staticip-agent:v1, the template names"}},
		{name: "pods missing", workloads: []ReleaseWorkload{agent(okPod("a1"))},
			components: []string{"DaemonSet/kube-system/staticip-agent"}, problems: []string{"1 pods, 2 wanted"}},
		{name: "not ready", workloads: []ReleaseWorkload{agent(okPod("a1"), pod("a2", repo+"staticip-agent:v2", repo+"staticip-agent@sha256:a2", false))},
			components: []string{"DaemonSet/kube-system/staticip-agent"}, problems: []string{"pod a2's container of"}},
		{name: "another digest under the same tag (preloaded, or pulled before a re-push)",
			workloads:  []ReleaseWorkload{agent(okPod("a1"), pod("a2", repo+"staticip-agent:v2", "docker.io/library/import@sha256:ff", true))},
			components: []string{"DaemonSet/kube-system/staticip-agent"}, problems: []string{`runs ` + repo + `staticip-agent:v2 as "docker.io/library/import@sha256:ff", not the release's sha256:a2`}},
		{name: "no workload of the registry", workloads: []ReleaseWorkload{kubeProxy}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			comps, problems := ReleaseRollout(repo, rel, tc.workloads)
			if !reflect.DeepEqual(comps, tc.components) {
				t.Errorf("components %v, want %v", comps, tc.components)
			}
			if len(problems) != len(tc.problems) {
				t.Fatalf("problems %q, want %d like %q", problems, len(tc.problems), tc.problems)
			}
			for i, p := range problems {
				if !strings.Contains(p, tc.problems[i]) {
					t.Errorf("problem %q does not say %q", p, tc.problems[i])
				}
			}
		})
	}
}
