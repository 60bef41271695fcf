package daemonnet

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/runtime"
)

func TestCheckAddress(t *testing.T) {
	tests := []struct {
		subnet, addr string
		want         string // substring of the error; "" for none
	}{
		{"169.254.172.0/24", "169.254.172.2", ""},
		{"169.254.173.0/24", "169.254.173.254", ""},
		{"10.0.0.0/8", "10.200.3.4", ""},
		{"169.254.180.4/30", "169.254.180.6", ""},
		{"169.254.172.0/24", "169.254.172.0", "network address"},
		{"169.254.172.0/24", "169.254.172.1", "gateway"},
		{"169.254.172.0/24", "169.254.172.255", "broadcast"},
		{"169.254.180.4/30", "169.254.180.7", "broadcast"},
		{"169.254.172.0/24", "169.254.173.2", "inside 169.254.172.0/24"},
		{"169.254.172.0/24", "fd00::2", "IPv4 address inside"},
		{"169.254.172.1/24", "169.254.172.2", "network address: 169.254.172.0/24"},
		{"169.254.172.0/31", "169.254.172.1", "/8 to /30"},
		{"fd00::/64", "fd00::2", "IPv4 subnet"},
	}
	for _, tt := range tests {
		err := CheckAddress(netip.MustParsePrefix(tt.subnet), netip.MustParseAddr(tt.addr))
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s in %s: %v", tt.addr, tt.subnet, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s in %s: %v, want an error with %q", tt.addr, tt.subnet, err, tt.want)
		}
	}
}

func TestDefaults(t *testing.T) {
	if DefaultAddress(DefaultSubnet).String() != "169.254.172.2" || Gateway(DefaultSubnet).String() != "169.254.172.1" {
		t.Errorf("default address %s, gateway %s", DefaultAddress(DefaultSubnet), Gateway(DefaultSubnet))
	}
	cs := candidates()
	if cs[0] != DefaultSubnet || cs[1].String() != "169.254.173.0/24" || cs[len(cs)-1].String() != "169.254.254.0/24" {
		t.Errorf("candidates %v", cs)
	}
	for _, c := range cs {
		if err := CheckAddress(c, DefaultAddress(c)); err != nil {
			t.Errorf("%s: %v", c, err)
		}
	}
}

func TestNames(t *testing.T) {
	n, h := Names("arn:aws:ecs:us-east-1:123456789012:container-instance/prod/0Jd8aKq1x3ZAbCdEfGhIj")
	if n != "capstan-3ZAbCdEfGhIj" || h != "capstan-3ZAbCdEfGhIj-daemons" {
		t.Errorf("names %q %q", n, h)
	}
	if n, _ := Names("i/a:b"); n != "capstan-a-b" {
		t.Errorf("sanitized %q", n)
	}
}

func TestCheckPauseBinary(t *testing.T) {
	// A dynamically linked executable needs files an image of one file lacks.
	if err := CheckPauseBinary("/bin/ls"); !errors.Is(err, ErrNotStatic) {
		t.Errorf("/bin/ls: %v", err)
	}
	if err := CheckPauseBinary("/nonexistent/capstan"); err == nil {
		t.Error("a missing file passed")
	}
	// A static executable that is not capstan would not understand `pause`.
	if err := CheckPauseBinary("/bin/busybox"); err == nil || !strings.Contains(err.Error(), "not a Go executable") {
		t.Errorf("/bin/busybox: %v", err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckPauseBinary(self); err == nil {
		t.Error("the test binary passed as a pause binary")
	}
}

// imagesOnly is a Runtime that has only images.
type imagesOnly struct {
	Runtime
	imgs    []runtime.Image
	inUse   map[string]bool
	removed []string
}

func (f *imagesOnly) Images(context.Context) ([]runtime.Image, error) { return f.imgs, nil }

func (f *imagesOnly) RemoveImage(_ context.Context, id string) error {
	if f.inUse[id] {
		return errors.New("in use")
	}
	f.removed = append(f.removed, id)
	return nil
}

func TestPrunePauseImages(t *testing.T) {
	old, fresh := time.Now().Add(-2*time.Hour), time.Now().Add(-time.Minute)
	f := &imagesOnly{inUse: map[string]bool{"used": true}, imgs: []runtime.Image{
		{ID: "current", RepoTags: []string{"capstan/pause:aaa"}, Created: old},
		{ID: "stale", RepoTags: []string{"capstan/pause:bbb"}, Created: old},
		{ID: "used", RepoTags: []string{"capstan/pause:ccc"}, Created: old},
		{ID: "young", RepoTags: []string{"capstan/pause:ddd"}, Created: fresh}, // another agent's, just imported
		{ID: "shared", RepoTags: []string{"capstan/pause:eee", "mine:latest"}, Created: old},
		{ID: "other", RepoTags: []string{"busybox:latest"}, Created: old},
		{ID: "untagged", Created: old},
	}}
	m, err := New(Config{Runtime: f, InstanceArn: "arn:aws:ecs:us-east-1:1:container-instance/c/x"})
	if err != nil {
		t.Fatal(err)
	}
	m.prunePauseImages(t.Context(), "capstan/pause:aaa")
	if !slices.Equal(f.removed, []string{"stale"}) {
		t.Errorf("removed %v, want only the stale pause image", f.removed)
	}
}
