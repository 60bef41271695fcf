package server

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// LockFile is the file in a data directory whose flock marks it in use.
const LockFile = "capstan.lock"

// DataDirLock is a held lock on a data directory; Release gives it up, and
// so does the end of the process.
type DataDirLock struct{ f *os.File }

// ErrDataDirInUse is what LockDataDir's error wraps when another process
// holds the lock.
var ErrDataDirInUse = errors.New("data directory in use")

// LockDataDir creates dir if needed and takes its lock without waiting.
// who names the holder ("capstan dev") for the message a second process
// gets, which also names the holder's pid.
func LockDataDir(dir, who string) (*DataDirLock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data dir lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is used by %s; stop that one first, or pick another --data-dir", ErrDataDirInUse, dir, holder(path))
		}
		return nil, fmt.Errorf("data dir lock %s: %w", path, err)
	}
	// The holder's line is written after the lock is ours, so a reader
	// never sees a half-written one for long (holder retries).
	// Best effort: the lock holds without it.
	if f.Truncate(0) == nil {
		f.WriteAt(fmt.Appendf(nil, "%d %s\n", os.Getpid(), who), 0)
	}
	return &DataDirLock{f: f}, nil
}

// holder describes the process named in the lock file.
func holder(path string) string {
	for range 20 {
		b, _ := os.ReadFile(path)
		pid, who, ok := strings.Cut(strings.TrimSpace(string(b)), " ")
		if _, err := strconv.Atoi(pid); ok && err == nil {
			return fmt.Sprintf("%s (pid %s)", who, pid)
		}
		// The holder may be between truncating and writing its line.
		time.Sleep(25 * time.Millisecond)
	}
	return "another process"
}

// Release unlocks. The file stays: removing it would let a third process
// lock a new file while a second still holds the old one.
func (l *DataDirLock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
