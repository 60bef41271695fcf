// Command mkdeb builds the capstan-agent .deb from the repository with
// nfpm: the static agent, its systemd unit and its env file (a conffile),
// with maintainer scripts that create the state directory and enable the
// unit. Run it from the repository root:
//
//	go run ./tools/mkdeb [-version 0.1.0] [-arch amd64] [-o bin] [-binary FILE]
//
// Without -binary it builds ./cmd/capstan-agent with CGO_ENABLED=0 and the
// version stamped in, so the agent reports the package's version.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"time"

	"github.com/goreleaser/nfpm/v2"
	"github.com/goreleaser/nfpm/v2/deb"
	"github.com/goreleaser/nfpm/v2/files"

	"github.com/capstanhq/capstan/internal/agent"
)

// versionFlag is the -X flag that stamps the agent's reported version.
const versionFlag = "github.com/capstanhq/capstan/internal/agent.Version"

var semver = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`)

func main() {
	version := flag.String("version", agent.Version, "package and agent version (MAJOR.MINOR.PATCH[-PRERELEASE])")
	arch := flag.String("arch", goruntime.GOARCH, "target architecture: amd64 or arm64")
	out := flag.String("o", "bin", "directory the .deb is written to")
	binary := flag.String("binary", "", "a static capstan-agent to package instead of building one (build it with the same version stamped in)")
	pkgDir := flag.String("packaging", "packaging", "directory holding capstan-agent.service, agent.env and deb/")
	flag.Parse()
	path, err := build(*version, *arch, *out, *binary, *pkgDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkdeb:", err)
		os.Exit(1)
	}
	fmt.Println(path)
}

func build(version, arch, out, binary, pkgDir string) (string, error) {
	if !semver.MatchString(version) {
		return "", fmt.Errorf("-version %q: must be MAJOR.MINOR.PATCH with an optional -PRERELEASE, e.g. 0.2.0 or 0.2.0-rc1", version)
	}
	if arch != "amd64" && arch != "arm64" {
		return "", fmt.Errorf("-arch %q: must be amd64 or arm64", arch)
	}
	for _, f := range []string{"capstan-agent.service", "agent.env", "deb/postinst", "deb/prerm", "deb/postrm"} {
		if _, err := os.Stat(filepath.Join(pkgDir, f)); err != nil {
			return "", fmt.Errorf("-packaging %s: %w (run from the repository root)", pkgDir, err)
		}
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", err
	}
	if binary == "" {
		tmp, err := os.MkdirTemp("", "mkdeb")
		if err != nil {
			return "", err
		}
		defer os.RemoveAll(tmp)
		binary = filepath.Join(tmp, "capstan-agent")
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X "+versionFlag+"="+version, "-o", binary, "./cmd/capstan-agent")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("go build ./cmd/capstan-agent: %w", err)
		}
	}

	mode := func(m os.FileMode) *files.ContentFileInfo {
		return &files.ContentFileInfo{Owner: "root", Group: "root", Mode: m}
	}
	info := &nfpm.Info{
		Name:        "capstan-agent",
		Arch:        arch,
		Platform:    "linux",
		Version:     version,
		Section:     "admin",
		Priority:    "optional",
		Maintainer:  "Capstan <capstan@localhost>",
		Description: "Capstan container instance agent\nRuns the tasks a Capstan control plane places on this machine, on the local Docker Engine.",
		Homepage:    "https://github.com/capstanhq/capstan",
		License:     "Apache-2.0",
		// Fixed mtime: the same inputs give the same package.
		MTime: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		Overridables: nfpm.Overridables{
			// Docker may come from Debian (docker.io) or Docker's own
			// repository (docker-ce), so it is recommended, not required.
			Recommends: []string{"docker.io | docker-ce"},
			Contents: files.Contents{
				{Source: binary, Destination: "/usr/bin/capstan-agent", FileInfo: mode(0o755)},
				{Source: filepath.Join(pkgDir, "capstan-agent.service"), Destination: "/lib/systemd/system/capstan-agent.service", FileInfo: mode(0o644)},
				{Destination: "/etc/capstan", Type: files.TypeDir, FileInfo: mode(0o755)},
				// A conffile: upgrades keep the operator's edits. 0600: it holds the secret.
				{Source: filepath.Join(pkgDir, "agent.env"), Destination: "/etc/capstan/agent.env", Type: files.TypeConfig, FileInfo: mode(0o600)},
			},
			Scripts: nfpm.Scripts{
				PostInstall: filepath.Join(pkgDir, "deb/postinst"),
				PreRemove:   filepath.Join(pkgDir, "deb/prerm"),
				PostRemove:  filepath.Join(pkgDir, "deb/postrm"),
			},
		},
	}
	info = nfpm.WithDefaults(info)
	if err := nfpm.PrepareForPackager(info, "deb"); err != nil {
		return "", err
	}
	path := filepath.Join(out, deb.Default.ConventionalFileName(info))
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	if err := deb.Default.Package(info, f); err != nil {
		f.Close()
		os.Remove(path)
		return "", err
	}
	return path, f.Close()
}
