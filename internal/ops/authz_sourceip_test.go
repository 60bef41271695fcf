package ops

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/auth"
	"github.com/capstanhq/capstan/internal/iam"
)

// userVerifier lets every request in as the IAM user alice.
type userVerifier struct{}

func (userVerifier) Verify(context.Context, *http.Request, []byte) (auth.Principal, error) {
	return auth.Principal{AccessKeyID: "AKIAALICE", Role: auth.RoleUser, UserName: "alice"}, nil
}

// A policy sees the caller's address in aws:SourceIp: IpAddress lets alice
// in from the loopback only; a Deny of everything on NotIpAddress
// 127.0.0.0/8 refuses the call from elsewhere (explicitly) but not from the
// loopback, which one on IpAddress 127.0.0.0/8 does refuse.
func TestSourceIPConditions(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	ids := iam.NewStore(st, "123456789012")
	if _, err := ids.CreateUser(ctx, "alice", "", nil); err != nil {
		t.Fatal(err)
	}
	s := newService(st)
	h := api.NewHandler(userVerifier{}, s.Authorizer(iam.NewAuthorizer(ids)), slog.New(slog.DiscardHandler))
	s.Register(h)
	var body string
	call := func(from string) int {
		t.Helper()
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("{}"))
		r.Header.Set("X-Amz-Target", api.TargetPrefix+"ListClusters")
		r.Header.Set("Content-Type", "application/x-amz-json-1.1")
		r.RemoteAddr = from
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK && !strings.Contains(w.Body.String(), "AccessDeniedException") {
			t.Fatalf("ListClusters from %s: %d %s", from, w.Code, w.Body)
		}
		body = w.Body.String()
		return w.Code
	}
	put := func(doc string) {
		t.Helper()
		if err := ids.PutUserPolicy(ctx, "alice", "p", doc); err != nil {
			t.Fatal(err)
		}
	}

	put(`{"Version":"2012-10-17","Statement":{"Effect":"Allow","Action":"ecs:*","Resource":"*",
		"Condition":{"IpAddress":{"aws:SourceIp":"127.0.0.1/32"}}}}`)
	if c := call("127.0.0.1:40000"); c != http.StatusOK {
		t.Errorf("allowed from 127.0.0.1/32, called from the loopback: status %d", c)
	}
	if c := call("192.0.2.1:40000"); c == http.StatusOK {
		t.Error("allowed from 127.0.0.1/32 only, called from 192.0.2.1: succeeded")
	}

	put(`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"ecs:*","Resource":"*"},
		{"Effect":"Deny","Action":"*","Resource":"*","Condition":{"NotIpAddress":{"aws:SourceIp":"127.0.0.0/8"}}}]}`)
	if c := call("127.0.0.1:40000"); c != http.StatusOK {
		t.Errorf("denied outside 127.0.0.0/8, called from the loopback: status %d", c)
	}
	if c := call("[2001:db8::1]:40000"); c == http.StatusOK || !strings.Contains(body, "explicit deny") {
		t.Errorf("denied outside 127.0.0.0/8, called from 2001:db8::1: status %d %s", c, body)
	}

	put(`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"ecs:*","Resource":"*"},
		{"Effect":"Deny","Action":"*","Resource":"*","Condition":{"IpAddress":{"aws:SourceIp":"127.0.0.0/8"}}}]}`)
	if c := call("127.0.0.1:40000"); c == http.StatusOK || !strings.Contains(body, "explicit deny") {
		t.Errorf("denied from 127.0.0.0/8, called from the loopback: status %d %s", c, body)
	}
}
