package testenv

import (
	"context"
	"crypto/subtle"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/capstanhq/capstan/internal/runtime/docker"
)

// registryCreds maps the address of each running test registry to the
// credential PushImage must use for it.
var registryCreds sync.Map // string → authn.Authenticator

// StartRegistry runs an in-memory OCI registry on a free loopback port
// until cleanup and returns its host:port. With a username, every request
// needs that HTTP basic credential. The engine pulls from it over plain
// HTTP, as it treats 127.0.0.0/8 as an insecure registry by default.
func StartRegistry(t testing.TB, username, password string) string {
	t.Helper()
	var h http.Handler = registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	var auth authn.Authenticator = authn.Anonymous
	if username != "" {
		h = basicAuth(h, username, password)
		auth = &authn.Basic{Username: username, Password: password}
	}
	srv := httptest.NewServer(h)
	addr := strings.TrimPrefix(srv.URL, "http://")
	registryCreds.Store(addr, auth)
	t.Cleanup(func() {
		registryCreds.Delete(addr)
		srv.Close()
	})
	return addr
}

// basicAuth answers any request without the credential the way a
// registry does, so clients see a Basic challenge and "unauthorized".
func basicAuth(next http.Handler, username, password string) http.Handler {
	eq := func(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if ok && eq(u, username) && eq(p, password) {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="capstan-test-registry"`)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required","detail":null}]}`)
	})
}

// PushImage copies the engine's image src to dst, a reference
// "host:port/name:tag" on a registry from StartRegistry (whose credential
// it uses). It goes through an image tarball saved from the engine.
func PushImage(t testing.TB, rt *docker.Runtime, src, dst string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := pushImage(ctx, rt, src, dst, t.TempDir()); err != nil {
		t.Fatalf("push %s to %s: %v", src, dst, err)
	}
}

func pushImage(ctx context.Context, rt *docker.Runtime, src, dst, dir string) error {
	ref, err := name.NewTag(dst)
	if err != nil {
		return err
	}
	auth, ok := registryCreds.Load(ref.RegistryStr())
	if !ok {
		return fmt.Errorf("%s is not a registry started by StartRegistry", ref.RegistryStr())
	}
	path := filepath.Join(dir, "image.tar")
	if err := saveImage(ctx, rt, src, path); err != nil {
		return err
	}
	img, err := tarball.ImageFromPath(path, nil)
	if err != nil {
		return fmt.Errorf("read saved image: %w", err)
	}
	return remote.Write(ref, img, remote.WithAuth(auth.(authn.Authenticator)), remote.WithContext(ctx))
}

// saveImage writes the engine's tarball of src to path; the tarball
// reader needs a file it can reopen.
func saveImage(ctx context.Context, rt *docker.Runtime, src, path string) error {
	rc, err := rt.Client().ImageSave(ctx, []string{src})
	if err != nil {
		return fmt.Errorf("save %s: %w", src, err)
	}
	defer rc.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, rc); err != nil {
		f.Close()
		return fmt.Errorf("save %s: %w", src, err)
	}
	return f.Close()
}
