package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/aws/smithy-go"

	"github.com/capstanhq/capstan/internal/testenv"
)

const targetPrefix = "AmazonEC2ContainerServiceV20141113."

// recorded is one request exactly as a client sent it.
type recorded struct {
	Method, URI, Host string
	Header            http.Header
	Body              []byte
}

// recorder is a reverse proxy that keeps every request it forwards. It
// leaves Host alone, so the backend sees what the client signed.
type recorder struct {
	backend string
	mu      sync.Mutex
	reqs    []recorded
}

func (rc *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	rc.mu.Lock()
	rc.reqs = append(rc.reqs, recorded{Method: r.Method, URI: r.URL.RequestURI(), Host: r.Host, Header: r.Header.Clone(), Body: body})
	rc.mu.Unlock()

	out, err := http.NewRequestWithContext(r.Context(), r.Method, rc.backend+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	out.Header = r.Header.Clone()
	out.Host = r.Host
	resp, err := http.DefaultTransport.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}

// last returns the most recent request with the given operation.
func (rc *recorder) last(t *testing.T, op string) recorded {
	t.Helper()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for i := len(rc.reqs) - 1; i >= 0; i-- {
		if rc.reqs[i].Header.Get("X-Amz-Target") == targetPrefix+op {
			return rc.reqs[i]
		}
	}
	t.Fatalf("no %s request was recorded (have %d requests)", op, len(rc.reqs))
	return recorded{}
}

// reply is a raw API response.
type reply struct {
	status int
	header http.Header
	body   []byte
}

func (rp reply) String() string {
	return strconv.Itoa(rp.status) + " " + string(rp.body)
}

// send posts req and checks that every response carries a request ID.
func send(t *testing.T, req *http.Request) reply {
	t.Helper()
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	rp := reply{status: resp.StatusCode, header: resp.Header, body: body}
	if resp.Header.Get("x-amzn-RequestId") == "" {
		t.Errorf("response without x-amzn-RequestId: %s", rp)
	}
	return rp
}

// replay sends a recorded request to base, optionally changed first.
func replay(t *testing.T, base string, rec recorded, change func(*http.Request)) reply {
	t.Helper()
	req, err := http.NewRequest(rec.Method, base+rec.URI, bytes.NewReader(rec.Body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = rec.Header.Clone()
	req.Host = rec.Host
	if change != nil {
		change(req)
	}
	return send(t, req)
}

// wantOK fails unless rp is a JSON 1.1 success.
func wantOK(t *testing.T, rp reply) {
	t.Helper()
	if rp.status != http.StatusOK {
		t.Fatalf("want 200, got %s", rp)
	}
	if ct := rp.header.Get("Content-Type"); ct != "application/x-amz-json-1.1" {
		t.Errorf("Content-Type %q", ct)
	}
}

// wantError checks an ECS-shaped error: status, __type and
// X-Amzn-ErrorType agreeing, and a message containing inMessage.
func wantError(t *testing.T, rp reply, status int, code, inMessage string) {
	t.Helper()
	var e struct {
		Type    string `json:"__type"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(rp.body, &e); err != nil {
		t.Fatalf("error body is not JSON: %v: %s", err, rp)
	}
	if rp.status != status || e.Type != code {
		t.Fatalf("want %d %s, got %s", status, code, rp)
	}
	if h := rp.header.Get("X-Amzn-ErrorType"); h != code {
		t.Errorf("X-Amzn-ErrorType %q, want %q", h, code)
	}
	if !strings.Contains(e.Message, inMessage) {
		t.Errorf("message %q does not mention %q", e.Message, inMessage)
	}
}

// authParam returns one parameter of a SigV4 Authorization header.
func authParam(authz, name string) string {
	for part := range strings.SplitSeq(authz, ",") {
		part = strings.TrimSpace(part)
		part = strings.TrimPrefix(part, "AWS4-HMAC-SHA256 ")
		if v, ok := strings.CutPrefix(part, name+"="); ok {
			return v
		}
	}
	return ""
}

// signedCall sends an ECS call signed by the Go SDK's v4 signer at time at.
func signedCall(t *testing.T, srv *testenv.Server, op string, body []byte, at time.Time) reply {
	t.Helper()
	return signedCallAs(t, srv, srv.Config.AdminKeyID, srv.Config.AdminSecret, targetPrefix+op, body, at)
}

func signedCallAs(t *testing.T, srv *testenv.Server, keyID, secret, target string, body []byte, at time.Time) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	req.Header.Set("X-Amz-Target", target)
	sum := sha256.Sum256(body)
	creds := aws.Credentials{AccessKeyID: keyID, SecretAccessKey: secret}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hex.EncodeToString(sum[:]), "ecs", "us-east-1", at); err != nil {
		t.Fatalf("sign: %v", err)
	}
	return send(t, req)
}

func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

func TestSigV4ValidClients(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartServer(t, "")
	c := srv.ECS()
	cl, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("signed")})
	if err != nil {
		t.Fatalf("Go SDK: %v", err)
	}
	arn := aws.ToString(cl.Cluster.ClusterArn)
	list, err := c.ListClusters(ctx, &ecs.ListClustersInput{})
	if err != nil || len(list.ClusterArns) != 1 || list.ClusterArns[0] != arn {
		t.Fatalf("Go SDK list: %+v %v", list, err)
	}

	_, err = srv.ECSWith(srv.Config.AdminKeyID, "wrong-secret").ListClusters(ctx, &ecs.ListClustersInput{})
	if code := apiCode(err); code != "InvalidSignatureException" {
		t.Errorf("Go SDK with a wrong secret: code %q (%v)", code, err)
	}
	_, err = srv.ECSWith("AKIDNOBODY", "whatever").ListClusters(ctx, &ecs.ListClustersInput{})
	if code := apiCode(err); code != "UnrecognizedClientException" {
		t.Errorf("Go SDK with an unknown key: code %q (%v)", code, err)
	}

	out, stderr, err := runAWS(t, srv.Env(), "ecs", "list-clusters", "--endpoint-url", srv.URL, "--region", "us-east-1", "--output", "json")
	if err != nil {
		t.Fatalf("aws ecs list-clusters: %v\n%s", err, stderr)
	}
	var got struct{ ClusterArns []string }
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got.ClusterArns) != 1 || got.ClusterArns[0] != arn {
		t.Fatalf("aws ecs list-clusters printed %q (%v)", out, err)
	}

	// A wrong secret gets a message that points at the signature.
	env := append(srv.Env(), "AWS_SECRET_ACCESS_KEY=not-the-secret")
	_, stderr, err = runAWS(t, env, "ecs", "list-clusters", "--endpoint-url", srv.URL, "--region", "us-east-1")
	if err == nil {
		t.Fatal("aws ecs list-clusters with a wrong secret succeeded")
	}
	if !strings.Contains(stderr, "InvalidSignatureException") || !strings.Contains(stderr, "signature") {
		t.Errorf("aws with a wrong secret printed %q", stderr)
	}
}

func TestSigV4ReplayedCLIRequests(t *testing.T) {
	srv := testenv.StartServer(t, "")
	cl, err := srv.ECS().CreateCluster(context.Background(), &ecs.CreateClusterInput{ClusterName: aws.String("recorded")})
	if err != nil {
		t.Fatal(err)
	}
	rc := &recorder{backend: srv.URL}
	proxy := httptest.NewServer(rc)
	defer proxy.Close()

	for _, args := range [][]string{
		{"ecs", "list-clusters"},
		{"ecs", "describe-clusters", "--clusters", "recorded"},
	} {
		args = append(args, "--endpoint-url", proxy.URL, "--region", "us-east-1", "--output", "json")
		out, stderr, err := runAWS(t, srv.Env(), args...)
		if err != nil {
			t.Fatalf("aws %s through the proxy: %v\n%s", strings.Join(args, " "), err, stderr)
		}
		if !strings.Contains(out, aws.ToString(cl.Cluster.ClusterArn)) {
			t.Fatalf("aws %s printed %q", strings.Join(args, " "), out)
		}
	}
	list := rc.last(t, "ListClusters")
	describe := rc.last(t, "DescribeClusters")
	if !bytes.Contains(describe.Body, []byte(`"recorded"`)) {
		t.Fatalf("describe-clusters body %q does not name the cluster", describe.Body)
	}
	authz := describe.Header.Get("Authorization")
	signed := strings.Split(authParam(authz, "SignedHeaders"), ";")
	for _, h := range []string{"host", "x-amz-date", "x-amz-target", "content-type"} {
		if !slices.Contains(signed, h) {
			t.Fatalf("the CLI did not sign %s: SignedHeaders=%v", h, signed)
		}
	}
	keyID := srv.Config.AdminKeyID

	t.Run("as sent", func(t *testing.T) {
		wantOK(t, replay(t, srv.URL, list, nil))
		rp := replay(t, srv.URL, describe, nil)
		wantOK(t, rp)
		if !bytes.Contains(rp.body, []byte(`"clusterName":"recorded"`)) {
			t.Errorf("describe replay: %s", rp)
		}
	})

	refusals := []struct {
		name    string
		rec     recorded
		change  func(*http.Request)
		code    string
		message string
	}{
		{"tampered body", describe, func(r *http.Request) {
			b := bytes.Replace(describe.Body, []byte(`"recorded"`), []byte(`"recordeX"`), 1)
			r.Body = io.NopCloser(bytes.NewReader(b))
		}, "InvalidSignatureException", "signature we calculated does not match"},
		{"tampered target", list, func(r *http.Request) {
			r.Header.Set("X-Amz-Target", targetPrefix+"ListServices")
		}, "InvalidSignatureException", "does not match"},
		{"tampered signature", describe, func(r *http.Request) {
			sig := authParam(authz, "Signature")
			last := "0"
			if strings.HasSuffix(sig, "0") {
				last = "1"
			}
			flipped := sig[:len(sig)-1] + last
			r.Header.Set("Authorization", strings.Replace(authz, "Signature="+sig, "Signature="+flipped, 1))
		}, "InvalidSignatureException", "does not match"},
		{"host rewritten by a proxy", describe, func(r *http.Request) {
			r.Host = strings.TrimPrefix(srv.URL, "http://")
		}, "InvalidSignatureException", "does not match"},
		{"unknown access key", describe, func(r *http.Request) {
			r.Header.Set("Authorization", strings.Replace(authz, "Credential="+keyID+"/", "Credential=AKIDUNKNOWN0000000000/", 1))
		}, "UnrecognizedClientException", "security token"},
		{"no signature parameter", describe, func(r *http.Request) {
			sig := authParam(authz, "Signature")
			r.Header.Set("Authorization", strings.Replace(authz, ", Signature="+sig, "", 1))
		}, "IncompleteSignatureException", "Signature"},
		{"no authorization", describe, func(r *http.Request) {
			r.Header.Del("Authorization")
		}, "MissingAuthenticationTokenException", "Missing Authentication Token"},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			rp := replay(t, srv.URL, tc.rec, tc.change)
			wantError(t, rp, http.StatusBadRequest, tc.code, tc.message)
			if bytes.Contains(rp.body, []byte(srv.Config.AdminSecret)) {
				t.Errorf("error leaks the secret: %s", rp)
			}
		})
	}
}

// TestSigV4ClockSkew signs with the Go SDK's signer at shifted times: the
// server allows 15 minutes either way.
func TestSigV4ClockSkew(t *testing.T) {
	srv := testenv.StartServer(t, "")
	body := []byte(`{}`)
	now := time.Now()
	wantOK(t, signedCall(t, srv, "ListClusters", body, now.Add(-14*time.Minute)))
	wantOK(t, signedCall(t, srv, "ListClusters", body, now.Add(14*time.Minute)))
	wantError(t, signedCall(t, srv, "ListClusters", body, now.Add(-16*time.Minute)),
		http.StatusBadRequest, "InvalidSignatureException", "Signature expired")
	wantError(t, signedCall(t, srv, "ListClusters", body, now.Add(16*time.Minute)),
		http.StatusBadRequest, "InvalidSignatureException", "Signature not yet current")
}

func TestWireProtocol(t *testing.T) {
	srv := testenv.StartServer(t, "")
	now := time.Now

	t.Run("unknown target", func(t *testing.T) {
		rp := signedCall(t, srv, "LaunchRocket", []byte(`{}`), now())
		wantError(t, rp, http.StatusBadRequest, "UnknownOperationException", "LaunchRocket")
		rp = signedCallAs(t, srv, srv.Config.AdminKeyID, srv.Config.AdminSecret, "SomeOtherService.ListClusters", []byte(`{}`), now())
		wantError(t, rp, http.StatusBadRequest, "UnknownOperationException", "SomeOtherService.ListClusters")
	})
	t.Run("malformed JSON", func(t *testing.T) {
		rp := signedCall(t, srv, "ListClusters", []byte(`{"maxResults":`), now())
		wantError(t, rp, http.StatusBadRequest, "SerializationException", "JSON")
		rp = signedCall(t, srv, "ListClusters", []byte(`["not","an","object"]`), now())
		wantError(t, rp, http.StatusBadRequest, "SerializationException", "object")
	})
	t.Run("body over its cap", func(t *testing.T) {
		body := []byte(`{"clusters":["` + strings.Repeat("x", 100<<10) + `"]}`)
		rp := signedCall(t, srv, "DescribeClusters", body, now())
		var e struct {
			Type    string `json:"__type"`
			Message string `json:"message"`
		}
		if err := json.Unmarshal(rp.body, &e); err != nil || rp.status < 400 || rp.status >= 500 {
			t.Fatalf("oversized body: %s", rp)
		}
		if e.Type != "SerializationException" || rp.header.Get("X-Amzn-ErrorType") != e.Type {
			t.Errorf("oversized body: %s (X-Amzn-ErrorType %q)", rp, rp.header.Get("X-Amzn-ErrorType"))
		}
		if !strings.Contains(e.Message, "exceeds") || !strings.Contains(e.Message, strconv.Itoa(64<<10)) {
			t.Errorf("oversized body message %q does not state the limit", e.Message)
		}
	})
	t.Run("wrong member type", func(t *testing.T) {
		rp := signedCall(t, srv, "ListClusters", []byte(`{"maxResults":"ten"}`), now())
		wantError(t, rp, http.StatusBadRequest, "SerializationException", "maxResults")
	})
	t.Run("unknown members ignored", func(t *testing.T) {
		rp := signedCall(t, srv, "ListClusters", []byte(`{"futureField":1}`), now())
		wantOK(t, rp)
	})
	t.Run("empty body", func(t *testing.T) {
		wantOK(t, signedCall(t, srv, "ListClusters", nil, now()))
	})
	t.Run("timestamps are numbers", func(t *testing.T) {
		ctx := context.Background()
		c := srv.ECS()
		cl, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("wire")})
		if err != nil {
			t.Fatal(err)
		}
		cp, err := c.CreateCapacityProvider(ctx, &ecs.CreateCapacityProviderInput{
			Name:    aws.String("wire-mi"),
			Cluster: aws.String("wire"),
			ManagedInstancesProvider: &types.CreateManagedInstancesProviderConfiguration{
				InfrastructureRoleArn: aws.String("arn:aws:iam::123456789012:role/capstan"),
				InstanceLaunchTemplate: &types.InstanceLaunchTemplate{
					Ec2InstanceProfileArn: aws.String("arn:aws:iam::123456789012:instance-profile/capstan"),
					NetworkConfiguration:  &types.ManagedInstancesNetworkConfiguration{Subnets: []string{"subnet-local"}},
				},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		td, err := c.RegisterDaemonTaskDefinition(ctx, &ecs.RegisterDaemonTaskDefinitionInput{
			Family:               aws.String("wire-agent"),
			Memory:               aws.String("256"),
			ContainerDefinitions: []types.DaemonContainerDefinition{{Name: aws.String("agent"), Image: aws.String("capstan/agent:1")}},
		})
		if err != nil {
			t.Fatal(err)
		}
		body, _ := json.Marshal(map[string]any{
			"daemonName":              "wire",
			"clusterArn":              aws.ToString(cl.Cluster.ClusterArn),
			"daemonTaskDefinitionArn": aws.ToString(td.DaemonTaskDefinitionArn),
			"capacityProviderArns":    []string{aws.ToString(cp.CapacityProvider.CapacityProviderArn)},
		})
		rp := signedCall(t, srv, "CreateDaemon", body, now())
		wantOK(t, rp)
		created := wantNumber(t, rp, "createdAt")
		if d := time.Since(created); d < -time.Minute || d > time.Minute {
			t.Errorf("createdAt %v is not about now", created)
		}
		var out struct{ DaemonArn, DeploymentArn string }
		json.Unmarshal(rp.body, &out)

		rp = signedCall(t, srv, "DescribeDaemon", []byte(`{"daemonArn":"`+out.DaemonArn+`"}`), now())
		wantOK(t, rp)
		var dd struct{ Daemon json.RawMessage }
		json.Unmarshal(rp.body, &dd)
		wantNumber(t, reply{body: dd.Daemon}, "createdAt")

		rp = signedCall(t, srv, "DescribeDaemonTaskDefinition",
			[]byte(`{"daemonTaskDefinition":"`+aws.ToString(td.DaemonTaskDefinitionArn)+`"}`), now())
		wantOK(t, rp)
		var dt struct{ DaemonTaskDefinition json.RawMessage }
		json.Unmarshal(rp.body, &dt)
		wantNumber(t, reply{body: dt.DaemonTaskDefinition}, "registeredAt")
	})
}

// wantNumber checks that member of the JSON object in rp.body is a number
// of epoch seconds, and returns it as a time.
func wantNumber(t *testing.T, rp reply, member string) time.Time {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(rp.body, &m); err != nil {
		t.Fatalf("not a JSON object: %s", rp.body)
	}
	raw, ok := m[member]
	if !ok {
		t.Fatalf("%s missing from %s", member, rp.body)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%s: %v", member, err)
	}
	n, ok := v.(json.Number)
	if !ok {
		t.Fatalf("%s is %s, want a JSON number of epoch seconds", member, raw)
	}
	f, err := n.Float64()
	if err != nil {
		t.Fatalf("%s: %v", member, err)
	}
	sec := int64(f)
	return time.Unix(sec, int64((f-float64(sec))*1e9))
}
