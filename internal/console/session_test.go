package console

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/auth"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestSessionIdleExpiry: a session used within the idle timeout lives on;
// one left idle longer is gone, and its cookie sends the browser to sign in.
func TestSessionIdleExpiry(t *testing.T) {
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	cred := auth.Credential{AccessKeyID: "AKIDCONSOLE", SecretAccessKey: "console-secret-1234", Role: auth.RoleAdmin}
	lookup := auth.NewStaticLookup(cred)
	// A real API handler with no operations: pages reach it and fail, which
	// is no redirect; only a dead session redirects.
	h := api.NewHandler(&auth.Verifier{Lookup: lookup, Region: "us-east-1", Now: clk.now}, nil, slog.New(slog.DiscardHandler))
	c := New(context.Background(), Config{API: h, Lookup: lookup, Region: "us-east-1", Now: clk.now, IdleTimeout: 30 * time.Minute})

	form := url.Values{"accessKeyId": {cred.AccessKeyID}, "secretAccessKey": {cred.SecretAccessKey}}
	req := httptest.NewRequest(http.MethodPost, "/console/signin", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := httptest.NewRecorder()
	c.ServeHTTP(rec, req)
	if rec.Code != http.StatusSeeOther {
		t.Fatalf("sign-in: %d %s", rec.Code, rec.Body)
	}
	ck := rec.Result().Cookies()[0]
	get := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "/console/clusters", nil)
		req.AddCookie(ck)
		rec := httptest.NewRecorder()
		c.ServeHTTP(rec, req)
		return rec
	}
	clk.add(29 * time.Minute)
	if rec := get(); rec.Code == http.StatusSeeOther {
		t.Fatal("session ended after 29 idle minutes")
	}
	clk.add(29 * time.Minute) // used a moment ago: still alive
	if rec := get(); rec.Code == http.StatusSeeOther {
		t.Fatal("session ended 29 minutes after its last use")
	}
	clk.add(31 * time.Minute)
	rec = get()
	if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/console/signin" {
		t.Fatalf("after 31 idle minutes: %d %s, want a redirect to sign in", rec.Code, rec.Header().Get("Location"))
	}
	if len(c.sessions.byID) != 0 {
		t.Fatal("the expired session is still held")
	}
}

func TestSameOrigin(t *testing.T) {
	for _, c := range []struct {
		origin, referer string
		ok              bool
	}{
		{"", "", true},
		{"http://console.test", "", true},
		{"https://console.test", "", true},
		{"", "http://console.test/console/daemon?arn=x", true},
		{"http://console.test.evil.example", "", false},
		{"http://evil.example", "", false},
		{"null", "", false},
		{"", "http://evil.example/console.test", false},
	} {
		r := httptest.NewRequest(http.MethodPost, "http://console.test/console/signin", nil)
		if c.origin != "" {
			r.Header.Set("Origin", c.origin)
		}
		if c.referer != "" {
			r.Header.Set("Referer", c.referer)
		}
		if got := sameOrigin(r); got != c.ok {
			t.Errorf("Origin %q Referer %q: %v, want %v", c.origin, c.referer, got, c.ok)
		}
	}
}
