package console_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/aws/aws-sdk-go-v2/service/iam"

	"github.com/capstanhq/capstan/internal/console"
	"github.com/capstanhq/capstan/internal/server"
	"github.com/capstanhq/capstan/internal/testenv"
)

// browser is an HTTP client as a browser uses the console: cookies kept,
// redirects not followed (the tests look at them).
type browser struct {
	t    *testing.T
	base string
	c    *http.Client
}

func newBrowser(t *testing.T, srv *testenv.Server) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, base: srv.URL, c: &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (b *browser) do(method, path string, form url.Values) (*http.Response, string) {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.base+path, body)
	if err != nil {
		b.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", b.base)
	}
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp, string(out)
}

func (b *browser) get(path string) (*http.Response, string) { return b.do(http.MethodGet, path, nil) }

func (b *browser) post(path string, form url.Values) (*http.Response, string) {
	return b.do(http.MethodPost, path, form)
}

func (b *browser) signIn(key, secret string) {
	b.t.Helper()
	resp, body := b.post("/console/signin", url.Values{"accessKeyId": {key}, "secretAccessKey": {secret}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/clusters" {
		b.t.Fatalf("sign in as %s: %d %s\n%s", key, resp.StatusCode, resp.Header.Get("Location"), body)
	}
}

var csrfRe = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf is the token of the signed-in session, read from a page's form.
func (b *browser) csrf() string {
	b.t.Helper()
	_, body := b.get("/console/clusters")
	m := csrfRe.FindStringSubmatch(body)
	if m == nil {
		b.t.Fatalf("no CSRF token on the clusters page:\n%s", body)
	}
	return m[1]
}

func wantStatus(t *testing.T, what string, resp *http.Response, body string, status int, contains ...string) {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("%s: status %d, want %d\n%s", what, resp.StatusCode, status, body)
	}
	for _, c := range contains {
		if !strings.Contains(body, c) {
			t.Fatalf("%s: body lacks %q\n%s", what, c, body)
		}
	}
}

const (
	adminKey    = "AKIDCAPSTANTEST"
	adminSecret = "capstan-test-secret"
)

func TestSignInAndSession(t *testing.T) {
	srv := testenv.StartServer(t, "")
	ctx := context.Background()
	if _, err := srv.ECS().CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("web-cluster")}); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, srv)

	resp, _ := b.get("/console/clusters")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/signin" {
		t.Fatalf("signed out: %d %s, want a redirect to sign in", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, body := b.get("/console/signin")
	wantStatus(t, "sign-in page", resp, body, 200, `name="accessKeyId"`, `type="password"`)
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Fatalf("Content-Security-Policy %q", csp)
	}

	// A wrong secret and an unknown key get the same answer, and no cookie.
	for _, creds := range [][2]string{{adminKey, "wrong-secret-wrong"}, {"AKIDNOSUCHKEY", adminSecret}, {"", ""}} {
		resp, body = b.post("/console/signin", url.Values{"accessKeyId": {creds[0]}, "secretAccessKey": {creds[1]}})
		wantStatus(t, "bad sign-in", resp, body, http.StatusUnauthorized, "Sign-in failed: the access key ID or secret is wrong.")
		if len(resp.Cookies()) != 0 {
			t.Fatalf("bad sign-in set cookies %v", resp.Cookies())
		}
	}

	resp, body = b.post("/console/signin", url.Values{"accessKeyId": {adminKey}, "secretAccessKey": {adminSecret}})
	wantStatus(t, "sign-in", resp, body, http.StatusSeeOther)
	var ck *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == console.CookieName {
			ck = c
		}
	}
	if ck == nil || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Secure || ck.Path != "/console/" || len(ck.Value) < 40 {
		t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Strict, not Secure on plain HTTP, Path /console/, a long random value", ck)
	}
	resp, body = b.get("/console/clusters")
	wantStatus(t, "clusters", resp, body, 200, "web-cluster", "Signed in as <b>root</b>")

	// Sign-out ends the session on the server: the old cookie is worthless.
	tok := b.csrf()
	resp, body = b.post("/console/signout", url.Values{"csrf": {tok}})
	wantStatus(t, "sign-out", resp, body, http.StatusSeeOther)
	resp, _ = b.get("/console/clusters")
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("after sign-out: %d, want a redirect to sign in", resp.StatusCode)
	}
	replay := newBrowser(t, srv)
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/console/clusters", nil)
	req.AddCookie(&http.Cookie{Name: console.CookieName, Value: ck.Value})
	r2, err := replay.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r2.Body.Close()
	if r2.StatusCode != http.StatusSeeOther {
		t.Fatalf("replayed cookie after sign-out: %d, want a redirect to sign in", r2.StatusCode)
	}
}

func TestSignInRateLimited(t *testing.T) {
	srv := testenv.StartServer(t, "")
	b := newBrowser(t, srv)
	for i := range 10 {
		resp, body := b.post("/console/signin", url.Values{"accessKeyId": {adminKey}, "secretAccessKey": {fmt.Sprintf("guess-%02d-xxxxxxxx", i)}})
		wantStatus(t, "bad sign-in", resp, body, http.StatusUnauthorized)
	}
	// Past the limit even the right secret is refused for a while.
	resp, body := b.post("/console/signin", url.Values{"accessKeyId": {adminKey}, "secretAccessKey": {adminSecret}})
	wantStatus(t, "sign-in past the limit", resp, body, http.StatusTooManyRequests, "Too many failed sign-ins")
	if resp.Header.Get("Retry-After") == "" {
		t.Fatal("no Retry-After")
	}
}

// daemonFixture makes a capacity provider and a daemon with two
// definitions registered: the daemon runs revision 1.
func daemonFixture(t *testing.T, srv *testenv.Server) (daemonArn string) {
	t.Helper()
	ctx := context.Background()
	c := srv.ECS()
	if _, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("apps")}); err != nil {
		t.Fatal(err)
	}
	cp, err := c.CreateCapacityProvider(ctx, &ecs.CreateCapacityProviderInput{Name: aws.String("apps-mi"), Cluster: aws.String("apps"),
		ManagedInstancesProvider: &types.CreateManagedInstancesProviderConfiguration{
			InfrastructureRoleArn: aws.String("arn:aws:iam::123456789012:role/capstan"),
			InstanceLaunchTemplate: &types.InstanceLaunchTemplate{Ec2InstanceProfileArn: aws.String("arn:aws:iam::123456789012:instance-profile/capstan"),
				NetworkConfiguration: &types.ManagedInstancesNetworkConfiguration{Subnets: []string{"local"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	var first string
	for _, img := range []string{"busybox:one", "busybox:two"} {
		td, err := c.RegisterDaemonTaskDefinition(ctx, &ecs.RegisterDaemonTaskDefinitionInput{Family: aws.String("agentd"),
			ContainerDefinitions: []types.DaemonContainerDefinition{{Name: aws.String("agentd"), Image: aws.String(img), Memory: aws.Int32(32)}}})
		if err != nil {
			t.Fatal(err)
		}
		if first == "" {
			first = aws.ToString(td.DaemonTaskDefinitionArn)
		}
	}
	d, err := c.CreateDaemon(ctx, &ecs.CreateDaemonInput{DaemonName: aws.String("agentd"), ClusterArn: aws.String("apps"),
		DaemonTaskDefinitionArn: aws.String(first), CapacityProviderArns: []string{aws.ToString(cp.CapacityProvider.CapacityProviderArn)}})
	if err != nil {
		t.Fatal(err)
	}
	return aws.ToString(d.DaemonArn)
}

// readOnlyUser makes an IAM user that may only describe and list.
func readOnlyUser(t *testing.T, srv *testenv.Server) (key, secret string) {
	t.Helper()
	ctx := context.Background()
	c := iam.New(iam.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: credentials.NewStaticCredentialsProvider(adminKey, adminSecret, "")})
	if _, err := c.CreateUser(ctx, &iam.CreateUserInput{UserName: aws.String("viewer")}); err != nil {
		t.Fatal(err)
	}
	doc := `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["ecs:Describe*","ecs:List*"],"Resource":"*"}]}`
	if _, err := c.PutUserPolicy(ctx, &iam.PutUserPolicyInput{UserName: aws.String("viewer"), PolicyName: aws.String("read"), PolicyDocument: aws.String(doc)}); err != nil {
		t.Fatal(err)
	}
	k, err := c.CreateAccessKey(ctx, &iam.CreateAccessKeyInput{UserName: aws.String("viewer")})
	if err != nil {
		t.Fatal(err)
	}
	return aws.ToString(k.AccessKey.AccessKeyId), aws.ToString(k.AccessKey.SecretAccessKey)
}

func TestDaemonActionsAuthorizedAsTheAPI(t *testing.T) {
	srv := testenv.StartServer(t, "")
	arn := daemonFixture(t, srv)
	page := "/console/daemon?arn=" + url.QueryEscape(arn)

	// A read-only user sees the daemon, the update greyed with the reason,
	// and the API refuses the POSTs all the same.
	key, secret := readOnlyUser(t, srv)
	v := newBrowser(t, srv)
	v.signIn(key, secret)
	resp, body := v.get(page)
	wantStatus(t, "daemon page as viewer", resp, body, 200, "Daemon agentd", "agentd:1", `id="update-denied"`, "ecs:UpdateDaemon", "Signed in as <b>viewer</b>")
	if !regexp.MustCompile(`id="preview" disabled`).MatchString(body) {
		t.Fatalf("preview button not disabled for the viewer:\n%s", body)
	}
	tok := v.csrf()
	resp, body = v.post("/console/daemon/update", url.Values{"csrf": {tok}, "arn": {arn}, "taskDefinition": {"agentd:2"}, "ifRevision": {"x"}})
	wantStatus(t, "update as viewer", resp, body, http.StatusForbidden, "AccessDeniedException", "ecs:UpdateDaemon")
	resp, body = v.post("/console/daemon/rollback", url.Values{"csrf": {tok}, "arn": {arn}})
	wantStatus(t, "rollback as viewer", resp, body, http.StatusForbidden, "AccessDeniedException")

	// The admin previews (the field diff names the image) and confirms.
	a := newBrowser(t, srv)
	a.signIn(adminKey, adminSecret)
	resp, body = a.get(page)
	wantStatus(t, "daemon page as admin", resp, body, 200, "agentd:1")
	if strings.Contains(body, `id="update-denied"`) {
		t.Fatalf("update denied to the admin:\n%s", body)
	}
	tok = a.csrf()
	resp, body = a.post("/console/daemon/preview", url.Values{"csrf": {tok}, "arn": {arn}, "taskDefinition": {"agentd:2"}})
	wantStatus(t, "preview", resp, body, 200, "Update agentd to agentd:2?", "busybox:one", "busybox:two", `id="confirm"`)
	ifRev := regexp.MustCompile(`name="ifRevision" value="([^"]+)"`).FindStringSubmatch(body)
	if ifRev == nil {
		t.Fatalf("no ifRevision in the preview:\n%s", body)
	}
	// Nothing changed by the preview.
	d, err := srv.ECS().DescribeDaemon(context.Background(), &ecs.DescribeDaemonInput{DaemonArn: aws.String(arn)})
	if err != nil {
		t.Fatal(err)
	}
	before := aws.ToString(d.Daemon.DeploymentArn)

	// CSRF: no token, a wrong token, another origin: all refused.
	form := url.Values{"arn": {arn}, "taskDefinition": {"agentd:2"}, "ifRevision": {ifRev[1]}}
	resp, body = a.post("/console/daemon/update", form)
	wantStatus(t, "update without CSRF token", resp, body, http.StatusForbidden, "CSRF")
	form.Set("csrf", "x"+tok)
	resp, body = a.post("/console/daemon/update", form)
	wantStatus(t, "update with a wrong CSRF token", resp, body, http.StatusForbidden, "CSRF")
	form.Set("csrf", tok)
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/console/daemon/update", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "http://evil.example")
	r2, err := a.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r2.Body.Close()
	if r2.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-origin update: %d, want 403", r2.StatusCode)
	}
	d, _ = srv.ECS().DescribeDaemon(context.Background(), &ecs.DescribeDaemonInput{DaemonArn: aws.String(arn)})
	if aws.ToString(d.Daemon.DeploymentArn) != before {
		t.Fatal("a refused POST started a deployment")
	}

	resp, body = a.post("/console/daemon/update", form)
	wantStatus(t, "confirmed update", resp, body, http.StatusSeeOther)
	d, _ = srv.ECS().DescribeDaemon(context.Background(), &ecs.DescribeDaemonInput{DaemonArn: aws.String(arn)})
	if aws.ToString(d.Daemon.DeploymentArn) == before {
		t.Fatal("the confirmed update started no deployment")
	}
	// The same confirmation again is stale: the daemon changed since.
	resp, body = a.post("/console/daemon/update", form)
	if resp.StatusCode == http.StatusSeeOther {
		t.Fatalf("a stale confirmation was applied:\n%s", body)
	}
	resp, body = a.get(page)
	wantStatus(t, "daemon page after the update", resp, body, 200, "agentd:2", "Rollout")
}

func TestBadInputs(t *testing.T) {
	srv := testenv.StartServer(t, "")
	arn := daemonFixture(t, srv)
	a := newBrowser(t, srv)
	a.signIn(adminKey, adminSecret)
	tok := a.csrf()
	for _, c := range []struct {
		path   string
		form   url.Values
		status int
		want   string
	}{
		{"/console/cluster", nil, 400, "name: a cluster name is required"},
		{"/console/cluster?name=apps&tab=bogus", nil, 400, "tab: must be one of"},
		{"/console/cluster?name=nosuch", nil, 400, "ClusterNotFoundException"},
		{"/console/daemon", nil, 400, "arn: a daemon ARN is required"},
		{"/console/daemon?arn=" + url.QueryEscape(arn+"x"), nil, 400, "Exception"},
		{"/console/daemon/preview", url.Values{"csrf": {tok}, "arn": {arn}}, 400, "daemonTaskDefinitionArn"},
		{"/console/daemon/preview", url.Values{"csrf": {tok}, "arn": {arn}, "taskDefinition": {"nosuch:9"}}, 400, "nosuch:9"},
		{"/console/daemon/update", url.Values{"csrf": {tok}, "arn": {arn}, "taskDefinition": {"agentd:2"}}, 400, "ifRevisionArn: preview the update first"},
		{"/console/daemon/rollback", url.Values{"csrf": {tok}}, 400, "arn: the daemon ARN is required"},
	} {
		var resp *http.Response
		var body string
		if c.form != nil {
			resp, body = a.post(c.path, c.form)
		} else {
			resp, body = a.get(c.path)
		}
		wantStatus(t, c.path+" "+c.form.Encode(), resp, body, c.status, c.want)
	}
	// Every cluster tab renders.
	for _, tab := range []string{"services", "tasks", "instances", "daemons", "events"} {
		resp, body := a.get("/console/cluster?name=apps&tab=" + tab)
		wantStatus(t, "tab "+tab, resp, body, 200, `aria-current="page">`+tab)
	}
	resp, body := a.get("/console/cluster?name=apps&tab=daemons")
	wantStatus(t, "daemons tab", resp, body, 200, "agentd")
}

// TestLiveStreamsHoldNoUnauthenticatedSlot: an open live page is a
// verified request, so more of them than --max-unauthenticated-requests
// leave the API answering.
func TestLiveStreamsHoldNoUnauthenticatedSlot(t *testing.T) {
	srv := testenv.StartServerWith(t, func(c *server.Config) { c.MaxUnauthenticated = 2 })
	arn := daemonFixture(t, srv)
	a := newBrowser(t, srv)
	a.signIn(adminKey, adminSecret)
	for range 4 {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/console/daemon/live?arn="+url.QueryEscape(arn), nil)
		req.Header.Set("Accept", "text/event-stream")
		resp, err := (&http.Client{Jar: a.c.Jar}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("live: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		if err != nil || line != "event: html\n" {
			t.Fatalf("live stream's first line %q %v", line, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := srv.ECS().ListClusters(ctx, &ecs.ListClustersInput{}); err != nil {
		t.Fatalf("API with four live pages open and 2 unauthenticated slots: %v", err)
	}
	// A stream without a session is refused, not redirected.
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/console/daemon/live?arn=x", nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("live without a session: %d, want 401", resp.StatusCode)
	}
}

// TestSecureCookieUnderTLS: a server speaking TLS marks the session cookie
// Secure.
func TestSecureCookieUnderTLS(t *testing.T) {
	srv := testenv.StartServerWith(t, func(c *server.Config) { c.TLSSelfSigned = true })
	b := newBrowser(t, srv)
	b.c.Transport = srv.HTTPClient().Transport
	resp, body := b.post("/console/signin", url.Values{"accessKeyId": {adminKey}, "secretAccessKey": {adminSecret}})
	wantStatus(t, "sign-in over TLS", resp, body, http.StatusSeeOther)
	var ck *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == console.CookieName {
			ck = c
		}
	}
	if ck == nil || !ck.Secure || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode {
		t.Fatalf("session cookie over TLS %+v: want Secure, HttpOnly, SameSite=Strict", ck)
	}
	resp, body = b.get("/console/clusters")
	wantStatus(t, "clusters over TLS", resp, body, 200, "Clusters")
}
