package api

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/aws/smithy-go"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/auth"
)

// limitsAPI serves RegisterTaskDefinition and CreateCluster behind the real
// verifier and counts the body bytes the handler read.
type limitsAPI struct {
	url  string
	read atomic.Int64 // body bytes read by the handler, all requests

	mu    sync.Mutex
	calls []string
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func newLimitsAPI(t *testing.T) *limitsAPI {
	t.Helper()
	a := &limitsAPI{}
	h := NewHandler(&auth.Verifier{Lookup: auth.NewStaticLookup(admin)}, nil, slog.New(slog.DiscardHandler))
	note := func(op string) {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.calls = append(a.calls, op)
	}
	Register(h, "RegisterTaskDefinition", func(_ context.Context, req *shapes.RegisterTaskDefinitionRequest) (*shapes.RegisterTaskDefinitionResponse, error) {
		note("RegisterTaskDefinition")
		return &shapes.RegisterTaskDefinitionResponse{}, nil
	})
	Register(h, "CreateCluster", func(_ context.Context, req *shapes.CreateClusterRequest) (*shapes.CreateClusterResponse, error) {
		note("CreateCluster " + req.ClusterName)
		return &shapes.CreateClusterResponse{}, nil
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = countingBody{r.Body, &a.read}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	a.url = srv.URL
	return a
}

func (a *limitsAPI) called() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.calls...)
}

// taskDefinition is a RegisterTaskDefinition input of about size bytes on
// the wire.
func taskDefinition(size int) *ecs.RegisterTaskDefinitionInput {
	var env []types.KeyValuePair
	for left := size - 200; left > 0; left -= 4096 {
		env = append(env, types.KeyValuePair{Name: aws.String("V" + strconv.Itoa(len(env))), Value: aws.String(strings.Repeat("x", min(left, 4096)-20))})
	}
	return &ecs.RegisterTaskDefinitionInput{Family: aws.String("big"),
		ContainerDefinitions: []types.ContainerDefinition{{Name: aws.String("c"), Image: aws.String("busybox"), Memory: aws.Int32(64), Environment: env}}}
}

// TestTaskDefinitionSize: issue 46, point 7. A 1 MB task definition was
// accepted; ECS takes 64 KiB. The SDK sending one gets ECS's own
// ClientException (the body dropped, not kept); 63 KiB passes.
func TestTaskDefinitionSize(t *testing.T) {
	a := newLimitsAPI(t)
	var sent int64
	c := ecs.New(ecs.Options{Region: "us-east-1", BaseEndpoint: aws.String(a.url), Retryer: aws.NopRetryer{},
		Credentials: credentials.NewStaticCredentialsProvider(admin.AccessKeyID, admin.SecretAccessKey, "")},
		func(o *ecs.Options) {
			o.HTTPClient = &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				sent = r.ContentLength
				return http.DefaultTransport.RoundTrip(r)
			})}
		})
	ctx := context.Background()

	_, err := c.RegisterTaskDefinition(ctx, taskDefinition(1_000_000))
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != "ClientException" {
		t.Fatalf("1 MB task definition: %v", err)
	}
	if want := "Actual length: '" + strconv.FormatInt(sent, 10) + "'. Max allowed length is '65536' bytes."; ae.ErrorMessage() != want || sent < 1_000_000 {
		t.Fatalf("1 MB task definition (%d bytes): %q, want %q", sent, ae.ErrorMessage(), want)
	}

	if _, err := c.RegisterTaskDefinition(ctx, taskDefinition(63<<10)); err != nil {
		t.Fatalf("63 KiB task definition: %v", err)
	}
	if sent < 62<<10 || sent > 64<<10 {
		t.Fatalf("the 63 KiB task definition was %d bytes", sent)
	}
	if got := a.called(); len(got) != 1 || got[0] != "RegisterTaskDefinition" {
		t.Fatalf("operations called: %v", got)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// rawPost sends body signed by cred with X-Amz-Target target; chunked
// hides its length from the server; sign may change the request before it
// is signed.
func rawPost(t *testing.T, url, target string, body []byte, cred auth.Credential, chunked bool) reply {
	t.Helper()
	var rd io.Reader = bytes.NewReader(body)
	if chunked {
		rd = io.MultiReader(rd) // not a type http.NewRequest takes the length of
	}
	req, err := http.NewRequest(http.MethodPost, url+"/", rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	req.Header.Set("X-Amz-Target", target)
	if err := v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: cred.AccessKeyID, SecretAccessKey: cred.SecretAccessKey},
		req, sha256Hex(body), "ecs", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	return do(t, req)
}

func do(t *testing.T, req *http.Request) reply {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{resp.StatusCode, resp.Header, b}
}

// TestBodyCaps: a body without a declared length is measured as it is
// dropped; other operations have the default cap; a body declared above
// MaxBody is answered at once and none of it read; an unknown key is
// refused before any of the body is read.
func TestBodyCaps(t *testing.T) {
	a := newLimitsAPI(t)
	register := TargetPrefix + "RegisterTaskDefinition"
	big := append(append([]byte(`{"family":"`), bytes.Repeat([]byte("x"), 200_000)...), `"}`...)
	r := rawPost(t, a.url, register, big, admin, true)
	wantWireError(t, r, 400, "ClientException", fmt.Sprintf("Actual length: '%d'. Max allowed length is '65536' bytes.", len(big)))
	if r.header.Get("Connection") == "close" {
		t.Errorf("the connection closed after a body that was read to its end")
	}

	create := append(append([]byte(`{"clusterName":"`), bytes.Repeat([]byte("x"), DefaultBodyCap)...), `"}`...)
	wantWireError(t, rawPost(t, a.url, TargetPrefix+"CreateCluster", create, admin, false), 413, "SerializationException",
		"request body exceeds the 65536 byte limit of CreateCluster")

	// 2 MiB declared, 10 bytes sent: the answer comes without waiting for
	// the rest, and the connection is closed.
	a.read.Store(0)
	req, _ := http.NewRequest(http.MethodPost, a.url+"/", nil)
	req.Header.Set("X-Amz-Target", register)
	req.ContentLength = 2 << 20
	if err := v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: admin.AccessKeyID, SecretAccessKey: admin.SecretAccessKey},
		req, sha256Hex(nil), "ecs", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", strings.TrimPrefix(a.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n", req.Host, req.ContentLength)
	for _, k := range []string{"X-Amz-Target", "X-Amz-Date", "Authorization"} {
		fmt.Fprintf(conn, "%s: %s\r\n", k, req.Header.Get(k))
	}
	fmt.Fprintf(conn, "\r\n{\"family\"")
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		t.Fatalf("no answer to a body declared too large: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	wantWireError(t, reply{resp.StatusCode, resp.Header, b}, 400, "ClientException", "Actual length: '2097152'. Max allowed length is '65536' bytes.")
	if !resp.Close {
		t.Error("the connection stays open with the body unread")
	}
	if n := a.read.Load(); n != 0 {
		t.Fatalf("read %d bytes of a body declared above %d", n, MaxBody)
	}

	// An unknown key: refused from its headers, the body left unread.
	nobody := auth.Credential{AccessKeyID: "AKIDNOBODY", SecretAccessKey: "whatever-secret"}
	wantWireError(t, rawPost(t, a.url, TargetPrefix+"CreateCluster", []byte(`{"clusterName":"a"}`), nobody, true), 400,
		auth.CodeUnrecognizedClient, "The security token included in the request is invalid.")
	if n := a.read.Load(); n != 0 {
		t.Fatalf("read %d bytes before the key was known", n)
	}
	if got := a.called(); len(got) != 0 {
		t.Fatalf("refused requests reached operations: %v", got)
	}
}

// TestUnsignedBodiesRefused: issue 46, points 3 and 4, at the API. A
// presigned URL signing only host (X-Amz-Expires=604800, fresh or dated 6
// days back) ran CreateCluster; requests signed with UNSIGNED-PAYLOAD,
// STREAMING-AWS4-HMAC-SHA256-PAYLOAD or "x" as their payload hash ran the
// body swapped in after signing. Each is refused and creates nothing.
func TestUnsignedBodiesRefused(t *testing.T) {
	a := newLimitsAPI(t)
	creds := aws.Credentials{AccessKeyID: admin.AccessKeyID, SecretAccessKey: admin.SecretAccessKey}
	target := TargetPrefix + "CreateCluster"

	for _, at := range []time.Time{time.Now(), time.Now().Add(-6 * 24 * time.Hour)} {
		req, _ := http.NewRequest(http.MethodPost, a.url+"/?X-Amz-Expires=604800", nil)
		uri, _, err := v4.NewSigner().PresignHTTP(context.Background(), creds, req, "UNSIGNED-PAYLOAD", "ecs", "us-east-1", at)
		if err != nil {
			t.Fatal(err)
		}
		req, _ = http.NewRequest(http.MethodPost, uri, strings.NewReader(`{"clusterName":"bearer"}`))
		req.Header.Set("Content-Type", "application/x-amz-json-1.1")
		req.Header.Set("X-Amz-Target", target)
		wantWireError(t, do(t, req), 400, auth.CodeInvalidSignature, "Presigned (query-string) authentication is not accepted here...")
	}

	for _, mode := range []string{"UNSIGNED-PAYLOAD", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD", "x"} {
		req, _ := http.NewRequest(http.MethodPost, a.url+"/", strings.NewReader(`{"clusterName":"signed"}`))
		req.Header.Set("Content-Type", "application/x-amz-json-1.1")
		req.Header.Set("X-Amz-Target", target)
		req.Header.Set("X-Amz-Content-Sha256", mode)
		if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, mode, "ecs", "us-east-1", time.Now()); err != nil {
			t.Fatal(err)
		}
		swapped := `{"clusterName":"swapped"}`
		req.Body, req.ContentLength = io.NopCloser(strings.NewReader(swapped)), int64(len(swapped))
		wantWireError(t, do(t, req), 400, auth.CodeInvalidSignature, "The 'x-amz-content-sha256' header must be the lowercase hex SHA-256 of the request body...")
	}
	if got := a.called(); len(got) != 0 {
		t.Fatalf("clusters created: %v", got)
	}
	if n := a.read.Load(); n != 0 {
		t.Fatalf("read %d body bytes of requests refused from their headers", n)
	}
}
