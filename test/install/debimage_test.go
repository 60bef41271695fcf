package install

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// No registry is reachable, so the Debian image the .deb is installed into
// is made from this host's own Debian files: the installed packages dpkg
// and a POSIX shell need (with their dependencies, from dpkg's database),
// plus systemctl and its libraries so that the postinst can enable the
// unit. The image is tagged by the hash of its tarball and reused.

// debianRepo is the repository of the locally made image.
const debianRepo = "capstan-test/debian-dpkg"

// basePackages are what dpkg -i and POSIX maintainer scripts use.
var basePackages = []string{"base-files", "dpkg", "dash", "coreutils", "tar", "diffutils", "findutils",
	"sed", "grep", "libc-bin", "debianutils", "gzip"}

// debianImage returns the reference of the image, importing it if needed.
func debianImage(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat("/var/lib/dpkg/status"); err != nil {
		t.Fatalf("the Debian test image is made from this host's dpkg database: %v", err)
	}
	tarball := filepath.Join(t.TempDir(), "rootfs.tar")
	sum, err := writeDebianRoot(tarball)
	if err != nil {
		t.Fatalf("debian root: %v", err)
	}
	ref := debianRepo + ":" + sum[:16]
	if _, err := run(t, "", nil, "docker", "image", "inspect", ref); err == nil {
		return ref
	}
	docker(t, "import", "--change", `CMD ["/bin/sh"]`, tarball, ref)
	return ref
}

// pkgInfo is one installed package of the host.
type pkgInfo struct {
	name   string // with :arch when dpkg lists it so
	deps   []string
	stanza string
}

// hostPackages reads the host's dpkg status: installed packages by name.
func hostPackages() (map[string]*pkgInfo, error) {
	b, err := os.ReadFile("/var/lib/dpkg/status")
	if err != nil {
		return nil, err
	}
	pkgs := map[string]*pkgInfo{}
	for _, stanza := range strings.Split(string(b), "\n\n") {
		var p pkgInfo
		installed := false
		for _, line := range strings.Split(stanza, "\n") {
			k, v, ok := strings.Cut(line, ": ")
			if !ok {
				continue
			}
			switch k {
			case "Package":
				p.name = v
			case "Status":
				installed = strings.HasSuffix(v, " installed")
			case "Depends", "Pre-Depends":
				for _, alt := range strings.Split(v, ",") {
					p.deps = append(p.deps, strings.TrimSpace(alt))
				}
			}
		}
		if p.name != "" && installed {
			p.stanza = strings.TrimSpace(stanza)
			pkgs[p.name] = &p
		}
	}
	return pkgs, nil
}

// closure is the packages wanted plus everything they depend on, taking the
// first installed choice of each alternative.
func closure(pkgs map[string]*pkgInfo, want []string) ([]string, error) {
	seen := map[string]bool{}
	var visit func(string) error
	visit = func(name string) error {
		if seen[name] {
			return nil
		}
		p, ok := pkgs[name]
		if !ok {
			return fmt.Errorf("package %s is not installed on this host", name)
		}
		seen[name] = true
		for _, dep := range p.deps {
			for _, alt := range strings.Split(dep, "|") {
				n := strings.Fields(alt)[0]
				n, _, _ = strings.Cut(n, ":")
				if _, ok := pkgs[n]; ok {
					if err := visit(n); err != nil {
						return err
					}
					break
				}
			}
		}
		return nil
	}
	for _, w := range want {
		if err := visit(w); err != nil {
			return nil, err
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	slices.Sort(out)
	return out, nil
}

// listFile is the dpkg file list of an installed package.
func listFile(name string) (string, error) {
	for _, f := range []string{name + ".list", name + ":amd64.list", name + ":arm64.list"} {
		p := filepath.Join("/var/lib/dpkg/info", f)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no file list for %s", name)
}

// writeDebianRoot writes the root filesystem tarball and returns its hash.
func writeDebianRoot(path string) (string, error) {
	pkgs, err := hostPackages()
	if err != nil {
		return "", err
	}
	names, err := closure(pkgs, basePackages)
	if err != nil {
		return "", err
	}
	var paths, lists []string
	var status strings.Builder
	for _, n := range names {
		lf, err := listFile(n)
		if err != nil {
			return "", err
		}
		lists = append(lists, lf)
		b, err := os.ReadFile(lf)
		if err != nil {
			return "", err
		}
		for _, p := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if strings.HasPrefix(p, "/usr/share/doc") || strings.HasPrefix(p, "/usr/share/man") || strings.HasPrefix(p, "/usr/share/locale") || strings.HasPrefix(p, "/usr/share/info") {
				continue
			}
			paths = append(paths, p)
		}
		status.WriteString(pkgs[n].stanza + "\n\n")
	}
	// systemctl works without a running systemd for enable/disable; it is
	// taken with the libraries ldd names rather than all of systemd's
	// dependencies.
	sysctl, err := exec.LookPath("systemctl")
	if err != nil {
		return "", fmt.Errorf("systemctl is needed on this host to check that the postinst enables the unit: %w", err)
	}
	paths = append(paths, sysctl)
	libs, err := exec.Command("ldd", sysctl).Output()
	if err != nil {
		return "", fmt.Errorf("ldd %s: %w", sysctl, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(libs))
	for sc.Scan() {
		if _, p, ok := strings.Cut(sc.Text(), "=> "); ok {
			paths = append(paths, strings.Fields(p)[0])
		}
	}
	for _, p := range lists {
		paths = append(paths, p)
	}

	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	w := &rootWriter{tw: tar.NewWriter(io.MultiWriter(f, h)), done: map[string]bool{}}
	// Merged /usr: keep the top-level links as the host has them.
	for _, d := range []string{"/bin", "/sbin", "/lib", "/lib64"} {
		if err := w.add(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
	}
	slices.Sort(paths)
	for _, p := range slices.Compact(paths) {
		if err := w.add(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
	}
	files := map[string]string{
		"etc/passwd":                "root:x:0:0:root:/root:/bin/sh\n",
		"etc/group":                 "root:x:0:\n",
		"var/lib/dpkg/status":       status.String(),
		"var/lib/dpkg/available":    "",
		"var/lib/dpkg/diversions":   "",
		"var/lib/dpkg/statoverride": "",
	}
	for _, d := range []string{"tmp", "root", "run", "etc/systemd/system", "var/lib/dpkg/updates", "var/lib/dpkg/triggers", "var/lib/dpkg/alternatives", "var/log"} {
		if err := w.dir(d, 0o755); err != nil {
			return "", err
		}
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if err := w.file(name, files[name]); err != nil {
			return "", err
		}
	}
	if err := w.tw.Close(); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), f.Close()
}

// rootWriter adds host paths to a tar once each, parents first.
type rootWriter struct {
	tw   *tar.Writer
	done map[string]bool
}

// add puts the host path p in the tar: its parent directories (resolved
// through symlinks, so /bin/sh lands in usr/bin on a merged-/usr host),
// then p itself as a file, directory or symlink.
func (w *rootWriter) add(p string) error {
	dir, err := filepath.EvalSymlinks(filepath.Dir(p))
	if err != nil {
		return err
	}
	if err := w.parents(dir); err != nil {
		return err
	}
	full := filepath.Join(dir, filepath.Base(p))
	name := strings.TrimPrefix(full, "/")
	if name == "" || w.done[name] {
		return nil
	}
	fi, err := os.Lstat(full)
	if err != nil {
		return err
	}
	var link string
	if fi.Mode()&fs.ModeSymlink != 0 {
		if link, err = os.Readlink(full); err != nil {
			return err
		}
	}
	hdr, err := tar.FileInfoHeader(fi, link)
	if err != nil {
		return err
	}
	hdr.Name, hdr.Uname, hdr.Gname, hdr.Uid, hdr.Gid = name, "", "", 0, 0
	// Reading a file changes its atime: kept, it would change the hash.
	hdr.AccessTime, hdr.ChangeTime = time.Time{}, time.Time{}
	if fi.IsDir() {
		hdr.Name += "/"
		hdr.ModTime = time.Time{} // directories like /tmp change all the time
	}
	w.done[name] = true
	if err := w.tw.WriteHeader(hdr); err != nil {
		return err
	}
	if fi.Mode().IsRegular() {
		src, err := os.Open(full)
		if err != nil {
			return err
		}
		defer src.Close()
		if _, err := io.Copy(w.tw, src); err != nil {
			return err
		}
	}
	if link != "" {
		// A library's soname link must bring its target along.
		target := link
		if !filepath.IsAbs(target) {
			target = filepath.Join(dir, link)
		}
		if err := w.add(target); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

func (w *rootWriter) parents(dir string) error {
	if dir = filepath.Clean(dir); dir == "/" {
		return nil
	}
	if err := w.parents(filepath.Dir(dir)); err != nil {
		return err
	}
	name := strings.TrimPrefix(dir, "/")
	if w.done[name] {
		return nil
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	return w.dir(name, fi.Mode().Perm())
}

func (w *rootWriter) dir(name string, mode fs.FileMode) error {
	if w.done[name] {
		return nil
	}
	if err := w.parents("/" + filepath.Dir(name)); err != nil {
		return err
	}
	w.done[name] = true
	return w.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: int64(mode)})
}

func (w *rootWriter) file(name, content string) error {
	if err := w.parents("/" + filepath.Dir(name)); err != nil {
		return err
	}
	w.done[name] = true
	if err := w.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(content))}); err != nil {
		return err
	}
	_, err := io.WriteString(w.tw, content)
	return err
}
