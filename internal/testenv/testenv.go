// Package testenv starts a real etcd + kube-apiserver for integration tests, with the
// staticip CRDs installed, and hands back a rest.Config.
//
// The binaries come from _output/bin, built from the module versions go.mod pins
// (tools/build-k8s-bins.sh, `make k8s-bins`); nothing is downloaded. See README.md for why
// this uses controller-runtime's envtest.
package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/staticip/staticip/internal/reporoot"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// ModulePath identifies the repository root (the go.mod with this module line).
const ModulePath = reporoot.ModulePath

// Env is a running control plane.
type Env struct {
	// Config reaches the API server as a cluster admin.
	Config *rest.Config
	// ServerVersion is what the API server reports, e.g. v1.36.3.
	ServerVersion string

	env *envtest.Environment
}

// Stop stops kube-apiserver and etcd and removes their data.
func (e *Env) Stop() error {
	if e == nil || e.env == nil {
		return nil
	}
	return e.env.Stop()
}

// ErrBinariesUnavailable means etcd or kube-apiserver could not be found or built; tests
// that need the control plane skip with this message, never silently.
var ErrBinariesUnavailable = errors.New("testenv: etcd/kube-apiserver unavailable")

// RepoRoot finds the repository root from the working directory (internal/reporoot).
func RepoRoot() (string, error) {
	root, err := reporoot.Find()
	if err != nil {
		return "", fmt.Errorf("testenv: %w", err)
	}
	return root, nil
}

// BinDir is where the Kubernetes binaries live: $STATICIP_BIN_DIR or <repo>/_output/bin.
func BinDir() (string, error) {
	if d := os.Getenv("STATICIP_BIN_DIR"); d != "" {
		return d, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "_output", "bin"), nil
}

var buildOnce sync.Once
var buildErr error

// ensureBinaries builds etcd and kube-apiserver when they are missing.
func ensureBinaries(binDir string) error {
	missing := func() bool {
		for _, b := range []string{"etcd", "kube-apiserver"} {
			if _, err := os.Stat(filepath.Join(binDir, b)); err != nil {
				return true
			}
		}
		return false
	}
	if !missing() {
		return nil
	}
	buildOnce.Do(func() {
		root, err := RepoRoot()
		if err != nil {
			buildErr = err
			return
		}
		fmt.Fprintf(os.Stderr, "testenv: %s lacks etcd/kube-apiserver; building them (tools/build-k8s-bins.sh)\n", binDir)
		cmd := exec.Command(filepath.Join(root, "tools", "build-k8s-bins.sh"))
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		buildErr = cmd.Run()
	})
	if buildErr != nil {
		return fmt.Errorf("%w: build failed: %v", ErrBinariesUnavailable, buildErr)
	}
	if missing() {
		return fmt.Errorf("%w: still missing in %s after the build", ErrBinariesUnavailable, binDir)
	}
	return nil
}

// Start starts etcd + kube-apiserver from BinDir and installs manifests/crds.
func Start() (*Env, error) { return StartWith(Options{}) }

// Options change the control plane Start brings up.
type Options struct {
	// APIServerArgs are extra kube-apiserver flags (name without dashes → value), e.g.
	// "feature-gates": "MaxUnavailableStatefulSet=true".
	APIServerArgs map[string]string
}

// StartWith is Start with extra options.
func StartWith(opts Options) (*Env, error) {
	binDir, err := BinDir()
	if err != nil {
		return nil, err
	}
	if err := ensureBinaries(binDir); err != nil {
		return nil, err
	}
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory:    binDir,
		CRDDirectoryPaths:        []string{filepath.Join(root, "manifests", "crds")},
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: 2 * time.Minute, // 2 shared cores: a cold apiserver can be slow
		ControlPlaneStopTimeout:  time.Minute,
		// envtest waits 10 s by default for the CRDs to be served; a loaded 2-core machine
		// (a full `make test` runs several test binaries, each with its own apiserver) can
		// take longer, and a timeout here fails every test of the binary.
		CRDInstallOptions:        envtest.CRDInstallOptions{MaxTime: 2 * time.Minute},
		AttachControlPlaneOutput: os.Getenv("TESTENV_VERBOSE") != "",
	}
	if len(opts.APIServerArgs) > 0 {
		args := env.ControlPlane.GetAPIServer().Configure()
		for k, v := range opts.APIServerArgs {
			args.Set(k, v)
		}
	}
	start := time.Now()
	cfg, err := env.Start()
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("testenv: starting etcd + kube-apiserver from %s: %w", binDir, err)
	}
	// Tests create many objects quickly; the default client-side limits only slow them down.
	cfg.QPS, cfg.Burst = 200, 400
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	v, err := dc.ServerVersion()
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("testenv: API server does not answer /version: %w", err)
	}
	fmt.Fprintf(os.Stderr, "testenv: real etcd + kube-apiserver %s from %s at %s (started and CRDs installed in %s)\n",
		v.GitVersion, binDir, cfg.Host, time.Since(start).Round(time.Millisecond))
	return &Env{Config: cfg, ServerVersion: v.GitVersion, env: env}, nil
}

// shared is the control plane of the current test binary, started by Main.
var (
	shared     *Env
	sharedSkip error
)

// Main is a TestMain helper: it starts the control plane, runs the tests and stops it.
// When the binaries cannot be built, tests calling Get skip with the reason; any other
// start failure fails the whole test binary.
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
func Main(m *testing.M) {
	env, err := Start()
	switch {
	case errors.Is(err, ErrBinariesUnavailable):
		sharedSkip = err
		fmt.Fprintf(os.Stderr, "testenv: integration tests will SKIP: %v\n", err)
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shared = env
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: stop: %v\n", err)
	}
	os.Exit(code)
}

// Get returns the control plane started by Main, or skips t with the reason it is missing.
func Get(t testing.TB) *Env {
	t.Helper()
	if shared == nil {
		if sharedSkip != nil {
			t.Skipf("SKIP (control plane unavailable): %v", sharedSkip)
		}
		t.Fatal("testenv.Get called without testenv.Main in TestMain")
	}
	return shared
}

// Context returns a context that ends with the test (or after timeout).
func Context(t testing.TB, timeout time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return ctx
}
