package testenv

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func TestRegistryAuth(t *testing.T) {
	get := func(addr, user, pass string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+addr+"/v2/", nil)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	open := StartRegistry(t, "", "")
	if r := get(open, "", ""); r.StatusCode != http.StatusOK {
		t.Errorf("anonymous registry: %s", r.Status)
	}
	locked := StartRegistry(t, "bob", "pw")
	r := get(locked, "", "")
	if r.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Basic ") {
		t.Errorf("no credential: %s %q, want 401 with a Basic challenge", r.Status, r.Header.Get("WWW-Authenticate"))
	}
	if r := get(locked, "bob", "nope"); r.StatusCode != http.StatusUnauthorized {
		t.Errorf("wrong password: %s", r.Status)
	}
	if r := get(locked, "bob", "pw"); r.StatusCode != http.StatusOK {
		t.Errorf("right password: %s", r.Status)
	}
}

func TestPushImage(t *testing.T) {
	rt := RequireDocker(t)
	src := BusyboxImage(t)
	addr := StartRegistry(t, "bob", "pw")
	dst := addr + "/test/busybox:v1"
	PushImage(t, rt, src, dst)

	ref, _ := name.NewTag(dst)
	img, err := remote.Image(ref, remote.WithAuth(&authn.Basic{Username: "bob", Password: "pw"}))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(cfg.Config.Cmd, " ") != "sh" {
		t.Errorf("pushed config cmd = %q, want sh", cfg.Config.Cmd)
	}
	if err := pushImage(context.Background(), rt, src, "127.0.0.1:1/x:y", t.TempDir()); err == nil {
		t.Error("push to a registry not started here succeeded")
	}
}
