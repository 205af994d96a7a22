package ipam

import (
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// lockFile takes an exclusive flock on path, waiting at most timeout.
//
// bbolt's own file lock polls every 50 ms, which under 32 concurrent CNI invocations turns into
// convoys of sleeping processes. A blocking flock on a side file instead wakes the next waiter
// as soon as the holder closes, and bbolt's own lock is then always free on the first try.
func lockFile(path string, timeout time.Duration) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	fd := int(f.Fd())
	if err := flock(fd, unix.LOCK_EX|unix.LOCK_NB); err == nil {
		return f, nil
	} else if !errors.Is(err, unix.EWOULDBLOCK) {
		f.Close()
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- flock(fd, unix.LOCK_EX) }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case err := <-done:
		if err != nil {
			f.Close()
			return nil, err
		}
		return f, nil
	case <-timer.C:
		// The blocked flock cannot be cancelled; close the file once it returns so that a
		// long-running caller (the node agent) does not end up holding the lock.
		go func() {
			<-done
			f.Close()
		}()
		return nil, errLockTimeout
	}
}

var errLockTimeout = errors.New("lock timeout")

func flock(fd, how int) error {
	for {
		err := unix.Flock(fd, how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
