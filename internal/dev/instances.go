package dev

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/capstanhq/capstan/internal/agent/engine"
	"github.com/capstanhq/capstan/internal/provision/local"
	"github.com/capstanhq/capstan/internal/runtime"
	"github.com/capstanhq/capstan/internal/runtime/docker"
)

// capstanMain is the package a usable agent binary is built from.
const capstanMain = "github.com/capstanhq/capstan/cmd/capstan"

// agentBinary returns the capstan executable the server's local
// provisioner runs instances with. It must be static: an instance also runs
// it as the holder of its daemons' network namespace, in an image with
// nothing else in it. This executable is used when it qualifies; `go run`
// builds with cgo, so dev usually builds one next to its state, once per
// source and toolchain: a later run with the same reuses it.
func agentBinary(ctx context.Context, goTool, src, dataDir string, out *printer) (string, error) {
	if exe, err := os.Executable(); err == nil && staticCapstan(exe) {
		return exe, nil
	}
	dir := filepath.Join(dataDir, "bin")
	path := filepath.Join(dir, "capstan")
	key, err := buildKey(ctx, goTool, src)
	if err != nil {
		return "", err
	}
	if b, err := os.ReadFile(path + ".key"); err == nil && string(b) == key && staticCapstan(path) {
		out.step("static capstan for the instances (up to date: %s)", path)
		return path, nil
	}
	out.step("building a static capstan for the instances (CGO_ENABLED=0 go build ./cmd/capstan; a first build takes a minute or two, later ones reuse it)")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	next := path + ".new"
	cmd := exec.CommandContext(ctx, goTool, "build", "-v", "-o", next, "./cmd/capstan")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if log, err := runWithProgress(cmd, out, "static capstan"); err != nil {
		return "", fmt.Errorf("build a static capstan for the instances (CGO_ENABLED=0 go build ./cmd/capstan): %w\n%s", err, log)
	}
	// Instances of an earlier run may still execute the old file: replace
	// it by renaming, never by writing into it.
	if err := os.Rename(next, path); err != nil {
		return "", err
	}
	return path, os.WriteFile(path+".key", []byte(key), 0o600)
}

// progressEvery is how often a long build says how far it got.
var progressEvery = 5 * time.Second

// runWithProgress runs a `go build -v`, which names each package as it
// compiles it, and prints every progressEvery how many it has compiled.
// It returns the build's output for an error message.
func runWithProgress(cmd *exec.Cmd, out *printer, what string) ([]byte, error) {
	r, w := io.Pipe()
	cmd.Stdout, cmd.Stderr = w, w
	var log bytes.Buffer
	var built atomic.Int64
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			log.Write(append(sc.Bytes(), '\n'))
			built.Add(1)
		}
		io.Copy(io.Discard, r)
	}()
	began := time.Now()
	tick := time.NewTicker(progressEvery)
	defer tick.Stop()
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, err
	}
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case err := <-done:
			w.Close()
			<-read
			if err == nil {
				out.step("built the %s in %.0fs (%s)", what, time.Since(began).Seconds(), compiled(built.Load()))
			}
			return log.Bytes(), err
		case <-tick.C:
			out.step("  building the %s: %s, %.0fs so far", what, compiled(built.Load()), time.Since(began).Seconds())
		}
	}
}

// compiled says how far a build got; go build -v names only the packages
// it compiles, not those it takes from its cache.
func compiled(n int64) string {
	if n == 0 {
		return "packages from Go's build cache, linking"
	}
	return fmt.Sprintf("%d packages compiled", n)
}

// buildKey names what a build of cmd/capstan depends on: the toolchain and
// target, and the module's Go files and requirements. Tests and testdata
// are not in the binary.
func buildKey(ctx context.Context, goTool, src string) (string, error) {
	h := sha256.New()
	ver, err := exec.CommandContext(ctx, goTool, "env", "GOVERSION", "GOOS", "GOARCH", "GOFLAGS").Output()
	if err != nil {
		return "", fmt.Errorf("go env: %w", err)
	}
	h.Write(ver)
	err = filepath.WalkDir(src, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := e.Name()
		if e.IsDir() {
			if path != src && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !e.Type().IsRegular() || !(strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") || name == "go.mod" || name == "go.sum") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		fmt.Fprintf(h, "%s %d\n", filepath.ToSlash(rel), len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("hash the source tree %s: %w", src, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func staticCapstan(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	bi, err := buildinfo.ReadFile(path)
	return err == nil && bi.Path == capstanMain
}

// instanceDir is where the server's local provisioner keeps its instances
// (server.Start puts them under the data directory).
func instanceDir(dataDir string) string { return filepath.Join(dataDir, "instances") }

// terminateInstances ends every local instance of the data directory: the
// agent process, the containers it ran, its directory. The server must be
// closed first, or its instances controller would replace them.
func terminateInstances(ctx context.Context, dataDir, binary string, rt *docker.Runtime, log *slog.Logger) (int, error) {
	p, err := local.New(binary, instanceDir(dataDir), rt, log)
	if err != nil {
		return 0, err
	}
	handles, err := p.Handles()
	if err != nil {
		return 0, err
	}
	var errs []error
	for _, h := range handles {
		if err := p.Terminate(ctx, h); err != nil {
			errs = append(errs, fmt.Errorf("terminate instance %s: %w", h, err))
		}
	}
	return len(handles), errors.Join(errs...)
}

// instanceArns lists the cluster's registered instances.
func (d *env) instanceArns(ctx context.Context) ([]string, error) {
	cis, err := d.instances(ctx)
	if err != nil {
		return nil, err
	}
	var arns []string
	for _, ci := range cis {
		arns = append(arns, aws.ToString(ci.ContainerInstanceArn))
	}
	return arns, nil
}

// removeContainers force-removes whatever containers of the given
// instances are left: a safety net behind the provisioner's own clean-up.
func removeContainers(ctx context.Context, rt *docker.Runtime, cluster string, arns []string) (int, error) {
	removed := 0
	var errs []error
	for _, arn := range arns {
		cs, err := rt.List(ctx, map[string]string{engine.LabelCluster: cluster, engine.LabelInstance: arn})
		if err != nil {
			return removed, err
		}
		for _, c := range cs {
			if err := rt.Remove(ctx, c.ID); err != nil {
				errs = append(errs, err)
				continue
			}
			removed++
		}
	}
	return removed, errors.Join(errs...)
}

// removeDaemonNetworks removes the cluster's networks no container uses
// any more. Instances' daemon networks outlive the instances (terminating
// one leaves it), and a stale one holds the subnet the next instance in
// its slot is given, which then cannot start.
func removeDaemonNetworks(ctx context.Context, rt *docker.Runtime, cluster string) (int, error) {
	nets, err := rt.Networks(ctx, map[string]string{engine.LabelCluster: cluster})
	if err != nil {
		return 0, err
	}
	removed := 0
	var errs []error
	for _, n := range nets {
		if len(n.Containers) > 0 {
			continue
		}
		if err := rt.RemoveNetwork(ctx, n.ID); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			errs = append(errs, err)
			continue
		}
		removed++
	}
	return removed, errors.Join(errs...)
}
