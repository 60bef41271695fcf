package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/smithy-go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/auth"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/store"
)

var (
	admin = auth.Credential{AccessKeyID: "AKIDAPIADMIN", SecretAccessKey: "admin-secret", Role: auth.RoleAdmin}
	agent = auth.Credential{AccessKeyID: "AKIDAPIAGENT", SecretAccessKey: "agent-secret", Role: auth.RoleAgent, InstanceID: "i-0abc"}
)

// call is what an operation saw of one request.
type call struct {
	op       string
	caller   auth.Principal
	readOnly bool
}

// testAPI is a Handler behind a real HTTP server and the real SigV4
// verifier, with a few operations whose result the test sets.
type testAPI struct {
	t   *testing.T
	h   *Handler
	url string

	mu    sync.Mutex
	calls []call
	err   error // what ListClusters returns
}

func newTestAPI(t *testing.T) *testAPI {
	t.Helper()
	a := &testAPI{t: t}
	v := &auth.Verifier{Lookup: auth.NewStaticLookup(admin, agent)}
	a.h = NewHandler(v, nil, slog.New(slog.DiscardHandler))
	a.h.Scope = func(ctx context.Context, _ auth.Principal, readOnly bool) context.Context {
		return context.WithValue(ctx, readOnlyKey{}, readOnly)
	}
	Register(a.h, "ListClusters", func(ctx context.Context, req *shapes.ListClustersRequest) (*shapes.ListClustersResponse, error) {
		a.record(ctx, "ListClusters")
		a.mu.Lock()
		err := a.err
		a.mu.Unlock()
		if err != nil {
			return nil, err
		}
		n := 1
		if req.MaxResults != nil {
			n = int(*req.MaxResults)
		}
		out := &shapes.ListClustersResponse{NextToken: "after-" + req.NextToken}
		for i := range n {
			out.ClusterArns = append(out.ClusterArns, fmt.Sprintf("arn:aws:ecs:us-east-1:123456789012:cluster/c%d", i))
		}
		return out, nil
	})
	Register(a.h, "DeleteCluster", func(ctx context.Context, req *shapes.DeleteClusterRequest) (*shapes.DeleteClusterResponse, error) {
		a.record(ctx, "DeleteCluster")
		return nil, nil // an empty answer is still an object
	})
	Register(a.h, "DescribeClusters", func(ctx context.Context, req *shapes.DescribeClustersRequest) (*shapes.DescribeClustersResponse, error) {
		a.record(ctx, "DescribeClusters")
		return &shapes.DescribeClustersResponse{}, nil
	})
	RegisterExtension(a.h, "Echo", func(ctx context.Context, req *map[string]string) (*map[string]string, error) {
		a.record(ctx, "Echo")
		out := map[string]string{"echo": (*req)["say"]}
		return &out, nil
	})
	srv := httptest.NewServer(a.h)
	t.Cleanup(srv.Close)
	a.url = srv.URL
	return a
}

type readOnlyKey struct{}

func (a *testAPI) record(ctx context.Context, op string) {
	p, _ := Caller(ctx)
	ro, _ := ctx.Value(readOnlyKey{}).(bool)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, call{op: op, caller: p, readOnly: ro})
}

func (a *testAPI) setErr(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.err = err
}

func (a *testAPI) called() []call {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]call(nil), a.calls...)
}

// sdk is the real ECS client, without retries so that each error is one
// request.
func (a *testAPI) sdk(cred auth.Credential) *ecs.Client {
	return ecs.New(ecs.Options{Region: "eu-west-1", BaseEndpoint: aws.String(a.url), Retryer: aws.NopRetryer{},
		Credentials: credentials.NewStaticCredentialsProvider(cred.AccessKeyID, cred.SecretAccessKey, "")})
}

// reply is a raw response.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// post sends body with X-Amz-Target target, signed by cred (unsigned when
// cred is nil), as the SDK would.
func (a *testAPI) post(method, target string, body []byte, cred *auth.Credential) reply {
	a.t.Helper()
	req, err := http.NewRequest(method, a.url+"/", bytes.NewReader(body))
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	if target != "" {
		req.Header.Set("X-Amz-Target", target)
	}
	if cred != nil {
		creds := aws.Credentials{AccessKeyID: cred.AccessKeyID, SecretAccessKey: cred.SecretAccessKey}
		sum := sha256Hex(body)
		if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, sum, "ecs", "us-east-1", time.Now()); err != nil {
			a.t.Fatal(err)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		a.t.Fatal(err)
	}
	return reply{resp.StatusCode, resp.Header, b}
}

// wantWireError checks an error reply: the status, __type and the
// X-Amzn-ErrorType header agreeing, and the message (a prefix when msg
// ends in "...").
func wantWireError(t *testing.T, r reply, status int, code, msg string) {
	t.Helper()
	var e struct {
		Type    string `json:"__type"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatalf("error body %q: %v", r.body, err)
	}
	if r.status != status || e.Type != code || r.header.Get("X-Amzn-ErrorType") != code {
		t.Fatalf("got HTTP %d, __type %q, X-Amzn-ErrorType %q; want %d %s (body %s)", r.status, e.Type, r.header.Get("X-Amzn-ErrorType"), status, code, r.body)
	}
	if r.header.Get("Content-Type") != "application/x-amz-json-1.1" {
		t.Errorf("Content-Type %q", r.header.Get("Content-Type"))
	}
	if p, ok := strings.CutSuffix(msg, "..."); ok && !strings.HasPrefix(e.Message, p) || !ok && e.Message != msg {
		t.Fatalf("message %q, want %q", e.Message, msg)
	}
}

var requestIDPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// TestSDKCallsReachTheirOperation: the SDK's calls land on the registered
// operation with the caller's principal and consistency scope, the output
// reaches the SDK, and every answer carries a fresh request ID.
func TestSDKCallsReachTheirOperation(t *testing.T) {
	a := newTestAPI(t)
	c := a.sdk(admin)
	ctx := context.Background()
	out, err := c.ListClusters(ctx, &ecs.ListClustersInput{MaxResults: aws.Int32(2), NextToken: aws.String("t")})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.ClusterArns) != 2 || aws.ToString(out.NextToken) != "after-t" {
		t.Fatalf("ListClusters output %+v", out)
	}
	id1, _ := awsmiddleware.GetRequestIDMetadata(out.ResultMetadata)
	if _, err := c.DeleteCluster(ctx, &ecs.DeleteClusterInput{Cluster: aws.String("c")}); err != nil {
		t.Fatalf("DeleteCluster (nil response): %v", err)
	}
	dout, err := c.DescribeClusters(ctx, &ecs.DescribeClustersInput{})
	if err != nil {
		t.Fatal(err)
	}
	id2, _ := awsmiddleware.GetRequestIDMetadata(dout.ResultMetadata)
	if !requestIDPattern.MatchString(id1) || !requestIDPattern.MatchString(id2) || id1 == id2 {
		t.Errorf("request IDs %q and %q: want two different UUIDs", id1, id2)
	}

	want := auth.Principal{AccessKeyID: admin.AccessKeyID, Role: auth.RoleAdmin, Region: "eu-west-1"}
	calls := a.called()
	if len(calls) != 3 {
		t.Fatalf("calls %+v", calls)
	}
	for i, w := range []call{{"ListClusters", want, true}, {"DeleteCluster", want, false}, {"DescribeClusters", want, true}} {
		if calls[i] != w {
			t.Errorf("call %d: %+v, want %+v", i, calls[i], w)
		}
	}

	// An extension operation is dispatched under its own prefix, and the
	// same name under the ECS prefix is unknown.
	r := a.post(http.MethodPost, ExtensionPrefix+"Echo", []byte(`{"say":"hi"}`), &admin)
	if r.status != http.StatusOK || string(r.body) != `{"echo":"hi"}` || !requestIDPattern.MatchString(r.header.Get("x-amzn-RequestId")) {
		t.Fatalf("extension: HTTP %d %s (request ID %q)", r.status, r.body, r.header.Get("x-amzn-RequestId"))
	}
	wantWireError(t, a.post(http.MethodPost, TargetPrefix+"Echo", []byte(`{}`), &admin), 400, "UnknownOperationException", `operation "AmazonEC2ContainerServiceV20141113.Echo" is not supported`)
	if got := a.h.Operations(); len(got) != 3 {
		t.Errorf("Operations() = %v, want the three ECS operations only", got)
	}
}

// TestErrorMapping: each kind of error an operation returns reaches the
// wire with its ECS name and status, and the SDK reads it as such;
// internal failures say nothing of their cause.
func TestErrorMapping(t *testing.T) {
	a := newTestAPI(t)
	c := a.sdk(admin)
	for _, tc := range []struct {
		err    error
		status int
		code   string
		msg    string
	}{
		{fault.Invalid("maxResults", "must be between 1 and 100"), 400, "InvalidParameterException", "maxResults: must be between 1 and 100"},
		{fault.ClientError("the cluster has services"), 400, "ClientException", "the cluster has services"},
		{fault.Missing("", "no such thing"), 400, "ClientException", "no such thing"},
		{fault.Missing("ClusterNotFoundException", "Cluster not found."), 400, "ClusterNotFoundException", "Cluster not found."},
		{fault.Conflicting("", "changed meanwhile"), 400, "ClientException", "changed meanwhile"},
		{fault.Conflicting("ResourceInUseException", "in use"), 400, "ResourceInUseException", "in use"},
		{fault.Denied("not for agents"), 400, "AccessDeniedException", "not for agents"},
		{&fault.Error{Kind: fault.Throttled, Message: "slow down"}, 400, "ThrottlingException", "slow down"},
		{fault.NotSupported("awsvpc is not supported"), 400, "UnsupportedFeatureException", "awsvpc is not supported"},
		{fmt.Errorf("create: %w", fault.Missing("", "wrapped")), 400, "ClientException", "wrapped"},
		{&fault.Error{Kind: fault.Internal, Message: "etcd at 10.0.0.7 refused"}, 500, "ServerException", "internal error"},
		{errors.New("store: etcd at 10.0.0.7 refused"), 500, "ServerException", "internal error"},
		{fmt.Errorf("read: %w", context.DeadlineExceeded), 500, "ServerException", "the request was cancelled or timed out"},
		// The store's want of space is told as the store words it, whatever wraps it.
		{&fault.Error{Kind: fault.Internal, Message: "put cluster", Err: fmt.Errorf("etcd txn: %w: the disk is full: 3 MiB free", store.ErrNoSpace)},
			500, "ServerException", "the state store is out of space: the disk is full: 3 MiB free"},
	} {
		a.setErr(tc.err)
		r := a.post(http.MethodPost, TargetPrefix+"ListClusters", []byte(`{}`), &admin)
		wantWireError(t, r, tc.status, tc.code, tc.msg)

		_, err := c.ListClusters(context.Background(), &ecs.ListClustersInput{})
		var ae smithy.APIError
		var re *awshttp.ResponseError
		if !errors.As(err, &ae) || !errors.As(err, &re) {
			t.Fatalf("%v: SDK error %v", tc.err, err)
		}
		if ae.ErrorCode() != tc.code || ae.ErrorMessage() != tc.msg || re.HTTPStatusCode() != tc.status || !requestIDPattern.MatchString(re.ServiceRequestID()) {
			t.Errorf("%v: SDK sees %s %q (HTTP %d, request %q), want %s %q (HTTP %d)", tc.err, ae.ErrorCode(), ae.ErrorMessage(),
				re.HTTPStatusCode(), re.ServiceRequestID(), tc.code, tc.msg, tc.status)
		}
	}
}

// TestRefusedRequests: requests refused before any operation runs.
func TestRefusedRequests(t *testing.T) {
	a := newTestAPI(t)
	list := TargetPrefix + "ListClusters"
	wrong := auth.Credential{AccessKeyID: admin.AccessKeyID, SecretAccessKey: "not-the-secret"}
	unknown := auth.Credential{AccessKeyID: "AKIDNOBODY", SecretAccessKey: "x"}

	wantWireError(t, a.post(http.MethodGet, list, nil, &admin), 405, "UnknownOperationException", "the ECS API accepts POST / only")
	wantWireError(t, a.post(http.MethodPost, list, []byte(`{}`), nil), 400, auth.CodeMissingAuthenticationToken, "Missing Authentication Token")
	wantWireError(t, a.post(http.MethodPost, list, []byte(`{}`), &wrong), 400, auth.CodeInvalidSignature, "The request signature we calculated does not match...")
	wantWireError(t, a.post(http.MethodPost, list, []byte(`{}`), &unknown), 400, auth.CodeUnrecognizedClient, "The security token included in the request is invalid.")
	wantWireError(t, a.post(http.MethodPost, "", []byte(`{}`), &admin), 400, "UnknownOperationException", "the X-Amz-Target header is missing")
	wantWireError(t, a.post(http.MethodPost, "SomeOtherService.ListClusters", []byte(`{}`), &admin), 400, "UnknownOperationException", `operation "SomeOtherService.ListClusters" is not supported`)
	// AdminOnly: an agent credential is authenticated, then refused.
	wantWireError(t, a.post(http.MethodPost, list, []byte(`{}`), &agent), 400, "AccessDeniedException",
		"credential AKIDAPIAGENT (role agent) is not allowed to call ListClusters")
	big := append(append([]byte(`{"nextToken":"`), bytes.Repeat([]byte("x"), DefaultBodyCap)...), `"}`...)
	wantWireError(t, a.post(http.MethodPost, list, big, &admin), 413, "SerializationException",
		fmt.Sprintf("request body exceeds the %d byte limit of ListClusters", DefaultBodyCap))
	if calls := a.called(); len(calls) != 0 {
		t.Fatalf("refused requests reached operations: %+v", calls)
	}
}

// TestDecoding: bodies the model cannot take are refused with the member
// and the rule named, before the operation runs; what it can take (an
// empty body, members it does not know) is accepted.
func TestDecoding(t *testing.T) {
	a := newTestAPI(t)
	for _, tc := range []struct {
		op, body string
		code     string
		msg      string
	}{
		{"ListClusters", `[]`, "SerializationException", "the request body must be a JSON object"},
		{"ListClusters", `"x"`, "SerializationException", "the request body must be a JSON object"},
		{"ListClusters", `{"maxResults":"ten"}`, "SerializationException", "maxResults: expected integer, got JSON string"},
		{"ListClusters", `{"nextToken":7}`, "SerializationException", "nextToken: expected string, got JSON number"},
		{"DescribeClusters", `{"clusters":{}}`, "SerializationException", "clusters: expected list, got JSON object"},
		{"ListClusters", `{"maxResults":1} {}`, "SerializationException", "unexpected data after the JSON object"},
		{"ListClusters", `{"maxResults":`, "SerializationException", "malformed JSON: unexpected end of input"},
		{"ListClusters", `{"maxResults" 1}`, "SerializationException", "malformed JSON at byte..."},
		{"DeleteCluster", `{}`, "InvalidParameterException", "cluster: ..."},
	} {
		r := a.post(http.MethodPost, TargetPrefix+tc.op, []byte(tc.body), &admin)
		t.Run(tc.body, func(t *testing.T) { wantWireError(t, r, 400, tc.code, tc.msg) })
	}
	if calls := a.called(); len(calls) != 0 {
		t.Fatalf("undecodable requests reached operations: %+v", calls)
	}
	for _, body := range []string{``, "  \n", `{"maxResults":1,"someNewMember":{"x":[1]}}`} {
		r := a.post(http.MethodPost, TargetPrefix+"ListClusters", []byte(body), &admin)
		if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/x-amz-json-1.1" {
			t.Errorf("body %q: HTTP %d %s", body, r.status, r.body)
		}
	}
	r := a.post(http.MethodPost, TargetPrefix+"DeleteCluster", []byte(`{"cluster":"c"}`), &admin)
	if r.status != http.StatusOK || string(r.body) != `{}` {
		t.Errorf("nil response: HTTP %d %q, want {}", r.status, r.body)
	}
}

// TestMetricsCountByOperationAndCode: requests are counted under their
// operation (unknown targets under one label, whatever they say) and the
// error code they ended with.
func TestMetricsCountByOperationAndCode(t *testing.T) {
	a := newTestAPI(t)
	list := TargetPrefix + "ListClusters"
	a.post(http.MethodPost, list, nil, &admin)
	a.post(http.MethodPost, list, nil, &admin)
	a.setErr(fault.Missing("ClusterNotFoundException", "gone"))
	a.post(http.MethodPost, list, nil, &admin)
	a.post(http.MethodPost, TargetPrefix+"LaunchRocket", nil, &admin)
	a.post(http.MethodPost, "Other."+strings.Repeat("x", 100), nil, &admin)

	reg := prometheus.NewRegistry()
	reg.MustRegister(a.h.Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	observed := 0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch mf.GetName() {
			case "capstan_api_requests_total":
				got[labels["operation"]+"/"+labels["code"]] = m.GetCounter().GetValue()
			case "capstan_api_request_duration_seconds":
				observed += int(m.GetHistogram().GetSampleCount())
			}
		}
	}
	want := map[string]float64{"ListClusters/": 2, "ListClusters/ClusterNotFoundException": 1, "unknown/UnknownOperationException": 2}
	if len(got) != len(want) {
		t.Fatalf("counters %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("counters %v, want %v", got, want)
		}
	}
	if observed != 5 {
		t.Errorf("latency observed %d times, want 5", observed)
	}
}

func TestReadOnly(t *testing.T) {
	for op, want := range map[string]bool{"DescribeClusters": true, "ListTasks": true, "GetTaskProtection": true,
		"PreviewRollout": true, "CreateCluster": false, "UpdateService": false, "RunTask": false, "DeleteDaemon": false} {
		if ReadOnly(op) != want {
			t.Errorf("ReadOnly(%s) = %v", op, !want)
		}
	}
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
