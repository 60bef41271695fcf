package dev

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/runtime/docker"
)

// Sample programs, by directory under examples/, and their image names.
const (
	sampleTelemetry = "telemetry"
	sampleWebapp    = "webapp"
	imageRepo       = "capstan-sample/"
	module          = "module github.com/capstanhq/capstan"
)

// packing versions how images are packed: bump it when rootfs or the
// image changes, so images packed the old way are not reused.
const packing = "1"

// sampleImages are the references of the built images.
type sampleImages map[string]string

// sourceTree returns dir, or the Capstan checkout around the working
// directory, after checking it holds the sample programs.
func sourceTree(dir string) (string, error) {
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", err
		}
		for d := wd; ; d = filepath.Dir(d) {
			if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && strings.HasPrefix(string(b), module+"\n") {
				dir = d
				break
			}
			if filepath.Dir(d) == d {
				return "", fmt.Errorf("capstan dev builds its sample images from the Capstan source tree, and %s is not inside one: run it from a checkout (go run ./cmd/capstan dev)", wd)
			}
		}
	}
	for _, s := range []string{sampleTelemetry, sampleWebapp} {
		if _, err := os.Stat(filepath.Join(dir, "examples", s, "main.go")); err != nil {
			return "", fmt.Errorf("sample program %s is missing from %s: %w", s, dir, err)
		}
	}
	return dir, nil
}

// goToolchain finds the go command the sample programs are built with.
func goToolchain() (string, error) {
	p, err := exec.LookPath("go")
	if err != nil {
		return "", errors.New("capstan dev builds its sample programs with Go, but no `go` command is on PATH: install Go from https://go.dev/dl/ and run it again")
	}
	return p, nil
}

// buildImages makes one image per sample program, reusing an image built
// from the same source.
func buildImages(ctx context.Context, rt *docker.Runtime, goTool, src string, out *printer) (sampleImages, error) {
	info, err := rt.Info(ctx)
	if err != nil {
		return nil, err
	}
	imgs := sampleImages{}
	for _, name := range []string{sampleTelemetry, sampleWebapp} {
		dir := filepath.Join(src, "examples", name)
		sum, err := sourceHash(dir, info.Arch)
		if err != nil {
			return nil, err
		}
		ref := imageRepo + name + ":" + sum
		imgs[name] = ref
		if _, err := rt.Image(ctx, ref); err == nil {
			out.step("image %s (up to date)", ref)
			continue
		}
		out.step("building image %s from examples/%s", ref, name)
		bin, err := goBuild(ctx, goTool, dir, info.Arch)
		if err != nil {
			return nil, err
		}
		layer, err := rootfs(bin)
		if err != nil {
			return nil, err
		}
		changes := []string{
			`ENTRYPOINT ["/app"]`,
			"USER 65534:65534",
			"LABEL com.capstan.sample=" + name + " com.capstan.sample.source=" + sum,
		}
		if err := rt.ImportImage(ctx, bytes.NewReader(layer), ref, changes); err != nil {
			return nil, err
		}
		pruneImages(ctx, rt, imageRepo+name+":", ref)
	}
	return imgs, nil
}

// sourceHash names a build: the program's files, the target and packing.
func sourceHash(dir, arch string) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "packing %s\nlinux/%s\n", packing, arch)
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		// Tests are not in the binary.
		if err != nil || !e.Type().IsRegular() || strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		fmt.Fprintf(h, "%s %d\n", filepath.ToSlash(rel), len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("hash %s: %w", dir, err)
	}
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}

// goBuild compiles a static binary for the engine's platform.
func goBuild(ctx context.Context, goTool, dir, arch string) ([]byte, error) {
	tmp, err := os.MkdirTemp("", "capstan-dev-build-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "app")
	cmd := exec.CommandContext(ctx, goTool, "build", "-trimpath", "-ldflags=-s -w", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build %s: %w\n%s", dir, err, out)
	}
	return os.ReadFile(bin)
}

// rootfs is the image's filesystem: the program and the little a program
// expects around it. Fixed times keep the layer the same on every build.
func rootfs(bin []byte) ([]byte, error) {
	mtime := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	var errs []error
	dir := func(name string, mode int64) {
		errs = append(errs, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, ModTime: mtime}))
	}
	file := func(name string, mode int64, data []byte) {
		errs = append(errs, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: mtime}))
		_, err := tw.Write(data)
		errs = append(errs, err)
	}
	dir("etc", 0o755)
	dir("tmp", 0o1777)
	file("etc/passwd", 0o644, []byte("root:x:0:0:root:/:/app\nnobody:x:65534:65534:nobody:/tmp:/app\n"))
	file("etc/group", 0o644, []byte("root:x:0:\nnogroup:x:65534:\n"))
	file("app", 0o755, bin)
	errs = append(errs, tw.Close())
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("image filesystem: %w", err)
	}
	return buf.Bytes(), nil
}

// pruneImages removes earlier builds of a sample; one still used by a
// container, or tagged otherwise too, stays.
func pruneImages(ctx context.Context, rt *docker.Runtime, prefix, keep string) {
	imgs, err := rt.Images(ctx)
	if err != nil {
		return
	}
	for _, img := range imgs {
		notOld := func(t string) bool { return !strings.HasPrefix(t, prefix) || t == keep }
		if len(img.RepoTags) == 0 || slices.ContainsFunc(img.RepoTags, notOld) {
			continue
		}
		rt.RemoveImage(ctx, img.ID)
	}
}

// SampleImage builds (or reuses) the sample images from the checkout
// around the working directory and returns the reference of one of them
// ("telemetry" or "webapp"); tests run the sample daemon with it.
func SampleImage(ctx context.Context, rt *docker.Runtime, name string) (string, error) {
	src, err := sourceTree("")
	if err != nil {
		return "", err
	}
	goTool, err := goToolchain()
	if err != nil {
		return "", err
	}
	imgs, err := buildImages(ctx, rt, goTool, src, &printer{w: io.Discard})
	if err != nil {
		return "", err
	}
	ref, ok := imgs[name]
	if !ok {
		return "", fmt.Errorf("no sample program %q", name)
	}
	return ref, nil
}
