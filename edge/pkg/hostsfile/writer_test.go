package hostsfile

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// version is the content of rewrite i: the same size for every i (so only the mtime tells a
// reader that it changed), with a checksum line that a partial read cannot satisfy.
func version(i int) []byte {
	body := fmt.Sprintf("10.0.%d.%d a-0.s.ns.svc.cluster.local\n", (i/250)%250, i%250)
	body = fmt.Sprintf("%-60s", strings.TrimSpace(body)) + "\n"
	return []byte(body + fmt.Sprintf("# end %08d\n", i))
}

func complete(b []byte) bool {
	lines := strings.Split(string(b), "\n")
	return len(lines) == 3 && strings.HasPrefix(lines[1], "# end ") && lines[2] == "" && len(b) == len(version(0))
}

// TestWriteAtomicUnderPolling: a reader polling the path while the file is rewritten 1,000
// times never sees it missing or partial, and every rewrite's mtime is strictly newer than
// the one before (even when the clock does not move).
func TestWriteAtomicUnderPolling(t *testing.T) {
	dir := t.TempDir()
	w := &Writer{Dir: dir, Name: "hosts"}
	if err := w.Write(version(0)); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var reads, bad atomic.Int64
	var firstBad atomic.Value
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				b, err := os.ReadFile(w.Path())
				reads.Add(1)
				if err != nil || !complete(b) {
					bad.Add(1)
					firstBad.CompareAndSwap(nil, fmt.Sprintf("err=%v content=%q", err, b))
				}
			}
		}()
	}
	prev := mtime(t, w.Path())
	for i := 1; i <= 1000; i++ {
		if i%2 == 0 {
			// Every other write with a frozen clock: the mtime must still move on.
			frozen := prev
			w.Now = func() time.Time { return frozen }
		} else {
			w.Now = nil
		}
		if err := w.Write(version(i)); err != nil {
			t.Fatal(err)
		}
		m := mtime(t, w.Path())
		if !m.After(prev) {
			t.Fatalf("rewrite %d: mtime %s not after %s", i, m.Format(time.RFC3339Nano), prev.Format(time.RFC3339Nano))
		}
		prev = m
	}
	stop.Store(true)
	wg.Wait()
	if bad.Load() > 0 {
		t.Fatalf("%d of %d reads saw a missing or partial file; first: %v", bad.Load(), reads.Load(), firstBad.Load())
	}
	if reads.Load() < 1000 {
		t.Logf("only %d reads during the rewrites (a slow machine); none was bad", reads.Load())
	}
	got, _ := os.ReadFile(w.Path())
	if !bytes.Equal(got, version(1000)) {
		t.Fatalf("final content %q", got)
	}
	assertNoTemps(t, dir)
	t.Logf("%d reads during 1,000 rewrites, all complete", reads.Load())
}

func mtime(t *testing.T, p string) time.Time {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.ModTime()
}

func assertNoTemps(t *testing.T, dir string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Name() != "hosts" && e.Name() != lockName("hosts") {
			t.Errorf("left in %s: %s", dir, e.Name())
		}
	}
}

func TestWriteErrorsLeavePreviousFile(t *testing.T) {
	t.Run("missing directory", func(t *testing.T) {
		w := &Writer{Dir: filepath.Join(t.TempDir(), "absent"), Name: "hosts"}
		err := w.Write([]byte("x"))
		var de *DirError
		if !errors.As(err, &de) || de.Reason != "DirMissing" || !strings.Contains(err.Error(), "does not exist") {
			t.Fatalf("got %v, want a DirMissing error", err)
		}
	})
	t.Run("not a directory", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "file")
		_ = os.WriteFile(f, nil, 0o644)
		var de *DirError
		if err := (&Writer{Dir: f, Name: "hosts"}).Write([]byte("x")); !errors.As(err, &de) || de.Reason != "NotADirectory" {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("directory not writable", func(t *testing.T) {
		// A read-only (0555) directory. Root writes into it anyway with CAP_DAC_OVERRIDE, so as
		// root the write runs in a child process without any capability (setpriv), like the
		// DaemonSet's container (uid 0, capabilities dropped).
		dir := t.TempDir()
		w := &Writer{Dir: dir, Name: "hosts"}
		if err := w.Write([]byte("old\n")); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Chmod(dir, 0o755) })
		var out []byte
		if os.Geteuid() == 0 {
			setpriv, err := exec.LookPath("setpriv")
			if err != nil {
				t.Skip("SKIP: running as root and no setpriv (util-linux) to drop CAP_DAC_OVERRIDE")
			}
			cmd := exec.Command(setpriv, "--bounding-set=-all", "--inh-caps=-all", "--", os.Args[0])
			cmd.Env = append(os.Environ(), "HOSTSFILE_CHILD_DIR="+dir)
			out, err = cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("child without capabilities: %v\n%s", err, out)
			}
		} else {
			out = []byte(childWrite(dir))
		}
		if !strings.Contains(string(out), "NotWritable: directory "+dir+" is not writable (the previous file is left intact)") {
			t.Fatalf("want a NotWritable error naming %s, got:\n%s", dir, out)
		}
		if b, _ := os.ReadFile(w.Path()); string(b) != "old\n" {
			t.Fatalf("previous file changed: %q", b)
		}
		assertNoTemps(t, dir)
	})
}

// TestMain: as the child process of "directory not writable" the binary only tries the write.
func TestMain(m *testing.M) {
	if dir := os.Getenv("HOSTSFILE_CHILD_DIR"); dir != "" {
		fmt.Println(childWrite(dir))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func childWrite(dir string) string {
	err := (&Writer{Dir: dir, Name: "hosts"}).Write([]byte("new\n"))
	var de *DirError
	if errors.As(err, &de) {
		return de.Reason + ": " + err.Error()
	}
	return fmt.Sprintf("unexpected: %v", err)
}

func TestWriteIfChangedAndStaleTemps(t *testing.T) {
	dir := t.TempDir()
	w := &Writer{Dir: dir, Name: "hosts"}
	if wrote, err := w.WriteIfChanged([]byte("a\n")); err != nil || !wrote {
		t.Fatalf("first write: %v %v", wrote, err)
	}
	m := mtime(t, w.Path())
	if wrote, err := w.WriteIfChanged([]byte("a\n")); err != nil || wrote {
		t.Fatalf("same content rewritten: %v %v", wrote, err)
	}
	if !mtime(t, w.Path()).Equal(m) {
		t.Fatal("mtime moved without a write")
	}
	// A killed writer's temporary file is removed; other files are not.
	_ = os.WriteFile(filepath.Join(dir, tempPrefix("hosts")+"123"), []byte("partial"), 0o600)
	_ = os.WriteFile(filepath.Join(dir, "other"), []byte("keep"), 0o600)
	if err := w.RemoveStaleTemps(); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != lockName("hosts")+",hosts,other" {
		t.Fatalf("after RemoveStaleTemps: %v", names)
	}
	if st, _ := os.Stat(w.Path()); st.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v, want 0644 (CoreDNS may run as another user)", st.Mode().Perm())
	}
}

// TestTwoWritersRace: two daemons on one node (an overlapping rollout, a force-deleted pod)
// write the same file through their own Writers (their own lock handles), each with content
// computed as of a moment, while a third restarts now and then (RemoveStaleTemps). The file
// never disappears, no write fails because another removed its temporary file, the content a
// reader sees never goes back to an older one, and the file ends with the newest content.
func TestTwoWritersRace(t *testing.T) {
	dir := t.TempDir()
	base := time.Now()
	var clock atomic.Int64 // the moment each content is computed as of: its version
	asOf := func(v int64) time.Time { return base.Add(time.Duration(v) * time.Microsecond) }
	first := &Writer{Dir: dir, Name: "hosts"}
	if _, err := first.WriteIfNewer(version(0), asOf(0)); err != nil {
		t.Fatal(err)
	}
	const perWriter = 400
	var stop atomic.Bool
	var problems sync.Map
	problem := func(kind, msg string) { problems.LoadOrStore(kind, msg) }
	var readers sync.WaitGroup
	readers.Add(1)
	go func() { // a reader that polls: never missing, never older than what it saw before
		defer readers.Done()
		seen := -1
		for !stop.Load() {
			b, err := os.ReadFile(filepath.Join(dir, "hosts"))
			if err != nil || !complete(b) {
				problem("missing or partial", fmt.Sprintf("err=%v content=%q", err, b))
				continue
			}
			var v int
			if _, err := fmt.Sscanf(strings.Split(string(b), "\n")[1], "# end %d", &v); err != nil {
				problem("unparsable", string(b))
				continue
			}
			if v < seen {
				problem("went back", fmt.Sprintf("version %d after %d", v, seen))
			}
			seen = v
		}
	}()
	readers.Add(1)
	go func() { // a daemon (re)starting: it cleans what killed writers left
		defer readers.Done()
		w := &Writer{Dir: dir, Name: "hosts"}
		for !stop.Load() {
			if err := w.RemoveStaleTemps(); err != nil {
				problem("clean", err.Error())
			}
		}
	}()
	var writers sync.WaitGroup
	for range 2 {
		writers.Add(1)
		go func() {
			defer writers.Done()
			w := &Writer{Dir: dir, Name: "hosts"}
			for range perWriter {
				v := clock.Add(1) // computed now; written a little later, maybe after a newer one
				if _, err := w.WriteIfNewer(version(int(v)), asOf(v)); err != nil {
					problem("write", err.Error())
				}
			}
		}()
	}
	writers.Wait()
	stop.Store(true)
	readers.Wait()
	problems.Range(func(k, v any) bool {
		t.Errorf("%s: %s", k, v)
		return true
	})
	if got, _ := os.ReadFile(first.Path()); !bytes.Equal(got, version(int(clock.Load()))) {
		t.Errorf("final content %q, want the newest (%d)", got, clock.Load())
	}
}
