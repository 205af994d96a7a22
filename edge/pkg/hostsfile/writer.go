// Package hostsfile replaces a file atomically for a reader that polls it, such as CoreDNS's
// hosts plugin: the whole content goes into a temporary file in the same directory, is
// fsynced, gets an mtime strictly newer than the file it replaces, and is renamed over it.
// A reader always opens either the old or the new file, complete; the file is never absent.
//
// Writers of one file serialise on a lock file beside it (Dir/.Name.lock, flock): two
// daemons on one node (an overlapping rollout, a force-deleted pod) never remove each
// other's temporary files, and the lock file records the moment the file's content was
// computed as of, so content computed earlier never replaces content computed later
// (WriteIfNewer). flock is per open file: two Writers in one process exclude each other too.
//
// Why the mtime: the hosts plugin re-reads only when the mtime or the size changed, and a
// rewrite that keeps the size (10.0.0.5 -> 10.0.0.6) within one tick of the filesystem's
// clock would otherwise look unchanged to it. Why a directory: a bind mount of the file
// itself pins the inode it was created with and never sees a rename; CoreDNS must mount the
// directory.
package hostsfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// lockName is the writers' lock file of the file named name; it holds the asOf (Unix
// nanoseconds) of the content last written.
func lockName(name string) string { return "." + name + ".lock" }

// tempPrefix starts the temporary files of path's base name; they never match the target.
func tempPrefix(name string) string { return "." + name + ".tmp-" }

// Writer replaces Dir/Name.
type Writer struct {
	Dir  string
	Name string
	// Now is the clock (tests); nil: time.Now.
	Now func() time.Time
}

// Path is the file the writer replaces.
func (w *Writer) Path() string { return filepath.Join(w.Dir, w.Name) }

// DirError says the directory cannot take the file: missing, not a directory, not writable.
// The previous file (if any) is left as it was.
type DirError struct {
	Dir    string
	Reason string // DirMissing, NotADirectory, NotWritable
	Err    error
}

func (e *DirError) Error() string {
	switch e.Reason {
	case "DirMissing":
		return fmt.Sprintf("directory %s does not exist (is the hostPath volume mounted?): %v", e.Dir, e.Err)
	case "NotADirectory":
		return fmt.Sprintf("%s is not a directory", e.Dir)
	default:
		return fmt.Sprintf("directory %s is not writable (the previous file is left intact): %v", e.Dir, e.Err)
	}
}

func (e *DirError) Unwrap() error { return e.Err }

// Current returns the file's content (nil, nil when it does not exist).
func (w *Writer) Current() ([]byte, error) {
	b, err := os.ReadFile(w.Path())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return b, err
}

// WriteIfChanged writes data unless the file already holds exactly it; it reports whether
// it wrote. The content counts as computed now (see WriteIfNewer).
func (w *Writer) WriteIfChanged(data []byte) (bool, error) {
	return w.WriteIfNewer(data, w.now())
}

// WriteIfNewer writes data, computed as of asOf, unless the file already holds exactly it or
// holds content computed as of a later moment (another writer got there with newer content:
// not an error, nothing is written). It reports whether it wrote. Writers take the directory's
// lock for the whole comparison and replacement.
func (w *Writer) WriteIfNewer(data []byte, asOf time.Time) (bool, error) {
	var wrote bool
	err := w.locked(func(lock *os.File) error {
		last, err := readAsOf(lock)
		if err != nil {
			return err
		}
		if asOf.UnixNano() < last {
			return nil // a newer content is already there
		}
		if cur, err := w.Current(); err != nil || cur == nil || !bytes.Equal(cur, data) {
			if err := w.replace(data); err != nil {
				return err
			}
			wrote = true
		}
		return writeAsOf(lock, asOf.UnixNano())
	})
	return wrote, err
}

// Write replaces the file with data, computed now, whatever the file holds.
func (w *Writer) Write(data []byte) error {
	return w.locked(func(lock *os.File) error {
		last, err := readAsOf(lock)
		if err != nil {
			return err
		}
		if err := w.replace(data); err != nil {
			return err
		}
		return writeAsOf(lock, max(last, w.now().UnixNano()))
	})
}

func (w *Writer) now() time.Time {
	if w.Now != nil {
		return w.Now()
	}
	return time.Now()
}

// checkDir reports a directory that cannot take the file.
func (w *Writer) checkDir() error {
	st, err := os.Stat(w.Dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &DirError{Dir: w.Dir, Reason: "DirMissing", Err: err}
	case err != nil:
		return &DirError{Dir: w.Dir, Reason: "NotWritable", Err: err}
	case !st.IsDir():
		return &DirError{Dir: w.Dir, Reason: "NotADirectory"}
	}
	return nil
}

// locked runs fn holding the writers' lock of the file (flock LOCK_EX on Dir/.Name.lock;
// released by the kernel if the process dies).
func (w *Writer) locked(fn func(lock *os.File) error) error {
	if err := w.checkDir(); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(w.Dir, lockName(w.Name)), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return &DirError{Dir: w.Dir, Reason: "NotWritable", Err: err}
	}
	defer f.Close()
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	defer func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }()
	return fn(f)
}

// readAsOf is the asOf recorded in the lock file (0: none, or unreadable — a writer killed
// while recording it; the next write records it again).
func readAsOf(lock *os.File) (int64, error) {
	b := make([]byte, 32)
	n, err := lock.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("read %s: %w", lock.Name(), err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b[:n])), 10, 64)
	if err != nil {
		return 0, nil
	}
	return v, nil
}

func writeAsOf(lock *os.File, v int64) error {
	if err := lock.Truncate(0); err != nil {
		return fmt.Errorf("record in %s: %w", lock.Name(), err)
	}
	if _, err := lock.WriteAt([]byte(strconv.FormatInt(v, 10)+"\n"), 0); err != nil {
		return fmt.Errorf("record in %s: %w", lock.Name(), err)
	}
	return nil
}

// replace replaces the file with data: temporary file in Dir, write, fsync, mtime strictly
// newer than the current file's, rename over it, fsync the directory. On any error the
// temporary file is removed and the current file is untouched. The caller holds the lock.
func (w *Writer) replace(data []byte) error {
	tmp, err := os.CreateTemp(w.Dir, tempPrefix(w.Name))
	if err != nil {
		return &DirError{Dir: w.Dir, Reason: "NotWritable", Err: err}
	}
	done := false
	defer func() {
		if !done {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	// CreateTemp makes 0600; CoreDNS may run as another user.
	if err := tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("chmod %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp.Name(), err)
	}
	if err := w.newerMtime(tmp.Name()); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), w.Path()); err != nil {
		return fmt.Errorf("rename %s over %s: %w", tmp.Name(), w.Path(), err)
	}
	done = true
	// The rename is durable once the directory is synced; the content already is.
	if d, err := os.Open(w.Dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// newerMtime sets tmp's mtime to now, or later than the current file's mtime when the clock
// has not moved past it (same filesystem tick, clock stepped back). Filesystems that store
// coarse timestamps round it down: it is read back and pushed a whole second on if needed.
func (w *Writer) newerMtime(tmp string) error {
	want := w.now()
	cur, err := os.Stat(w.Path())
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("stat %s: %w", w.Path(), err)
	}
	prev := cur.ModTime()
	if !want.After(prev) {
		want = prev.Add(time.Microsecond)
	}
	for range 3 {
		if err := os.Chtimes(tmp, want, want); err != nil {
			return fmt.Errorf("set mtime of %s: %w", tmp, err)
		}
		st, err := os.Stat(tmp)
		if err != nil {
			return err
		}
		if st.ModTime().After(prev) {
			return nil
		}
		want = prev.Truncate(time.Second).Add(time.Second)
	}
	return fmt.Errorf("cannot give %s an mtime newer than %s's (%s)", tmp, w.Path(), cur.ModTime())
}

// RemoveStaleTemps removes temporary files a killed writer left in Dir (only this file's:
// hidden files named after the target), holding the lock: never one a live writer is filling.
func (w *Writer) RemoveStaleTemps() error {
	return w.locked(func(*os.File) error {
		entries, err := os.ReadDir(w.Dir)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), tempPrefix(w.Name)) {
				if err := os.Remove(filepath.Join(w.Dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return err
				}
			}
		}
		return nil
	})
}
