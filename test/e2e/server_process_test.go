package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/capstanhq/capstan/internal/testenv"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// capstanBinary builds cmd/capstan once per test process.
func capstanBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "capstan-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "capstan")
		out, err := exec.Command("go", "build", "-o", binPath, "../../cmd/capstan").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// syncBuffer collects a process's output while tests read it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// runProcess starts cmd with its output kept; done gets its exit once, and
// the test's cleanup kills it (a test that takes the exit puts it back).
func runProcess(t *testing.T, cmd *exec.Cmd) (*syncBuffer, chan error) {
	t.Helper()
	log, done := &syncBuffer{}, make(chan error, 1)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	return log, done
}

// serverProcess is `capstan server` started the way users start it.
type serverProcess struct {
	cmd  *exec.Cmd
	addr string
	log  *syncBuffer
	done chan error
}

const (
	testKey    = "AKIDPROCESSTEST"
	testSecret = "process-test-secret"
)

func startServerProcess(t *testing.T, addr string, args ...string) *serverProcess {
	t.Helper()
	cmd := exec.Command(capstanBinary(t), append([]string{"server", "--listen", addr, "--account-id", "123456789012"}, args...)...)
	cmd.Env = append(os.Environ(), "CAPSTAN_ACCESS_KEY_ID="+testKey, "CAPSTAN_SECRET_ACCESS_KEY="+testSecret)
	p := &serverProcess{cmd: cmd, addr: addr}
	p.log, p.done = runProcess(t, cmd)
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			// It serves before it logs the rest of its start.
			if resp.StatusCode == 200 && strings.Contains(p.log.String(), "capstan server ready") {
				return p
			}
		}
		select {
		case err := <-p.done:
			p.done <- err // for the cleanup
			t.Fatalf("server exited during start: %v\n%s", err, p.log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("server not healthy after 60s\n%s", p.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (p *serverProcess) client() *ecs.Client {
	return ecs.New(ecs.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://" + p.addr),
		Credentials: credentials.NewStaticCredentialsProvider(testKey, testSecret, ""), Retryer: testenv.Retryer()})
}

func (p *serverProcess) kill9(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	p.done <- nil // for the cleanup
}

func TestServerSurvivesKill9AndStopsOnSIGTERM(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	addr := freeAddr(t)
	p := startServerProcess(t, addr, "--data-dir", dir)
	// By default the server chooses its memory limit, and says so.
	if !strings.Contains(p.log.String(), "memory limit follows the fleet") {
		t.Fatalf("no word of the memory limit:\n%s", p.log)
	}
	c := p.client()
	if _, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("durable")}); err != nil {
		t.Fatal(err)
	}
	td, err := c.RegisterDaemonTaskDefinition(ctx, &ecs.RegisterDaemonTaskDefinitionInput{Family: aws.String("agent"),
		ContainerDefinitions: []types.DaemonContainerDefinition{{Name: aws.String("a"), Image: aws.String("x"), Memory: aws.Int32(64)}}})
	if err != nil {
		t.Fatal(err)
	}
	p.kill9(t)

	p = startServerProcess(t, addr, "--data-dir", dir)
	c = p.client()
	cl, err := c.DescribeClusters(ctx, &ecs.DescribeClustersInput{Clusters: []string{"durable"}})
	if err != nil || len(cl.Clusters) != 1 || aws.ToString(cl.Clusters[0].Status) != "ACTIVE" {
		t.Fatalf("cluster after kill -9: %+v %v", cl, err)
	}
	d, err := c.DescribeDaemonTaskDefinition(ctx, &ecs.DescribeDaemonTaskDefinitionInput{DaemonTaskDefinition: td.DaemonTaskDefinitionArn})
	if err != nil || d.DaemonTaskDefinition.Revision != 1 {
		t.Fatalf("daemon task definition after kill -9: %+v %v", d, err)
	}

	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("SIGTERM: exit %v\n%s", err, p.log)
		}
		p.done <- nil
	case <-time.After(30 * time.Second):
		t.Fatalf("server did not stop within 30s of SIGTERM\n%s", p.log)
	}
}

func TestServerGeneratesCredentialOnFirstStart(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	cmd := exec.Command(capstanBinary(t), "server", "--listen", addr, "--data-dir", dir)
	cmd.Env = os.Environ()
	var log syncBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(log.String(), "AWS_SECRET_ACCESS_KEY=") {
		if time.Now().After(deadline) {
			t.Fatalf("no credential printed:\n%s", log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(dir, "admin-credentials.json")); err != nil {
		t.Fatalf("credential file: %v", err)
	}
	bad := exec.Command(capstanBinary(t), "server", "--listen", freeAddr(t), "--data-dir", t.TempDir(), "--account-id", "12")
	out, err := bad.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--account-id") {
		t.Fatalf("bad account id: %v\n%s", err, out)
	}
}

// startEtcd runs a real etcd member (the embed package is etcd itself) for
// servers to share through --etcd-endpoints.
func startEtcd(t *testing.T) string {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Dir = t.TempDir()
	cu, _ := url.Parse("http://" + freeAddr(t))
	pu, _ := url.Parse("http://" + freeAddr(t))
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		t.Fatal("etcd not ready")
	}
	return cu.String()
}

func TestTwoServersShareExternalEtcd(t *testing.T) {
	ctx := context.Background()
	endpoint := startEtcd(t)
	// Servers sharing an etcd share the key its secrets are sealed with.
	key := filepath.Join(t.TempDir(), "secrets.key")
	a := startServerProcess(t, freeAddr(t), "--data-dir", t.TempDir(), "--etcd-endpoints", endpoint, "--secrets-key-file", key)
	b := startServerProcess(t, freeAddr(t), "--data-dir", t.TempDir(), "--etcd-endpoints", endpoint, "--secrets-key-file", key)
	// One with a key of its own says so and exits.
	octx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := exec.CommandContext(octx, capstanBinary(t), "server", "--listen", freeAddr(t), "--data-dir", t.TempDir(),
		"--etcd-endpoints", endpoint).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--secrets-key-file") || !strings.Contains(string(out), "sealed with key") {
		t.Fatalf("a server with another secrets key: %v\n%s", err, out)
	}
	ca, cb := a.client(), b.client()
	if _, err := ca.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("shared")}); err != nil {
		t.Fatal(err)
	}
	// A write through one server is visible through the other.
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := cb.DescribeClusters(ctx, &ecs.DescribeClustersInput{Clusters: []string{"shared"}})
		if err == nil && len(out.Clusters) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster not visible through the second server: %+v %v", out, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Deployments complete whichever server leads; kill the first and the
	// second takes over the controllers.
	a.kill9(t)
	if _, err := cb.CreateCapacityProvider(ctx, &ecs.CreateCapacityProviderInput{Name: aws.String("shared-mi"), Cluster: aws.String("shared"),
		ManagedInstancesProvider: &types.CreateManagedInstancesProviderConfiguration{
			InfrastructureRoleArn: aws.String("arn:aws:iam::123456789012:role/r"),
			InstanceLaunchTemplate: &types.InstanceLaunchTemplate{Ec2InstanceProfileArn: aws.String("arn:aws:iam::123456789012:instance-profile/p"),
				NetworkConfiguration: &types.ManagedInstancesNetworkConfiguration{Subnets: []string{"s"}}}}}); err != nil {
		t.Fatal(err)
	}
	td, err := cb.RegisterDaemonTaskDefinition(ctx, &ecs.RegisterDaemonTaskDefinitionInput{Family: aws.String("agent"),
		ContainerDefinitions: []types.DaemonContainerDefinition{{Name: aws.String("a"), Image: aws.String("x"), Memory: aws.Int32(64)}}})
	if err != nil {
		t.Fatal(err)
	}
	d, err := cb.CreateDaemon(ctx, &ecs.CreateDaemonInput{DaemonName: aws.String("d"), ClusterArn: aws.String("shared"),
		DaemonTaskDefinitionArn: td.DaemonTaskDefinitionArn, CapacityProviderArns: []string{"shared-mi"}})
	if err != nil {
		t.Fatal(err)
	}
	w := ecs.NewDaemonDeploymentSuccessfulWaiter(cb, func(o *ecs.DaemonDeploymentSuccessfulWaiterOptions) {
		o.MinDelay, o.MaxDelay = 200*time.Millisecond, time.Second
	})
	// The dead server's leadership lapses with its etcd session (10s TTL).
	if err := w.Wait(ctx, &ecs.DescribeDaemonDeploymentsInput{DaemonDeploymentArns: []string{aws.ToString(d.DeploymentArn)}}, 60*time.Second); err != nil {
		t.Fatalf("deployment after failover: %v", err)
	}
}
