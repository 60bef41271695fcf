package auth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// The verified vector from the ECS daemons spec (§5.5).
const (
	vecAKID   = "AKIAIOSFODNN7EXAMPLE"
	vecSecret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
	vecDate   = "20260401T120000Z"
	vecTarget = "AmazonEC2ContainerServiceV20141113.DescribeDaemon"
	vecBody   = `{"daemonArn":"arn:aws:ecs:us-east-1:123456789012:daemon/my-cluster/my-daemon"}`
	vecCReq   = "38fcf37e15bffbb6f9dd0d62284b0114ea910d0a58b73a202dd72c6d9a4dd155"
	vecSig    = "c88d8efb540d81407933cc8dbb92e4035e525ffc502342a46b34ad158715c78d"
	vecAuthz  = "AWS4-HMAC-SHA256 Credential=" + vecAKID + "/20260401/us-east-1/ecs/aws4_request, " +
		"SignedHeaders=content-type;host;x-amz-date;x-amz-target, Signature=" + vecSig
)

var vecTime = time.Date(2026, 4, 1, 12, 0, 0, 0, time.UTC)

var adminCred = Credential{AccessKeyID: vecAKID, SecretAccessKey: vecSecret, Role: RoleAdmin}

func vectorRequest(body string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "http://localhost:8080/", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/x-amz-json-1.1")
	r.Header.Set("X-Amz-Target", vecTarget)
	r.Header.Set("X-Amz-Date", vecDate)
	r.Header.Set("Authorization", vecAuthz)
	return r
}

func fixedVerifier(now time.Time) *Verifier {
	return &Verifier{Lookup: NewStaticLookup(adminCred), Now: func() time.Time { return now }, Service: "ecs", MaxSkew: 15 * time.Minute}
}

func TestSpecVector(t *testing.T) {
	r := vectorRequest(vecBody)
	sum := sha256.Sum256([]byte(vecBody))
	creq := canonicalRequest(r, strings.Split("content-type;host;x-amz-date;x-amz-target", ";"), hex.EncodeToString(sum[:]), false)
	h := sha256.Sum256([]byte(creq))
	if got := hex.EncodeToString(h[:]); got != vecCReq {
		t.Fatalf("canonical request hash = %s, want %s\n%s", got, vecCReq, creq)
	}

	p, err := fixedVerifier(vecTime).Verify(context.Background(), r, []byte(vecBody))
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	want := Principal{AccessKeyID: vecAKID, Role: RoleAdmin, Region: "us-east-1"}
	if p != want {
		t.Fatalf("principal = %+v, want %+v", p, want)
	}
}

func TestVerifyRefusals(t *testing.T) {
	withAuthz := func(a string) func(*http.Request) {
		return func(r *http.Request) { r.Header.Set("Authorization", a) }
	}
	replace := func(old, new string) func(*http.Request) {
		return withAuthz(strings.Replace(vecAuthz, old, new, 1))
	}
	cases := []struct {
		name   string
		body   string
		now    time.Time
		mutate func(*http.Request)
		code   string
		msg    string // exact message, or prefix when it ends in "..."
	}{
		{name: "tampered body", body: strings.Replace(vecBody, "my-daemon", "my-daem0n", 1),
			code: CodeInvalidSignature, msg: "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method."},
		{name: "tampered target", mutate: func(r *http.Request) {
			r.Header.Set("X-Amz-Target", "AmazonEC2ContainerServiceV20141113.DeleteDaemon")
		}, code: CodeInvalidSignature, msg: "The request signature we calculated does not match..."},
		{name: "tampered host", mutate: func(r *http.Request) { r.Host = "localhost:8081" },
			code: CodeInvalidSignature, msg: "The request signature we calculated does not match..."},
		{name: "tampered signature", mutate: replace(vecSig, vecSig[:63]+"e"),
			code: CodeInvalidSignature, msg: "The request signature we calculated does not match..."},
		{name: "unknown key", mutate: replace(vecAKID, "AKIAUNKNOWNKEY000000"),
			code: CodeUnrecognizedClient, msg: "The security token included in the request is invalid."},
		{name: "stale date", now: vecTime.Add(16 * time.Minute), code: CodeInvalidSignature,
			msg: "Signature expired: 20260401T120000Z is now earlier than 20260401T120100Z (20260401T121600Z - 15 min.)"},
		{name: "future date", now: vecTime.Add(-16 * time.Minute), code: CodeInvalidSignature,
			msg: "Signature not yet current: 20260401T120000Z is still later than 20260401T115900Z (20260401T114400Z + 15 min.)"},
		{name: "missing authorization", mutate: func(r *http.Request) { r.Header.Del("Authorization") },
			code: CodeMissingAuthenticationToken, msg: "Missing Authentication Token"},
		{name: "missing credential", mutate: replace("Credential="+vecAKID+"/20260401/us-east-1/ecs/aws4_request, ", ""),
			code: CodeIncompleteSignature, msg: "Authorization header requires 'Credential' parameter."},
		{name: "missing signed headers", mutate: replace("SignedHeaders=content-type;host;x-amz-date;x-amz-target, ", ""),
			code: CodeIncompleteSignature, msg: "Authorization header requires 'SignedHeaders' parameter."},
		{name: "missing signature", mutate: replace(", Signature="+vecSig, ""),
			code: CodeIncompleteSignature, msg: "Authorization header requires 'Signature' parameter."},
		{name: "empty signature", mutate: replace("Signature="+vecSig, "Signature="),
			code: CodeIncompleteSignature, msg: "Authorization header requires 'Signature' parameter."},
		{name: "only algorithm", mutate: withAuthz("AWS4-HMAC-SHA256"), code: CodeIncompleteSignature,
			msg: "Authorization header requires 'Credential' parameter. Authorization header requires 'SignedHeaders' parameter. Authorization header requires 'Signature' parameter."},
		{name: "other algorithm", mutate: replace("AWS4-HMAC-SHA256", "AWS4-HMAC-SHA512"),
			code: CodeIncompleteSignature, msg: "Unsupported Authorization algorithm..."},
		{name: "short credential", mutate: replace("/aws4_request", ""),
			code: CodeIncompleteSignature, msg: "Credential must have exactly 5..."},
		{name: "bad terminator", mutate: replace("/aws4_request", "/aws5_request"),
			code: CodeInvalidSignature, msg: "Credential should be scoped with a valid terminator: 'aws4_request'."},
		{name: "other service", mutate: replace("/ecs/", "/ecr/"),
			code: CodeInvalidSignature, msg: "Credential should be scoped to correct service: 'ecs'."},
		{name: "scope date mismatch", mutate: replace("/20260401/", "/20260402/"), code: CodeInvalidSignature,
			msg: "Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: '20260402' != '20260401', from '20260401T120000Z'."},
		{name: "host not signed", mutate: replace("content-type;host;", "content-type;"),
			code: CodeIncompleteSignature, msg: "SignedHeaders must include 'host'."},
		{name: "missing date", mutate: func(r *http.Request) { r.Header.Del("X-Amz-Date") }, code: CodeIncompleteSignature,
			msg: "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header."},
		{name: "malformed date", mutate: func(r *http.Request) { r.Header.Set("X-Amz-Date", "2026-04-01T12:00:00Z") },
			code: CodeIncompleteSignature, msg: "X-Amz-Date must be..."},
		{name: "header and query auth", mutate: func(r *http.Request) { r.URL.RawQuery = "X-Amz-Signature=" + vecSig },
			code: CodeInvalidSignature, msg: "Only one auth mechanism allowed..."},
		{name: "content sha256 mismatch", mutate: func(r *http.Request) { r.Header.Set("X-Amz-Content-Sha256", strings.Repeat("0", 64)) },
			code: CodeInvalidSignature, msg: "The provided 'x-amz-content-sha256' header does not match what was computed."},
		{name: "unsigned payload not signed", mutate: func(r *http.Request) { r.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD") },
			code: CodeInvalidSignature, msg: "The request signature we calculated does not match..."},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body := vecBody
			if tc.body != "" {
				body = tc.body
			}
			r := vectorRequest(body)
			if tc.mutate != nil {
				tc.mutate(r)
			}
			now := vecTime
			if !tc.now.IsZero() {
				now = tc.now
			}
			_, err := fixedVerifier(now).Verify(context.Background(), r, []byte(body))
			wantError(t, err, tc.code, tc.msg)
		})
	}
}

func wantError(t *testing.T, err error, code, msg string) {
	t.Helper()
	var ae *Error
	if !errors.As(err, &ae) {
		t.Fatalf("err = %v, want *auth.Error %s", err, code)
	}
	if ae.Code != code || ae.Status != http.StatusBadRequest {
		t.Fatalf("got %s (HTTP %d): %s; want %s (HTTP 400)", ae.Code, ae.Status, ae.Message, code)
	}
	if prefix, ok := strings.CutSuffix(msg, "..."); ok {
		if !strings.HasPrefix(ae.Message, prefix) {
			t.Fatalf("message %q, want prefix %q", ae.Message, prefix)
		}
	} else if ae.Message != msg {
		t.Fatalf("message %q, want %q", ae.Message, msg)
	}
	if strings.Contains(ae.Error(), vecSecret) || strings.Contains(ae.Error(), vecSig) {
		t.Fatalf("message leaks a secret or signature: %q", ae.Error())
	}
}

// testSign signs r with this package's own key derivation; used only where
// no external signer can produce the request shape (Date header fallback).
func testSign(r *http.Request, body []byte, amzDate string, signed []string) {
	c := &claim{date: amzDate[:8], region: "us-east-1", service: "ecs", terminator: scopeTerminator, amzDate: amzDate}
	payload, _ := payloadHash(r, body, false)
	sig := signature(vecSecret, c, canonicalRequest(r, signed, payload, false))
	r.Header.Set("Authorization", fmt.Sprintf("%s Credential=%s/%s, SignedHeaders=%s, Signature=%s",
		algorithm, vecAKID, c.scope(), strings.Join(signed, ";"), sig))
}

func TestDateHeaderFallback(t *testing.T) {
	r := vectorRequest(vecBody)
	r.Header.Del("X-Amz-Date")
	r.Header.Set("Date", vecTime.Format(http.TimeFormat))
	testSign(r, []byte(vecBody), vecDate, []string{"content-type", "date", "host", "x-amz-target"})
	if _, err := fixedVerifier(vecTime.Add(time.Minute)).Verify(context.Background(), r, []byte(vecBody)); err != nil {
		t.Fatalf("Verify: %v", err)
	}
}

func TestContentSHA256Header(t *testing.T) {
	for _, value := range []string{"UNSIGNED-PAYLOAD", ""} {
		r := vectorRequest(vecBody)
		if value == "" {
			sum := sha256.Sum256([]byte(vecBody))
			value = hex.EncodeToString(sum[:])
		}
		r.Header.Set("X-Amz-Content-Sha256", value)
		testSign(r, []byte(vecBody), vecDate, []string{"content-type", "host", "x-amz-content-sha256", "x-amz-date", "x-amz-target"})
		if _, err := fixedVerifier(vecTime).Verify(context.Background(), r, []byte(vecBody)); err != nil {
			t.Fatalf("x-amz-content-sha256 %s: %v", value, err)
		}
	}
}

func TestCanonicalQueryOrder(t *testing.T) {
	got := canonicalQuery("b=two+words&a-b=2&a=x%2Fy&a=1&X-Amz-Signature=ff&e", true)
	want := "a=1&a=x%2Fy&a-b=2&b=two%20words&e="
	if got != want {
		t.Fatalf("canonicalQuery = %q, want %q", got, want)
	}
}

func TestCanonicalURI(t *testing.T) {
	for in, want := range map[string]string{
		"http://h/":             "/",
		"http://h":              "/",
		"http://h/a%20b/c~d":    "/a%2520b/c~d",
		"http://h/a%2Fb/%E2%82": "/a%252Fb/%25E2%2582",
	} {
		r := httptest.NewRequest(http.MethodGet, in, nil)
		if got := canonicalURI(r.URL); got != want {
			t.Errorf("canonicalURI(%s) = %q, want %q", in, got, want)
		}
	}
}

type failingLookup struct{}

func (failingLookup) Credential(context.Context, string) (Credential, bool, error) {
	return Credential{}, false, errors.New("etcd unavailable")
}

func TestLookups(t *testing.T) {
	ctx := context.Background()
	agent := Credential{AccessKeyID: "AKIDAGENT", SecretAccessKey: "s", Role: RoleAgent, InstanceID: "i-0abc"}
	l := Chain(NewStaticLookup(adminCred), NewStaticLookup(agent))
	if c, ok, err := l.Credential(ctx, "AKIDAGENT"); err != nil || !ok || c.InstanceID != "i-0abc" {
		t.Fatalf("chain lookup = %v, %v, %v", c, ok, err)
	}
	if _, ok, err := l.Credential(ctx, "nobody"); ok || err != nil {
		t.Fatalf("unknown key: ok=%v err=%v", ok, err)
	}
	if _, _, err := Chain(NewStaticLookup(), failingLookup{}, NewStaticLookup(agent)).Credential(ctx, "AKIDAGENT"); err == nil {
		t.Fatal("a failing lookup must stop the chain")
	}

	v := fixedVerifier(vecTime)
	v.Lookup = failingLookup{}
	_, err := v.Verify(ctx, vectorRequest(vecBody), []byte(vecBody))
	var ae *Error
	if err == nil || errors.As(err, &ae) {
		t.Fatalf("lookup failure must be an internal error, got %v", err)
	}

	for _, s := range []string{fmt.Sprint(adminCred), fmt.Sprintf("%+v", adminCred), fmt.Sprintf("%#v", adminCred)} {
		if strings.Contains(s, vecSecret) {
			t.Fatalf("credential formatting leaks the secret: %s", s)
		}
	}
}

func TestVerifierDefaults(t *testing.T) {
	v := &Verifier{Lookup: NewStaticLookup(adminCred), Now: func() time.Time { return vecTime.Add(14 * time.Minute) }}
	if _, err := v.Verify(context.Background(), vectorRequest(vecBody), []byte(vecBody)); err != nil {
		t.Fatalf("defaults (ecs, 15 min): %v", err)
	}
}

func FuzzVerify(f *testing.F) {
	f.Add(vecAuthz, vecBody)
	f.Add("", "")
	f.Add("AWS4-HMAC-SHA256", "{}")
	f.Add("AWS4-HMAC-SHA256 Credential=a/b/c/d/e, SignedHeaders=host, Signature=00", "{}")
	f.Add("AWS4-HMAC-SHA256 Credential=////, SignedHeaders=;;, Signature==,,=", "")
	f.Add("AWS4-HMAC-SHA256 Credential="+vecAKID+"/20260401/us-east-1/ecs/aws4_request,SignedHeaders=HOST;X-AMZ-DATE,Signature=x", "\x00")
	v := fixedVerifier(vecTime)
	f.Fuzz(func(t *testing.T, authz, body string) {
		r := vectorRequest(body)
		r.Header.Set("Authorization", authz)
		p, err := v.Verify(context.Background(), r, []byte(body))
		if err == nil {
			if p.AccessKeyID != vecAKID {
				t.Fatalf("accepted with principal %+v", p)
			}
			return
		}
		var ae *Error
		if !errors.As(err, &ae) || ae.Code == "" || ae.Status != http.StatusBadRequest {
			t.Fatalf("unexpected error %#v", err)
		}
	})
}
