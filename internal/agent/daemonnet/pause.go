package daemonnet

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/capstanhq/capstan/internal/runtime"
)

// PauseRepo is the repository of the namespace holder's image; the tag is
// the hash of the executable it was built from.
const PauseRepo = "capstan/pause"

// capstanMain is the main package a pause binary must come from: any other
// executable would not understand `pause` (a test binary would run its
// tests in the holder).
const capstanMain = "github.com/capstanhq/capstan/cmd/capstan"

// agentMain, the lean agent binary, understands `pause` too.
const agentMain = "github.com/capstanhq/capstan/cmd/capstan-agent"

// ErrNotStatic means the pause binary needs a dynamic loader and libraries
// that an image of one file lacks.
var ErrNotStatic = errors.New("not statically linked")

// CheckPauseBinary says why the executable at path cannot run as the
// namespace holder, or nil.
func CheckPauseBinary(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("pause binary %s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("pause binary %s is %w (built with cgo): build capstan with CGO_ENABLED=0, or point CAPSTAN_PAUSE_BINARY at such a build", path, ErrNotStatic)
		}
	}
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return fmt.Errorf("pause binary %s: not a Go executable: %w", path, err)
	}
	if bi.Path != capstanMain && bi.Path != agentMain {
		return fmt.Errorf("pause binary %s is %s, not the capstan command: point CAPSTAN_PAUSE_BINARY at a capstan executable", path, bi.Path)
	}
	return nil
}

// ensurePauseImage returns the holder image built from the executable at
// path, importing it unless an image from the same bytes is there.
func ensurePauseImage(ctx context.Context, rt Runtime, path string) (string, error) {
	if err := CheckPauseBinary(path); err != nil {
		return "", err
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	size, err := io.Copy(h, f)
	if err != nil {
		return "", fmt.Errorf("pause binary %s: %w", path, err)
	}
	ref := PauseRepo + ":" + hex.EncodeToString(h.Sum(nil))[:16]
	if _, err := rt.Image(ctx, ref); err == nil {
		return ref, nil
	} else if !errors.Is(err, runtime.ErrNotFound) {
		return "", err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	// Stream the tar: the executable is tens of megabytes.
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeRootfs(pw, f, size)) }()
	err = rt.ImportImage(ctx, pr, ref, []string{`ENTRYPOINT ["/pause", "pause"]`, "LABEL " + LabelRole + "=" + RolePause})
	pr.CloseWithError(err) // unblocks the writer if the import gave up early
	if err != nil {
		return "", err
	}
	return ref, nil
}

// writeRootfs writes the holder's filesystem: the executable as /pause and
// the directories the engine mounts over.
func writeRootfs(w io.Writer, bin io.Reader, size int64) error {
	mtime := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC) // same bytes, same layer
	tw := tar.NewWriter(w)
	for _, d := range []string{"dev", "etc", "proc", "sys", "tmp"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: mtime}); err != nil {
			return err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "pause", Mode: 0o755, Size: size, ModTime: mtime}); err != nil {
		return err
	}
	if _, err := io.CopyN(tw, bin, size); err != nil {
		return err
	}
	return tw.Close()
}
