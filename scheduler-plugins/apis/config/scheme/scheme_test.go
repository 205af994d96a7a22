package scheme_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedvalidation "k8s.io/kubernetes/pkg/scheduler/apis/config/validation"

	"github.com/staticip/staticip/internal/testenv"
	"github.com/staticip/staticip/scheduler-plugins/apis/config"
	_ "github.com/staticip/staticip/scheduler-plugins/apis/config/scheme"
	"github.com/staticip/staticip/scheduler-plugins/apis/config/validation"
)

func argsOf(t *testing.T, prof schedconfig.KubeSchedulerProfile) (*config.PodFitsResourcesWithStaticIPArgs, *config.CheckPodAnnotationWithStaticIPArgs) {
	t.Helper()
	var fit *config.PodFitsResourcesWithStaticIPArgs
	var check *config.CheckPodAnnotationWithStaticIPArgs
	for _, pc := range prof.PluginConfig {
		switch a := pc.Args.(type) {
		case *config.PodFitsResourcesWithStaticIPArgs:
			fit = a
		case *config.CheckPodAnnotationWithStaticIPArgs:
			check = a
		}
	}
	if fit == nil || check == nil {
		t.Fatalf("profile %s: plugin args not decoded into the staticip types: %+v", prof.SchedulerName, prof.PluginConfig)
	}
	return fit, check
}

func enabled(set schedconfig.PluginSet, name string) bool {
	for _, p := range set.Enabled {
		if p.Name == name {
			return true
		}
	}
	return false
}

// TestManifestConfigs loads the shipped KubeSchedulerConfigurations with kube-scheduler's
// own loader (decode, default, convert) and validator.
func TestManifestConfigs(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		file, profile, lease string
	}{
		{"manifests/scheduler/replace-default/scheduler-config.yaml", "default-scheduler", "kube-scheduler"},
		{"manifests/scheduler/second-scheduler/scheduler-config.yaml", "staticip-scheduler", "staticip-scheduler"},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			cfg, err := options.LoadConfigFromFile(klog.Background(), filepath.Join(root, tc.file))
			if err != nil {
				t.Fatalf("loading %s: %v", tc.file, err)
			}
			if err := schedvalidation.ValidateKubeSchedulerConfiguration(cfg); err != nil {
				t.Fatalf("validating %s: %v", tc.file, err)
			}
			if !cfg.LeaderElection.LeaderElect || cfg.LeaderElection.ResourceLock != "leases" || cfg.LeaderElection.ResourceName != tc.lease {
				t.Fatalf("leader election = %+v, want a Lease named %s", cfg.LeaderElection, tc.lease)
			}
			if len(cfg.Profiles) != 1 || cfg.Profiles[0].SchedulerName != tc.profile {
				t.Fatalf("profiles = %+v, want exactly %s", cfg.Profiles, tc.profile)
			}
			prof := cfg.Profiles[0]
			fit, check := argsOf(t, prof)
			if !fit.CheckIPs || fit.NodesWithoutIPRange != config.NodesWithoutIPRangeAllow || check.UnknownIP != config.UnknownIPReject {
				t.Fatalf("args = %+v %+v", fit, check)
			}
			if err := validation.ValidatePodFitsResourcesWithStaticIPArgs(nil, fit); err != nil {
				t.Fatal(err)
			}
			if err := validation.ValidateCheckPodAnnotationWithStaticIPArgs(nil, check); err != nil {
				t.Fatal(err)
			}
			if !enabled(prof.Plugins.MultiPoint, "PodFitsResourcesWithStaticIP") || !enabled(prof.Plugins.MultiPoint, "CheckPodAnnotationWithStaticIP") {
				t.Fatalf("plugins not enabled: %+v", prof.Plugins.MultiPoint)
			}
			if !enabled(prof.Plugins.MultiPoint, "NodeResourcesFit") {
				t.Fatal("NodeResourcesFit must stay enabled (scoring; see README)")
			}
		})
	}
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const header = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
profiles:
- schedulerName: default-scheduler
  plugins:
    multiPoint:
      enabled:
      - name: CheckPodAnnotationWithStaticIP
      - name: PodFitsResourcesWithStaticIP
`

func TestArgsDefaultedWhenOmitted(t *testing.T) {
	cfg, err := options.LoadConfigFromFile(klog.Background(), writeConfig(t, header))
	if err != nil {
		t.Fatal(err)
	}
	fit, check := argsOf(t, cfg.Profiles[0])
	if !fit.CheckIPs || fit.NodesWithoutIPRange != config.NodesWithoutIPRangeAllow {
		t.Fatalf("PodFitsResourcesWithStaticIP defaults = %+v", fit)
	}
	if check.UnknownIP != config.UnknownIPReject {
		t.Fatalf("CheckPodAnnotationWithStaticIP defaults = %+v", check)
	}
}

func TestBadArgs(t *testing.T) {
	// An unknown field is rejected by the strict decoder.
	_, err := options.LoadConfigFromFile(klog.Background(), writeConfig(t, header+`  pluginConfig:
  - name: PodFitsResourcesWithStaticIP
    args:
      checkIP: true
`))
	if err == nil || !strings.Contains(err.Error(), "checkIP") {
		t.Fatalf("unknown field: err = %v", err)
	}
	// Bad values fail the load itself: TestBadArgsFailTheLoad.
}
