package testenv

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/client"

	"github.com/capstanhq/capstan/internal/runtime/docker"
)

// BusyboxRef is the local image BusyboxImage builds.
const BusyboxRef = "capstan-test/busybox:latest"

// BusyboxPath is where Debian's busybox-static installs its binary.
const BusyboxPath = "/bin/busybox"

// busyboxLabel records which binary an image was built from, so a stale
// image left by an older busybox is rebuilt rather than reused.
const busyboxLabel = "capstan.test.busybox-sha256"

// busyboxApplets get a /bin symlink each; busybox picks the applet by the
// name it is run under.
var busyboxApplets = []string{
	"sh", "ash", "sleep", "wget", "nc", "cat", "echo", "ls", "ps", "httpd", "true", "false",
	"kill", "env", "id", "hostname", "mount", "touch", "mkdir", "rm", "head", "tail", "grep",
	"sed", "awk", "test", "[", "printf", "dd", "seq", "wc", "date", "ip", "ifconfig", "netstat",
	"nslookup", "ping", "uname", "whoami", "cut", "tee", "chmod", "ln", "cp", "mv", "pwd", "stat",
	"timeout", "xargs", "yes", "df", "free", "top", "pidof", "killall", "sync", "sysctl", "umount",
}

// busyboxMu serialises builds within the process; busyboxLockFile does so
// across the test binaries `go test ./...` runs in parallel, so they share
// one image instead of racing to retag it.
var (
	busyboxMu       sync.Mutex
	busyboxLockFile = filepath.Join(os.TempDir(), "capstan-test-busybox.lock")
)

// BusyboxImage returns the reference of a local image holding a static
// busybox (CMD ["sh"]), built from the host's /bin/busybox and imported
// into the engine. An image already built from the same binary is reused,
// and one that went missing (say, removed by a test) is built again. No
// registry is involved.
func BusyboxImage(t testing.TB) string {
	t.Helper()
	rt := RequireDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ref, err := EnsureBusyboxImage(ctx, rt)
	if err != nil {
		t.Fatalf("busybox test image: %v", err)
	}
	return ref
}

// EnsureBusyboxImage is BusyboxImage for programs without a testing.TB,
// such as benchmarks: it builds the image, or reuses it, and returns its
// reference.
func EnsureBusyboxImage(ctx context.Context, rt *docker.Runtime) (string, error) {
	if err := ensureBusybox(ctx, rt); err != nil {
		return "", err
	}
	return BusyboxRef, nil
}

func ensureBusybox(ctx context.Context, rt *docker.Runtime) error {
	bin, err := staticBusybox(BusyboxPath)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(bin)
	digest := hex.EncodeToString(sum[:])

	busyboxMu.Lock()
	defer busyboxMu.Unlock()
	lock, err := os.OpenFile(busyboxLockFile, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return err
	}
	defer lock.Close() // releases the flock too
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", busyboxLockFile, err)
	}

	c := rt.Client()
	if img, err := c.ImageInspect(ctx, BusyboxRef); err == nil &&
		img.Config != nil && img.Config.Labels[busyboxLabel] == digest {
		return nil
	}
	rootfs, err := busyboxRootfs(bin)
	if err != nil {
		return err
	}
	res, err := c.ImageImport(ctx,
		client.ImageImportSource{Source: bytes.NewReader(rootfs), SourceName: "-"},
		BusyboxRef,
		client.ImageImportOptions{Changes: []string{`CMD ["sh"]`, "LABEL " + busyboxLabel + "=" + digest}})
	if err != nil {
		return fmt.Errorf("import %s: %w", BusyboxRef, err)
	}
	defer res.Close()
	if err := drainJSONStream(res); err != nil {
		return fmt.Errorf("import %s: %w", BusyboxRef, err)
	}
	return nil
}

// staticBusybox reads the busybox binary and makes sure it needs no
// shared libraries, which an image without /lib would lack.
func staticBusybox(path string) ([]byte, error) {
	bin, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s is missing: install it with `apt-get install busybox-static`", path)
	}
	if err != nil {
		return nil, err
	}
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return nil, fmt.Errorf("%s is not an ELF binary: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return nil, fmt.Errorf("%s is dynamically linked: install the static build with `apt-get install busybox-static`", path)
		}
	}
	return bin, nil
}

// busyboxRootfs is the image's whole filesystem as a tar, with fixed
// times so the layer is identical on every build.
func busyboxRootfs(bin []byte) ([]byte, error) {
	mtime := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := func(name string, mode int64) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, ModTime: mtime})
	}
	file := func(name string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: mtime}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	var errs []error
	for _, d := range []string{"bin", "dev", "etc", "home", "proc", "sys", "usr", "usr/bin", "var"} {
		errs = append(errs, dir(d, 0o755))
	}
	errs = append(errs,
		dir("root", 0o700),
		dir("tmp", 0o1777),
		file("bin/busybox", 0o755, bin),
		file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")),
		file("etc/group", 0o644, []byte("root:x:0:\nnogroup:x:65534:\n")),
	)
	for _, a := range busyboxApplets {
		errs = append(errs, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + a, Linkname: "busybox", Mode: 0o777, ModTime: mtime}))
	}
	errs = append(errs, tw.Close())
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("busybox rootfs: %w", err)
	}
	return buf.Bytes(), nil
}

// drainJSONStream reads an engine progress stream to its end and returns
// the first error reported in it.
func drainJSONStream(r io.Reader) error {
	dec := json.NewDecoder(r)
	for {
		var m jsonstream.Message
		if err := dec.Decode(&m); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		if m.Error != nil {
			return errors.New(m.Error.Message)
		}
	}
}
