package auth

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
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
	creq := canonicalRequest(r, strings.Split("content-type;host;x-amz-date;x-amz-target", ";"), hex.EncodeToString(sum[:]))
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
			code: CodeInvalidSignature, msg: "Presigned (query-string) authentication is not accepted here..."},
		{name: "query auth alone", mutate: func(r *http.Request) {
			r.Header.Del("Authorization")
			r.URL.RawQuery = "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=" + vecAKID + "%2F20260401%2Fus-east-1%2Fecs%2Faws4_request"
		}, code: CodeInvalidSignature, msg: "Presigned (query-string) authentication is not accepted here..."},
		{name: "content sha256 mismatch", mutate: func(r *http.Request) { r.Header.Set("X-Amz-Content-Sha256", strings.Repeat("0", 64)) },
			code: CodeInvalidSignature, msg: "The provided 'x-amz-content-sha256' header does not match what was computed."},
		{name: "unsigned payload", mutate: func(r *http.Request) { r.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD") },
			code: CodeInvalidSignature, msg: `The 'x-amz-content-sha256' header must be the lowercase hex SHA-256 of the request body; this endpoint takes no unsigned or streaming payloads (got "UNSIGNED-PAYLOAD").`},
		{name: "uppercase hash", mutate: func(r *http.Request) {
			r.Header.Set("X-Amz-Content-Sha256", strings.ToUpper(hashHex([]byte(vecBody))))
		}, code: CodeInvalidSignature, msg: "The 'x-amz-content-sha256' header must be the lowercase hex SHA-256..."},
		{name: "two hashes", mutate: func(r *http.Request) {
			r.Header.Add("X-Amz-Content-Sha256", hashHex([]byte(vecBody)))
			r.Header.Add("X-Amz-Content-Sha256", hashHex([]byte(vecBody)))
		}, code: CodeInvalidSignature, msg: "The 'x-amz-content-sha256' header must be the lowercase hex SHA-256..."},
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

// sdkSign signs r as the AWS SDK for Go does, at vecTime; payload is the
// hash the SDK puts in the canonical request.
func sdkSign(t testing.TB, r *http.Request, cred Credential, region, payload string) {
	t.Helper()
	creds := aws.Credentials{AccessKeyID: cred.AccessKeyID, SecretAccessKey: cred.SecretAccessKey}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, r, payload, "ecs", region, vecTime); err != nil {
		t.Fatal(err)
	}
}

// onTheWire sends r through HTTP/1.1 framing in memory and returns the
// request a server reads, with its body: Host moved out of the headers,
// header names canonicalised, the path and query as sent.
func onTheWire(t testing.TB, r *http.Request) (*http.Request, []byte) {
	t.Helper()
	var buf bytes.Buffer
	if err := r.Write(&buf); err != nil {
		t.Fatal(err)
	}
	sr, err := http.ReadRequest(bufio.NewReader(&buf))
	if err != nil {
		t.Fatalf("read back %q: %v", buf.String(), err)
	}
	body, err := io.ReadAll(sr.Body)
	if err != nil {
		t.Fatal(err)
	}
	return sr, body
}

// refSign is a plain SigV4 signer written from the published algorithm,
// not from this package, for the one shape no SDK produces: a Date header
// instead of X-Amz-Date. It takes only "/" without a query.
// TestRefSignMatchesSDK holds it to the SDK's output.
func refSign(t testing.TB, r *http.Request, body []byte, cred Credential, region, amzDate string, signed []string) {
	t.Helper()
	if r.URL.Path != "/" || r.URL.RawQuery != "" {
		t.Fatalf("refSign takes POST / only, got %s", r.URL)
	}
	var headers string
	for _, h := range signed {
		v := r.Header.Get(h)
		switch h {
		case "host":
			v = r.Host
		case "content-length":
			v = fmt.Sprint(r.ContentLength)
		}
		headers += h + ":" + strings.Join(strings.Fields(v), " ") + "\n"
	}
	sum := sha256.Sum256(body)
	creq := r.Method + "\n/\n\n" + headers + "\n" + strings.Join(signed, ";") + "\n" + hex.EncodeToString(sum[:])
	creqSum := sha256.Sum256([]byte(creq))
	scope := amzDate[:8] + "/" + region + "/ecs/aws4_request"
	mac := func(key []byte, s string) []byte {
		h := hmac.New(sha256.New, key)
		h.Write([]byte(s))
		return h.Sum(nil)
	}
	key := mac(mac(mac(mac([]byte("AWS4"+cred.SecretAccessKey), amzDate[:8]), region), "ecs"), "aws4_request")
	sig := mac(key, "AWS4-HMAC-SHA256\n"+amzDate+"\n"+scope+"\n"+hex.EncodeToString(creqSum[:]))
	r.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential="+cred.AccessKeyID+"/"+scope+
		", SignedHeaders="+strings.Join(signed, ";")+", Signature="+hex.EncodeToString(sig))
}

func TestRefSignMatchesSDK(t *testing.T) {
	r := vectorRequest(vecBody)
	r.Header.Del("Authorization")
	sdkSign(t, r, adminCred, "us-east-1", hashHex([]byte(vecBody)))
	want := r.Header.Get("Authorization")
	_, rest, _ := strings.Cut(want, "SignedHeaders=")
	signed, _, _ := strings.Cut(rest, ",")
	refSign(t, r, []byte(vecBody), adminCred, "us-east-1", vecDate, strings.Split(signed, ";"))
	if got := r.Header.Get("Authorization"); got != want {
		t.Fatalf("reference signer:\n%s\nAWS SDK:\n%s", got, want)
	}
}

func TestDateHeaderFallback(t *testing.T) {
	r := vectorRequest(vecBody)
	r.Header.Del("X-Amz-Date")
	r.Header.Set("Date", vecTime.Format(http.TimeFormat))
	refSign(t, r, []byte(vecBody), adminCred, "us-east-1", vecDate, []string{"content-type", "date", "host", "x-amz-target"})
	if _, err := fixedVerifier(vecTime.Add(time.Minute)).Verify(context.Background(), r, []byte(vecBody)); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	// The date signed is the Date header's: another second is refused.
	r.Header.Set("Date", vecTime.Add(time.Second).Format(http.TimeFormat))
	_, err := fixedVerifier(vecTime).Verify(context.Background(), r, []byte(vecBody))
	wantError(t, err, CodeInvalidSignature, "The request signature we calculated does not match...")
}

// TestContentSHA256Header: a signed x-amz-content-sha256 holding the
// body's hash verifies. Issue 46, point 4: signed with UNSIGNED-PAYLOAD,
// STREAMING-AWS4-HMAC-SHA256-PAYLOAD or "x" and the body then swapped, the
// request went through; now each is refused for what the header holds,
// swapped or not, and a real hash with a swapped body for the mismatch.
func TestContentSHA256Header(t *testing.T) {
	swapped := strings.Replace(vecBody, "my-daemon", "my-daem0n", 1)
	sign := func(value string) *http.Request {
		req, err := http.NewRequest(http.MethodPost, "http://localhost:8080/", strings.NewReader(vecBody))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-amz-json-1.1")
		req.Header.Set("X-Amz-Target", vecTarget)
		req.Header.Set("X-Amz-Content-Sha256", value)
		sdkSign(t, req, adminCred, "us-east-1", value)
		if !strings.Contains(req.Header.Get("Authorization"), "x-amz-content-sha256") {
			t.Fatalf("the SDK did not sign x-amz-content-sha256: %s", req.Header.Get("Authorization"))
		}
		r, _ := onTheWire(t, req)
		return r
	}
	r := sign(hashHex([]byte(vecBody)))
	if _, err := fixedVerifier(vecTime).Verify(context.Background(), r, []byte(vecBody)); err != nil {
		t.Fatalf("x-amz-content-sha256 with the body's hash: %v", err)
	}
	_, err := fixedVerifier(vecTime).Verify(context.Background(), r, []byte(swapped))
	wantError(t, err, CodeInvalidSignature, "The provided 'x-amz-content-sha256' header does not match what was computed.")

	for _, value := range []string{"UNSIGNED-PAYLOAD", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD", "x"} {
		r := sign(value)
		for _, body := range []string{vecBody, swapped} {
			_, err := fixedVerifier(vecTime).Verify(context.Background(), r, []byte(body))
			wantError(t, err, CodeInvalidSignature, fmt.Sprintf("The 'x-amz-content-sha256' header must be the lowercase hex SHA-256 "+
				"of the request body; this endpoint takes no unsigned or streaming payloads (got %q).", value))
		}
		// Refused from the headers, before a body is read.
		if _, err := fixedVerifier(vecTime).Begin(context.Background(), r); err == nil {
			t.Fatalf("%s: Begin accepted it", value)
		}
	}
}

// TestBeginThenFinish: the headers are judged without the body; the
// signature over the body only by Finish.
func TestBeginThenFinish(t *testing.T) {
	v := fixedVerifier(vecTime)
	p, err := v.Begin(context.Background(), vectorRequest(vecBody))
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	if _, err := p.Finish([]byte(vecBody + " ")); err == nil {
		t.Fatal("Finish accepted another body")
	}
	if got, err := p.Finish([]byte(vecBody)); err != nil || got.AccessKeyID != vecAKID {
		t.Fatalf("Finish: %+v, %v", got, err)
	}
	r := vectorRequest(vecBody)
	r.Header.Set("Authorization", strings.Replace(vecAuthz, vecAKID, "AKIAUNKNOWNKEY000000", 1))
	_, err = v.Begin(context.Background(), r)
	wantError(t, err, CodeUnrecognizedClient, "The security token included in the request is invalid.")
	_, err = fixedVerifier(vecTime.Add(time.Hour)).Begin(context.Background(), vectorRequest(vecBody))
	wantError(t, err, CodeInvalidSignature, "Signature expired...")
	if got := ClaimedService(vectorRequest(vecBody)); got != "ecs" {
		t.Fatalf("ClaimedService = %q", got)
	}
}

func TestCanonicalQueryOrder(t *testing.T) {
	got := canonicalQuery("b=two+words&a-b=2&a=x%2Fy&a=1&X-Amz-Nothing=ff&e")
	want := "X-Amz-Nothing=ff&a=1&a=x%2Fy&a-b=2&b=two%20words&e="
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

// fuzzCreds are the credentials FuzzVerify signs with; every secret is
// different (SigV4 does not sign the key ID, so only the secret binds a
// signature to a key).
var fuzzCreds = []Credential{
	adminCred,
	{AccessKeyID: "AKIDAGENTFUZZ000001", SecretAccessKey: "agent/secret+key", Role: RoleAgent, InstanceID: "i-0abc"},
	{AccessKeyID: "AKIDADMINFUZZ000002", SecretAccessKey: vecSecret + "2", Role: RoleAdmin},
	{AccessKeyID: "AKIDAGENTFUZZ000003", SecretAccessKey: "agent/secret+kez", Role: RoleAgent, InstanceID: "i-0abd"},
}

var fuzzMethods = []string{http.MethodPost, http.MethodGet, http.MethodPut, http.MethodDelete}

// printable keeps the bytes a header value can carry unchanged through
// HTTP/1.1 (no tabs: the Go SDK keeps them, other signers fold them).
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return -1
		}
		return r
	}, s)
}

// FuzzVerify signs a request built from the input with one of several
// credentials through the AWS SDK and checks the property a verifier
// exists for: the request verifies as the key that signed it; claiming
// any other key, changing anything signed (method, path, query, a signed
// header, the body, the date, the signature) or garbling the
// Authorization header is refused with a classified error; an unsigned
// header added on the way changes nothing.
func FuzzVerify(f *testing.F) {
	f.Add(uint8(0), uint8(0), "", "", vecTarget, vecBody, vecAuthz)
	f.Add(uint8(1), uint8(1), "agent/a b/c~d", "b=two+words&a=x%2Fy&a=1&e", "", "", "")
	f.Add(uint8(2), uint8(2), "%2F..//x", "X-Amz-Signature=00&a-b=2&a=", "  a  b ", "\x00\xff", "AWS4-HMAC-SHA256")
	f.Add(uint8(3), uint8(3), "\u00e9", "=&&=x", "t", "{}", "AWS4-HMAC-SHA256 Credential=a/b/c/d/e, SignedHeaders=host, Signature=00")
	f.Add(uint8(0), uint8(0), "", "", vecTarget, "", "AWS4-HMAC-SHA256 Credential=////, SignedHeaders=;;, Signature==,,=")
	v := &Verifier{Lookup: NewStaticLookup(fuzzCreds...), Now: func() time.Time { return vecTime }}
	var unknown []Credential
	for _, c := range fuzzCreds {
		c.SecretAccessKey = NewSecretAccessKey()
		unknown = append(unknown, c)
	}
	blind := &Verifier{Lookup: NewStaticLookup(unknown...), Now: func() time.Time { return vecTime }}
	f.Fuzz(func(t *testing.T, signer, method uint8, path, query, target, body, authz string) {
		cred := fuzzCreds[int(signer)%len(fuzzCreds)]
		region := []string{"us-east-1", "eu-west-1"}[int(signer)%2]
		u := &url.URL{Scheme: "http", Host: "localhost:8080", Path: "/" + path, RawQuery: query}
		req, err := http.NewRequest(fuzzMethods[int(method)%len(fuzzMethods)], u.String(), strings.NewReader(body))
		if err != nil {
			return // not a URL a client could send
		}
		req.Header.Set("Content-Type", "application/x-amz-json-1.1")
		req.Header.Set("X-Amz-Target", printable(target))
		sdkSign(t, req, cred, region, hashHex([]byte(body)))
		signedAuthz := req.Header.Get("Authorization")
		sig := signedAuthz[strings.LastIndex(signedAuthz, "=")+1:]

		verify := func(mutate func(r *http.Request, body *string)) (Principal, error) {
			r := req.Clone(context.Background())
			b := body
			if mutate != nil {
				mutate(r, &b)
			}
			r.Body, r.ContentLength = io.NopCloser(strings.NewReader(b)), int64(len(b))
			sr, sbody := onTheWire(t, r)
			return v.Verify(context.Background(), sr, sbody)
		}
		refused := func(what string, mutate func(r *http.Request, body *string)) {
			t.Helper()
			p, err := verify(mutate)
			var ae *Error
			if err == nil {
				t.Fatalf("%s: accepted as %+v (signed by %s)", what, p, cred.AccessKeyID)
			}
			if !errors.As(err, &ae) || ae.Code != CodeInvalidSignature || ae.Status != http.StatusBadRequest {
				t.Fatalf("%s: %#v, want %s", what, err, CodeInvalidSignature)
			}
		}

		if q := req.URL.Query(); q.Has("X-Amz-Algorithm") || q.Has("X-Amz-Credential") || q.Has("X-Amz-SignedHeaders") || q.Has("X-Amz-Signature") {
			refused("presigning parameters next to the header", nil)
			return
		}
		want := Principal{AccessKeyID: cred.AccessKeyID, Role: cred.Role, InstanceID: cred.InstanceID, Region: region}
		if p, err := verify(nil); err != nil || p != want {
			t.Fatalf("signed by %s: %+v, %v; want %+v\nAuthorization: %s", cred.AccessKeyID, p, err, want, signedAuthz)
		}
		if p, err := verify(func(r *http.Request, _ *string) { r.Header.Set("X-Forwarded-For", "10.0.0.1") }); err != nil || p != want {
			t.Fatalf("an unsigned header added: %+v, %v", p, err)
		}
		for _, other := range fuzzCreds {
			if other.AccessKeyID != cred.AccessKeyID {
				refused("claimed by "+other.AccessKeyID, func(r *http.Request, _ *string) {
					r.Header.Set("Authorization", strings.Replace(signedAuthz, "="+cred.AccessKeyID+"/", "="+other.AccessKeyID+"/", 1))
				})
			}
		}
		refused("method changed", func(r *http.Request, _ *string) {
			r.Method = fuzzMethods[(int(method)+1)%len(fuzzMethods)]
		})
		refused("path changed", func(r *http.Request, _ *string) { r.URL.Path += "x"; r.URL.RawPath = "" })
		refused("query parameter added", func(r *http.Request, _ *string) { r.URL.RawQuery += "&capstan-added=1" })
		if req.URL.RawQuery != "" { // the SDK rewrote it to its canonical form
			refused("query dropped", func(r *http.Request, _ *string) { r.URL.RawQuery = "" })
		}
		refused("target changed", func(r *http.Request, _ *string) { r.Header.Set("X-Amz-Target", r.Header.Get("X-Amz-Target")+"x") })
		refused("content type changed", func(r *http.Request, _ *string) { r.Header.Set("Content-Type", "text/plain") })
		refused("host changed", func(r *http.Request, _ *string) { r.Host = "localhost:8081" })
		refused("date changed", func(r *http.Request, _ *string) {
			r.Header.Set("X-Amz-Date", vecTime.Add(time.Second).Format(amzDateLayout))
		})
		refused("signature changed", func(r *http.Request, _ *string) {
			flip := "0"
			if sig[len(sig)-1] == '0' {
				flip = "1"
			}
			r.Header.Set("Authorization", signedAuthz[:len(signedAuthz)-1]+flip)
		})
		refused("body appended to", func(_ *http.Request, b *string) { *b += "x" })
		if body != "" {
			refused("body changed", func(_ *http.Request, b *string) { *b = string((*b)[0]^1) + (*b)[1:] })
		}
		// Judged against secrets the input cannot know, every
		// Authorization header it brings is refused, and classified.
		p, err := blind.Verify(context.Background(), req, []byte(body))
		req.Header.Set("Authorization", printable(authz))
		p2, err2 := blind.Verify(context.Background(), req, []byte(body))
		for _, e := range []error{err, err2} {
			var ae *Error
			if e == nil {
				t.Fatalf("accepted as %+v / %+v with secrets nobody signed with", p, p2)
			}
			if !errors.As(e, &ae) || ae.Code == "" || ae.Status != http.StatusBadRequest {
				t.Fatalf("Authorization %q: unexpected error %#v", authz, e)
			}
		}
	})
}
