package testenv

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/runtime"
)

func TestBusyboxRootfs(t *testing.T) {
	rootfs, err := busyboxRootfs([]byte("binary"))
	if err != nil {
		t.Fatal(err)
	}
	entries := map[string]*tar.Header{}
	tr := tar.NewReader(bytes.NewReader(rootfs))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		entries[h.Name] = h
	}
	if h := entries["bin/busybox"]; h == nil || h.Mode != 0o755 || h.Size != 6 {
		t.Errorf("bin/busybox = %+v", h)
	}
	for _, a := range []string{"sh", "sleep", "nc", "httpd", "wget", "true", "false", "kill", "env", "id", "hostname", "mount"} {
		if h := entries["bin/"+a]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "busybox" {
			t.Errorf("bin/%s = %+v, want a symlink to busybox", a, h)
		}
	}
	if h := entries["tmp/"]; h == nil || h.Mode != 0o1777 {
		t.Errorf("tmp = %+v, want mode 1777", h)
	}
	if h := entries["etc/passwd"]; h == nil {
		t.Error("no /etc/passwd")
	}
	again, _ := busyboxRootfs([]byte("binary"))
	if !bytes.Equal(rootfs, again) {
		t.Error("rootfs tar differs between builds")
	}
}

func TestStaticBusyboxChecks(t *testing.T) {
	_, err := staticBusybox(filepath.Join(t.TempDir(), "busybox"))
	if err == nil || !strings.Contains(err.Error(), "apt-get install busybox-static") {
		t.Errorf("missing binary: %v, want the install hint", err)
	}
	// Debian's /bin/sh (dash) stands in for the dynamic busybox package.
	if _, err := staticBusybox("/bin/sh"); err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Errorf("dynamic binary: %v, want it refused", err)
	}
	notELF := filepath.Join(t.TempDir(), "script")
	os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755)
	if _, err := staticBusybox(notELF); err == nil {
		t.Error("a script passed as busybox")
	}
}

func TestBusyboxImage(t *testing.T) {
	rt := RequireDocker(t)
	ref := BusyboxImage(t)
	ctx := t.Context()
	before, err := rt.Image(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	// A build with the same binary reuses the image.
	if err := ensureBusybox(ctx, rt); err != nil {
		t.Fatal(err)
	}
	if after, err := rt.Image(ctx, ref); err != nil || after.ID != before.ID {
		t.Errorf("image rebuilt: %s → %s (%v)", before.ID, after.ID, err)
	}

	labels := UniqueLabels(t, rt)
	id, err := rt.Create(ctx, runtime.ContainerSpec{Image: ref, Labels: labels, User: "nobody",
		Cmd: []string{"sh", "-c", "id -un; ls /tmp && touch /tmp/x && echo ok"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := rt.Inspect(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if c.State == runtime.StateExited {
			if c.ExitCode != 0 {
				t.Errorf("exit code %d", c.ExitCode)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("container did not exit")
		}
		time.Sleep(20 * time.Millisecond)
	}
	rc, err := rt.Logs(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	out, _ := io.ReadAll(rc)
	if string(out) != "nobody\nok\n" {
		t.Errorf("output = %q", out)
	}
}

func TestUniqueLabelsCleanup(t *testing.T) {
	rt := RequireDocker(t)
	image := BusyboxImage(t)
	var labels map[string]string
	t.Run("inner", func(t *testing.T) {
		labels = UniqueLabels(t, rt)
		id, err := rt.Create(t.Context(), runtime.ContainerSpec{Image: image, Labels: labels, Cmd: []string{"sleep", "1000"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := rt.Start(t.Context(), id); err != nil {
			t.Fatal(err)
		}
	})
	cs, err := rt.List(context.Background(), labels)
	if err != nil || len(cs) != 0 {
		t.Errorf("after cleanup: %d containers (%v), want none", len(cs), err)
	}
}
