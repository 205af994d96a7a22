package bench

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/pprof"
	"os"
	"testing"
	"time"
)

// The harness takes CPU profiles back to back from a component serving /debug/pprof over
// TLS with a certificate of its own, until stopped, and keeps each complete window.
func TestCaptureCPUProfiles(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	srv := httptest.NewTLSServer(mux)
	defer srv.Close()
	dir := t.TempDir()
	stop := captureCPUProfiles(context.Background(), srv.URL, dir, "pass", time.Second)
	time.Sleep(2500 * time.Millisecond)
	files := stop()
	if len(files) < 2 {
		t.Fatalf("%d profiles after 2.5 s of 1 s windows, want at least 2: %v", len(files), files)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) { // a profile is gzipped protobuf
			t.Fatalf("%s is not a profile: %q", f, b[:min(len(b), 40)])
		}
	}
}
