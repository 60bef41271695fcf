package e2e

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/agent"
	"github.com/capstanhq/capstan/internal/agent/config"
	"github.com/capstanhq/capstan/internal/server"
	"github.com/capstanhq/capstan/internal/testenv"
	"github.com/capstanhq/capstan/internal/testenv/agents"
)

// tlsClient trusts only the PEM file bundle.
func tlsClient(t *testing.T, bundle string) *http.Client {
	t.Helper()
	b, err := os.ReadFile(bundle)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		t.Fatalf("%s: no certificate", bundle)
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

// startTLSServerProcess runs `capstan server` with args on addr and waits
// until /healthz answers over HTTPS with the generated bundle.
func startTLSServerProcess(t *testing.T, addr, dir string, args ...string) *serverProcess {
	t.Helper()
	cmd := exec.Command(capstanBinary(t), append([]string{"server", "--listen", addr, "--data-dir", dir, "--account-id", "123456789012",
		"--provisioner", "none"}, args...)...)
	cmd.Env = append(os.Environ(), "CAPSTAN_ACCESS_KEY_ID="+testKey, "CAPSTAN_SECRET_ACCESS_KEY="+testSecret)
	p := &serverProcess{cmd: cmd, addr: addr}
	p.log, p.done = runProcess(t, cmd)
	bundle := filepath.Join(dir, "tls", "server.crt")
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(bundle); err == nil {
			if resp, err := tlsClient(t, bundle).Get("https://" + addr + "/healthz"); err == nil {
				resp.Body.Close()
				// The server serves before it prints the certificate's
				// lines; its ready line comes after them.
				if resp.StatusCode == 200 && strings.Contains(p.log.String(), "capstan server ready") {
					return p
				}
			}
		}
		select {
		case err := <-p.done:
			t.Fatalf("server exited during start: %v\n%s", err, p.log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("server not healthy over TLS after 60s\n%s", p.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (p *serverProcess) stop(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		p.done <- nil
	case <-time.After(30 * time.Second):
		t.Fatalf("server did not stop\n%s", p.log)
	}
}

// withoutBundles is this process's environment without CA bundle
// settings. They are left out, not emptied: the AWS CLI takes an empty
// AWS_CA_BUNDLE as "do not verify".
func withoutBundles() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AWS_CA_BUNDLE=") && !strings.HasPrefix(kv, "CAPSTAN_CA_BUNDLE=") {
			env = append(env, kv)
		}
	}
	return env
}

func fileFingerprint(t *testing.T, path string) string {
	t.Helper()
	b, _ := os.ReadFile(path)
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM", path)
	}
	sum := sha256.Sum256(blk.Bytes)
	h := strings.ToUpper(hex.EncodeToString(sum[:]))
	var parts []string
	for i := 0; i < len(h); i += 2 {
		parts = append(parts, h[i:i+2])
	}
	return strings.Join(parts, ":")
}

// TestTLSServerProcess: `capstan server --tls-self-signed` serves HTTPS
// only. Plain HTTP gets Go's 400 and never reaches the API; the capstan
// CLI and the AWS CLI work with the CA bundle and fail on the certificate
// without it; a restart keeps the certificate.
func TestTLSServerProcess(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	addr := freeAddr(t)
	url := "https://" + addr
	p := startTLSServerProcess(t, addr, dir, "--tls-self-signed", "--tls-san", "capstan.test")
	bundle := filepath.Join(dir, "tls", "server.crt")
	fp := fileFingerprint(t, bundle)
	out := p.log.String()
	if !strings.Contains(out, "SHA-256 fingerprint "+fp) || !strings.Contains(out, "CA bundle for clients and agents: "+bundle) {
		t.Fatalf("start-up output lacks the fingerprint %s or the bundle:\n%s", fp, out)
	}
	if st, err := os.Stat(filepath.Join(dir, "tls", "server.key")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key: %v %v", st, err)
	}

	// A signed CreateCluster in plain HTTP on the TLS port.
	body := `{"clusterName":"plaintext"}`
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	req.Header.Set("X-Amz-Target", "AmazonEC2ContainerServiceV20141113.CreateCluster")
	sum := sha256.Sum256([]byte(body))
	if err := v4.NewSigner().SignHTTP(ctx, aws.Credentials{AccessKeyID: testKey, SecretAccessKey: testSecret}, req,
		hex.EncodeToString(sum[:]), "ecs", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	req.Write(conn)
	// The server answers Go's 400 and closes; a close with request bytes
	// unread may reach the client as a reset before the answer does.
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	switch {
	case err != nil && !strings.Contains(err.Error(), "connection reset by peer"):
		t.Fatal(err)
	case err == nil:
		answer, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 400 || !strings.Contains(string(answer), "Client sent an HTTP request to an HTTPS server") {
			t.Fatalf("plain HTTP: %s %q", resp.Status, answer)
		}
	}
	conn.Close()
	if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Fatalf("plain /healthz: %s", resp.Status)
		}
	}
	c := ecs.New(ecs.Options{Region: "us-east-1", BaseEndpoint: aws.String(url), HTTPClient: tlsClient(t, bundle),
		Credentials: credentials.NewStaticCredentialsProvider(testKey, testSecret, ""), Retryer: testenv.Retryer()})
	d, err := c.DescribeClusters(ctx, &ecs.DescribeClustersInput{Clusters: []string{"plaintext"}})
	if err != nil || len(d.Clusters) != 0 {
		t.Fatalf("the plain HTTP request reached the API: %+v %v", d, err)
	}

	// The capstan CLI.
	capstan := func(env []string, args ...string) (string, error) {
		cmd := exec.Command(capstanBinary(t), args...)
		cmd.Env = append(withoutBundles(), append([]string{"AWS_ACCESS_KEY_ID=" + testKey, "AWS_SECRET_ACCESS_KEY=" + testSecret,
			"HOME=" + t.TempDir()}, env...)...)
		b, err := cmd.CombinedOutput()
		return string(b), err
	}
	if out, err := capstan(nil, "cluster", "create", "secure", "--endpoint", url, "--ca-bundle", bundle); err != nil {
		t.Fatalf("capstan --ca-bundle: %v\n%s", err, out)
	}
	if out, err := capstan([]string{"AWS_CA_BUNDLE=" + bundle, "CAPSTAN_ENDPOINT=" + url}, "whoami"); err != nil || !strings.Contains(out, ":root") {
		t.Fatalf("capstan whoami with AWS_CA_BUNDLE: %v\n%s", err, out)
	}
	out, err = capstan(nil, "cluster", "list", "--endpoint", url)
	if err == nil || !strings.Contains(out, "cannot reach "+url+": its certificate is not trusted: x509: certificate signed by unknown authority") {
		t.Fatalf("capstan without a bundle: %v\n%s", err, out)
	}

	// The AWS CLI.
	env := append(withoutBundles(), "AWS_ACCESS_KEY_ID="+testKey, "AWS_SECRET_ACCESS_KEY="+testSecret, "AWS_DEFAULT_REGION=us-east-1",
		"AWS_PAGER=", "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null")
	stdout, stderr, err := runAWS(t, env, "ecs", "list-clusters", "--endpoint-url", url, "--ca-bundle", bundle)
	if err != nil || !strings.Contains(stdout, "cluster/secure") {
		t.Fatalf("aws --ca-bundle: %v\n%s%s", err, stdout, stderr)
	}
	stdout, stderr, err = runAWS(t, append(env, "AWS_CA_BUNDLE="+bundle), "ecs", "describe-clusters", "--clusters", "secure", "--endpoint-url", url)
	if err != nil || !strings.Contains(stdout, `"ACTIVE"`) {
		t.Fatalf("aws with AWS_CA_BUNDLE: %v\n%s%s", err, stdout, stderr)
	}
	_, stderr, err = runAWS(t, env, "ecs", "list-clusters", "--endpoint-url", url, "--cli-read-timeout", "5", "--cli-connect-timeout", "5")
	if err == nil || !strings.Contains(stderr, "CERTIFICATE_VERIFY_FAILED") {
		t.Fatalf("aws without a bundle: %v\n%s", err, stderr)
	}

	// A restart serves the same certificate and says so.
	p.stop(t)
	p = startTLSServerProcess(t, addr, dir, "--tls-self-signed", "--tls-san", "capstan.test")
	if fileFingerprint(t, bundle) != fp || !strings.Contains(p.log.String(), "SHA-256 fingerprint "+fp) ||
		!strings.Contains(p.log.String(), `"generated":false`) {
		t.Fatalf("restart changed the certificate:\n%s", p.log)
	}
	if out, err := capstan(nil, "cluster", "list", "--endpoint", url, "--ca-bundle", bundle); err != nil || !strings.Contains(out, "secure") {
		t.Fatalf("after restart: %v\n%s", err, out)
	}
}

// TestTLSServerFlags: wrong TLS flags stop `capstan server` at once with
// the flag named.
func TestTLSServerFlags(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert", filepath.Join(dir, "c.pem")}, "--tls-cert and --tls-key must be given together"},
		{[]string{"--tls-cert", filepath.Join(dir, "c.pem"), "--tls-key", filepath.Join(dir, "k.pem")}, "--tls-cert: open " + filepath.Join(dir, "c.pem")},
		{[]string{"--tls-self-signed", "--tls-cert", "c", "--tls-key", "k"}, "not both"},
		{[]string{"--tls-san", "x.example"}, "it needs --tls-self-signed"},
	} {
		cmd := exec.Command(capstanBinary(t), append([]string{"server", "--listen", freeAddr(t), "--data-dir", dir, "--provisioner", "none"}, tc.args...)...)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("%v: %v\n%s\nwant %q", tc.args, err, out, tc.want)
		}
	}
}

// TestAgentOverTLS: an agent given the server's CA bundle registers and
// runs a task over TLS, API calls and session alike.
func TestAgentOverTLS(t *testing.T) {
	rt := testenv.RequireDocker(t)
	srv := testenv.StartServerWith(t, func(c *server.Config) { c.TLSSelfSigned = true })
	if !strings.HasPrefix(srv.URL, "https://") {
		t.Fatalf("server URL %s", srv.URL)
	}
	f := &fleet{t: t, srv: srv, c: srv.ECS(), rt: rt, image: testenv.BusyboxImage(t), cluster: "tls"}
	if _, err := f.c.CreateCluster(context.Background(), &ecs.CreateClusterInput{ClusterName: aws.String(f.cluster)}); err != nil {
		t.Fatal(err)
	}
	env := agents.Env(t, srv, f.cluster, t.TempDir())
	if env["CAPSTAN_ENDPOINT"] != srv.URL || env["CAPSTAN_CA_BUNDLE"] != srv.TLS.CABundle {
		t.Fatalf("agent env: %v", env)
	}
	poll, err := srv.ECSWith(env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]).DiscoverPollEndpoint(context.Background(),
		&ecs.DiscoverPollEndpointInput{Cluster: aws.String(f.cluster)})
	if err != nil || aws.ToString(poll.Endpoint) != srv.URL {
		t.Fatalf("DiscoverPollEndpoint: %+v %v, want %s", poll, err, srv.URL)
	}
	agents.StartEnv(t, env, rt)
	td := f.register("secure", f.container("main", "sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"))
	f.waitStatus(f.run(td), "RUNNING", 60*time.Second)
}

// TestAgentRefusesUntrustedServer: an agent whose bundle did not sign the
// server's certificate, or with no bundle, never registers; it logs the
// endpoint and the certificate problem and retries instead of exiting.
func TestAgentRefusesUntrustedServer(t *testing.T) {
	srv := testenv.StartServerWith(t, func(c *server.Config) { c.TLSSelfSigned = true })
	other := testenv.StartServerWith(t, func(c *server.Config) { c.TLSSelfSigned = true })
	if _, err := srv.ECS().CreateCluster(context.Background(), &ecs.CreateClusterInput{ClusterName: aws.String("default")}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, bundle, trust string
	}{
		{"another CA", other.TLS.CABundle, "the CA bundle " + other.TLS.CABundle},
		{"system roots", "", "the system's roots (set CAPSTAN_CA_BUNDLE to the server's CA bundle)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := agents.Env(t, srv, "default", t.TempDir())
			env["CAPSTAN_RUNTIME"] = "sim" // it must not get as far as containers
			env["CAPSTAN_CA_BUNDLE"] = tc.bundle
			cfg, err := config.Load(nil, func(k string) string { return env[k] }, "")
			if err != nil {
				t.Fatal(err)
			}
			var logs syncBuffer
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- agent.Run(ctx, cfg, agent.Options{Log: slog.New(slog.NewTextHandler(&logs, nil))})
			}()
			want := "server " + srv.URL + ": its certificate is not trusted: x509: certificate signed by unknown authority; checked against " + tc.trust
			deadline := time.Now().Add(30 * time.Second)
			for strings.Count(logs.String(), "registration failed; retrying") < 2 {
				select {
				case err := <-done:
					cancel()
					t.Fatalf("agent exited: %v\n%s", err, logs.String())
				case <-time.After(100 * time.Millisecond):
				}
				if time.Now().After(deadline) {
					cancel()
					t.Fatalf("no retries after 30s:\n%s", logs.String())
				}
			}
			if !strings.Contains(logs.String(), want) {
				t.Errorf("log lacks %q:\n%s", want, logs.String())
			}
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("agent ended with %v", err)
			}
			out, err := srv.ECS().ListContainerInstances(context.Background(), &ecs.ListContainerInstancesInput{Cluster: aws.String("default")})
			if err == nil && len(out.ContainerInstanceArns) != 0 {
				t.Fatalf("an untrusting agent registered: %v", out.ContainerInstanceArns)
			}
		})
	}
}

// TestManagedInstanceOverTLS: the local provisioner's agents are given the
// server's https:// URL and CA bundle, and run a task on a managed instance.
func TestManagedInstanceOverTLS(t *testing.T) {
	f := newManagedFleetWith(t, func(c *server.Config) { c.TLSSelfSigned = true })
	f.managedCapacityProvider("secure", 60)
	td := f.register("job", f.container("job", "sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"))
	out, err := f.c.RunTask(context.Background(), &ecs.RunTaskInput{Cluster: aws.String(f.cluster), TaskDefinition: aws.String(td),
		CapacityProviderStrategy: []types.CapacityProviderStrategyItem{{CapacityProvider: aws.String("secure")}}})
	if err != nil || len(out.Tasks) != 1 {
		t.Fatalf("run: %+v %v", out, err)
	}
	// Only the generated bundle lets an agent trust the server.
	f.waitStatus(aws.ToString(out.Tasks[0].TaskArn), "RUNNING", 120*time.Second)
}
