package auth

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// The interop tests send real signed requests over HTTP, so the verifier
// sees exactly what net/http hands a server (Host moved to r.Host, header
// canonicalisation, the path and query as sent on the wire).

type verdict struct {
	p   Principal
	err error
}

func verifyServer(t *testing.T, v *Verifier) (string, <-chan verdict) {
	t.Helper()
	got := make(chan verdict, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err == nil {
			var p Principal
			p, err = v.Verify(r.Context(), r, body)
			got <- verdict{p, err}
		} else {
			got <- verdict{err: err}
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, got
}

func send(t *testing.T, req *http.Request, got <-chan verdict) verdict {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	resp.Body.Close()
	return <-got
}

func liveVerifier() *Verifier {
	agent := Credential{AccessKeyID: "AKIDAGENT0001", SecretAccessKey: "agent/secret+key", Role: RoleAgent, InstanceID: "i-0abc"}
	return &Verifier{Lookup: NewStaticLookup(adminCred, agent), Service: "ecs"}
}

func hashHex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestAWSSDKSigner(t *testing.T) {
	base, got := verifyServer(t, liveVerifier())
	creds := aws.Credentials{AccessKeyID: vecAKID, SecretAccessKey: vecSecret}
	for _, path := range []string{"/", "/agent/a%20b/c~d?b=two%20words&a=x%2Fy&a=1"} {
		body := []byte(vecBody)
		req, err := http.NewRequest(http.MethodPost, base+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-amz-json-1.1")
		req.Header.Set("X-Amz-Target", vecTarget)
		req.Header.Set("Amz-Sdk-Invocation-Id", "5f3c0d2e-0000-4000-8000-000000000000")
		req.Header.Set("Amz-Sdk-Request", "attempt=1; max=3")
		if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hashHex(body), "ecs", "us-west-2", time.Now()); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(req.Header.Get("Authorization"), "content-length") {
			t.Fatalf("expected the SDK to sign content-length: %s", req.Header.Get("Authorization"))
		}
		res := send(t, req, got)
		if res.err != nil {
			t.Fatalf("%s: %v", path, res.err)
		}
		if res.p.Role != RoleAdmin || res.p.Region != "us-west-2" {
			t.Fatalf("%s: principal %+v", path, res.p)
		}
	}
}

// presign makes a presigned URL with the SDK's signer: only host is signed,
// and the payload is UNSIGNED-PAYLOAD, as presigned URLs have it.
func presign(t *testing.T, method, url string, signedAt time.Time) (string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	creds := aws.Credentials{AccessKeyID: vecAKID, SecretAccessKey: vecSecret}
	uri, hdr, err := v4.NewSigner().PresignHTTP(context.Background(), creds, req, "UNSIGNED-PAYLOAD", "ecs", "eu-west-1", signedAt)
	if err != nil {
		t.Fatal(err)
	}
	return uri, hdr
}

// TestPresignedRefused: issue 46, point 3. A presigned URL with
// X-Amz-Expires=604800 that signs only host worked as a bearer token for
// any operation and body, and one dated 6 days back was still good. Both
// are refused now, sent as a browser or curl would send them, however
// fresh, and next to a valid Authorization header too.
func TestPresignedRefused(t *testing.T) {
	const msg = "Presigned (query-string) authentication is not accepted here..."
	base, got := verifyServer(t, liveVerifier())
	for _, signedAt := range []time.Time{time.Now(), time.Now().Add(-6 * 24 * time.Hour)} {
		uri, hdr := presign(t, http.MethodPost, base+"/?X-Amz-Expires=604800", signedAt)
		if hdr.Get("X-Amz-Target") != "" || !strings.Contains(uri, "X-Amz-SignedHeaders=host&") {
			t.Fatalf("presigned URL signs more than host: %s %v", uri, hdr)
		}
		req, err := http.NewRequest(http.MethodPost, uri, strings.NewReader(`{"clusterName":"bearer"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-amz-json-1.1")
		req.Header.Set("X-Amz-Target", "AmazonEC2ContainerServiceV20141113.CreateCluster")
		wantError(t, send(t, req, got).err, CodeInvalidSignature, msg)
	}

	// A header-signed request with a presigned URL's parameters as well.
	uri, _ := presign(t, http.MethodPost, base+"/", time.Now())
	req, err := http.NewRequest(http.MethodPost, uri, strings.NewReader(vecBody))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Amz-Target", vecTarget)
	if err := v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: vecAKID, SecretAccessKey: vecSecret},
		req, hashHex([]byte(vecBody)), "ecs", "eu-west-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	wantError(t, send(t, req, got).err, CodeInvalidSignature, msg)
}

// TestBotocoreSigner signs with the botocore that the AWS CLI is built on.
func TestBotocoreSigner(t *testing.T) {
	if err := exec.Command("python3", "-c", "import botocore").Run(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("python3 with botocore is required when CI is set: %v", err)
		}
		t.Skipf("python3 with botocore not available: %v", err)
	}
	base, got := verifyServer(t, liveVerifier())
	for _, path := range []string{"/", "/agent/a%20b/c~d?b=two%20words&a=x%2Fy&a=1"} {
		in, _ := json.Marshal(map[string]any{
			"method": "POST", "url": base + path, "body": vecBody,
			"headers": map[string]string{
				"Content-Type": "application/x-amz-json-1.1",
				"X-Amz-Target": vecTarget,
				"User-Agent":   "aws-cli/2 botocore/1.43",
			},
			"access_key": vecAKID, "secret_key": vecSecret, "service": "ecs", "region": "ap-south-1",
		})
		cmd := exec.Command("python3", "testdata/botocore_sign.py")
		cmd.Stdin = bytes.NewReader(in)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("botocore signer: %v\n%s", err, stderr.String())
		}
		var headers map[string]string
		if err := json.Unmarshal(out, &headers); err != nil {
			t.Fatalf("botocore output %q: %v", out, err)
		}
		req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(vecBody))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		res := send(t, req, got)
		if res.err != nil {
			t.Fatalf("%s: %v (Authorization %s)", path, res.err, headers["Authorization"])
		}
		if res.p.Region != "ap-south-1" || res.p.Role != RoleAdmin {
			t.Fatalf("%s: principal %+v", path, res.p)
		}
	}
}
