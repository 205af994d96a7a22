package bench

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// ProfileWindow is the length of each CPU profile CaptureCPUProfiles takes.
const ProfileWindow = 5 * time.Second

// CaptureCPUProfiles takes CPU profiles of a component serving /debug/pprof on loopback
// (base: https://127.0.0.1:PORT), back to back in windows of ProfileWindow, into
// dir/prefix-NNN.pprof until stop is called; stop returns the files written. The window
// running when stop is called is cancelled and lost (at most ProfileWindow of the pass).
// Merge a pass's windows with `go tool pprof -top dir/prefix-*.pprof`.
func CaptureCPUProfiles(ctx context.Context, base, dir, prefix string) (stop func() []string) {
	return captureCPUProfiles(ctx, base, dir, prefix, ProfileWindow)
}

func captureCPUProfiles(ctx context.Context, base, dir, prefix string, window time.Duration) (stop func() []string) {
	ctx, cancel := context.WithCancel(ctx)
	// A failure to create dir shows as no profiles (fetchProfile cannot write).
	_ = os.MkdirAll(dir, 0o755)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // loopback, the component's self-signed certificate
	url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, int(window/time.Second))
	var (
		wg    sync.WaitGroup
		files []string
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			path := filepath.Join(dir, fmt.Sprintf("%s-%03d.pprof", prefix, i))
			if err := fetchProfile(ctx, client, url, path); err != nil {
				if ctx.Err() == nil {
					// Not serving yet (the scheduler is starting) or a failed window: try again.
					select {
					case <-ctx.Done():
					case <-time.After(200 * time.Millisecond):
					}
				}
				i--
				continue
			}
			files = append(files, path)
		}
	}()
	return func() []string {
		cancel()
		wg.Wait()
		return files
	}
}

// fetchProfile writes one profile from url to path.
func fetchProfile(ctx context.Context, client *http.Client, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
