package dev

import (
	"context"
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"

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
// builds with cgo, so dev usually builds one next to its state.
func agentBinary(ctx context.Context, goTool, src, dataDir string, out *printer) (string, error) {
	if exe, err := os.Executable(); err == nil && staticCapstan(exe) {
		return exe, nil
	}
	out.step("building a static capstan for the instances (CGO_ENABLED=0 go build ./cmd/capstan)")
	dir := filepath.Join(dataDir, "bin")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "capstan")
	next := path + ".new"
	cmd := exec.CommandContext(ctx, goTool, "build", "-o", next, "./cmd/capstan")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build a static capstan for the instances (CGO_ENABLED=0 go build ./cmd/capstan): %w\n%s", err, out)
	}
	// Instances of an earlier run may still execute the old file: replace
	// it by renaming, never by writing into it.
	return path, os.Rename(next, path)
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
