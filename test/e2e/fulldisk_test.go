package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/aws/smithy-go"
)

// mountTmpfs mounts a tmpfs of size (as mount's size= takes it) for the
// test and unmounts it at its end. It needs root: under CI a test that
// cannot mount fails, elsewhere it skips.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		msg := fmt.Sprintf("mount a tmpfs (needs root): %v %s", err, out)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", dir, err, out)
		}
	})
	return dir
}

// bulkyDefinition is a task definition of about 40 KiB that compresses
// poorly: the kind of write that fills a disk.
func bulkyDefinition(family string) *ecs.RegisterTaskDefinitionInput {
	var env []types.KeyValuePair
	for i := range 40 {
		b := make([]byte, 750)
		rand.Read(b)
		env = append(env, types.KeyValuePair{Name: aws.String(fmt.Sprintf("V%d", i)), Value: aws.String(base64.StdEncoding.EncodeToString(b))})
	}
	return &ecs.RegisterTaskDefinitionInput{Family: aws.String(family), ContainerDefinitions: []types.ContainerDefinition{{
		Name: aws.String("app"), Image: aws.String("busybox"), Memory: aws.Int32(64), Environment: env}}}
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Issue 46, point 6: a full disk under the embedded etcd ended the server
// silently and reset its clients. Now writes fail with a ServerException
// naming the cause, reads and the server stay up, /healthz, /metrics and
// the log say why, and once the disk has room again writes succeed
// without a restart, every acknowledged one still there.
func TestFullDiskRefusesWritesAndRecovers(t *testing.T) {
	fs := mountTmpfs(t, "64m")
	p := startServerProcess(t, freeAddr(t), "--data-dir", filepath.Join(fs, "data"), "--provisioner", "none")
	// No retries: a reset must fail the test, not be tried again.
	c := ecs.New(ecs.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://" + p.addr),
		Credentials: credentials.NewStaticCredentialsProvider(testKey, testSecret, ""), Retryer: aws.NopRetryer{}})
	// Reads and setup retry what the SDK's transport loses (see below).
	rc := p.client()
	ctx := context.Background()
	if _, err := rc.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("before")}); err != nil {
		t.Fatal(err)
	}
	// A service that cannot place its task (no instances): its controller
	// keeps writing events, which the full disk refuses.
	if _, err := rc.RegisterTaskDefinition(ctx, &ecs.RegisterTaskDefinitionInput{Family: aws.String("web"), ContainerDefinitions: []types.ContainerDefinition{{
		Name: aws.String("web"), Image: aws.String("busybox"), Memory: aws.Int32(16)}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := rc.CreateService(ctx, &ecs.CreateServiceInput{Cluster: aws.String("before"), ServiceName: aws.String("web"),
		TaskDefinition: aws.String("web"), DesiredCount: aws.Int32(1)}); err != nil {
		t.Fatal(err)
	}

	var acked []string
	var refused int
	for i := 0; refused < 3; i++ {
		if i == 2000 {
			t.Fatalf("2000 writes of 40 KiB on a 64 MiB tmpfs and none refused")
		}
		out, err := c.RegisterTaskDefinition(ctx, bulkyDefinition(fmt.Sprintf("fill-%d", i)))
		if err == nil {
			acked = append(acked, *out.TaskDefinition.TaskDefinitionArn)
			continue
		}
		var re *awshttp.ResponseError
		if errors.As(err, &re) && re.HTTPStatusCode() == http.StatusOK {
			// Answered 200, the body then lost by the Go SDK's transport
			// ("use of closed network connection"): seen at this pace on
			// any fast disk, full or not. Neither acknowledged nor refused.
			continue
		}
		var ae smithy.APIError
		if !errors.As(err, &ae) || ae.ErrorCode() != "ServerException" || !strings.Contains(ae.ErrorMessage(), "the state store is out of space") ||
			!strings.Contains(ae.ErrorMessage(), "disk is full") {
			t.Fatalf("write %d failed other than with a ServerException naming the full disk: %v\n%s", i, err, p.log)
		}
		refused++
	}
	t.Logf("%d writes acknowledged before the disk was full", len(acked))
	if os.Getenv("H2DEBUG") != "" {
		defer func() { t.Log(p.log.String()) }()
	}
	if len(acked) < 10 {
		t.Fatalf("only %d writes before refusing: the reserve took the disk", len(acked))
	}
	// Other writes are refused the same way.
	_, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("during")})
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != "ServerException" || !strings.Contains(ae.ErrorMessage(), "out of space") {
		t.Fatalf("CreateCluster on a full disk: %v", err)
	}

	// Reads answer.
	lc, err := rc.ListClusters(ctx, &ecs.ListClustersInput{})
	if err != nil || len(lc.ClusterArns) != 1 || !strings.HasSuffix(lc.ClusterArns[0], "/before") {
		t.Fatalf("ListClusters on a full disk: %v %v", lc, err)
	}
	if _, err := rc.DescribeTaskDefinition(ctx, &ecs.DescribeTaskDefinitionInput{TaskDefinition: aws.String(acked[0])}); err != nil {
		t.Fatalf("DescribeTaskDefinition on a full disk: %v", err)
	}
	code, body := httpGet(t, "http://"+p.addr+"/healthz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "out of space") || !strings.Contains(body, "disk is full") {
		t.Fatalf("/healthz on a full disk: %d %q", code, body)
	}
	if _, m := httpGet(t, "http://"+p.addr+"/metrics"); !strings.Contains(m, "\ncapstan_store_out_of_space 1\n") {
		t.Fatalf("/metrics does not say the store is out of space")
	}
	if !strings.Contains(p.log.String(), "the state store is out of space") {
		t.Fatalf("no log line names the full disk:\n%s", p.log)
	}
	// Nothing retries in a tight loop while writes are refused: not the
	// controllers, the audit trail or the leader's lease.
	lines := strings.Count(p.log.String(), "\n")
	time.Sleep(5 * time.Second)
	if n := strings.Count(p.log.String(), "\n") - lines; n > 40 {
		t.Fatalf("%d log lines in 5s of a full disk: something retries without pause:\n%s", n, p.log)
	}
	select {
	case err := <-p.done:
		p.done <- err
		t.Fatalf("server exited on a full disk: %v\n%s", err, p.log)
	default:
	}

	// Room again: writes resume without a restart.
	if out, err := exec.Command("mount", "-o", "remount,size=256m", fs).CombinedOutput(); err != nil {
		t.Fatalf("remount: %v %s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := rc.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("after")})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("writes still refused 30s after the disk had room: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if out, err := rc.RegisterTaskDefinition(ctx, bulkyDefinition("after")); err != nil || out.TaskDefinition.Revision != 1 {
		t.Fatalf("RegisterTaskDefinition after recovery: %v", err)
	}
	for _, arn := range acked {
		if _, err := rc.DescribeTaskDefinition(ctx, &ecs.DescribeTaskDefinitionInput{TaskDefinition: aws.String(arn)}); err != nil {
			t.Fatalf("acknowledged %s lost: %v", arn, err)
		}
	}
	ds, err := rc.DescribeServices(ctx, &ecs.DescribeServicesInput{Cluster: aws.String("before"), Services: []string{"web"}})
	if err != nil || len(ds.Services) != 1 {
		t.Fatalf("service written before the disk filled: %v %v", ds, err)
	}
	if code, body := httpGet(t, "http://"+p.addr+"/healthz"); code != 200 {
		t.Fatalf("/healthz after recovery: %d %q", code, body)
	}
	if _, m := httpGet(t, "http://"+p.addr+"/metrics"); !strings.Contains(m, "\ncapstan_store_out_of_space 0\n") {
		t.Fatalf("/metrics still says the store is out of space")
	}
	if !strings.Contains(p.log.String(), "writes resume") {
		t.Fatalf("no log line says writes resumed:\n%s", p.log)
	}
}

// A server started on a full disk said "capstan server ready" and then
// exited 1 without a word. It now refuses to start and says why.
func TestStartOnFullDiskFails(t *testing.T) {
	// Larger than 64 MiB: etcd fills the holes of its database file when
	// it opens it on a tmpfs (16 MiB here), and the last start below must
	// leave room to write.
	fs := mountTmpfs(t, "96m")
	data := filepath.Join(fs, "data")
	p := startServerProcess(t, freeAddr(t), "--data-dir", data, "--provisioner", "none")
	if _, err := p.client().CreateCluster(context.Background(), &ecs.CreateClusterInput{ClusterName: aws.String("kept")}); err != nil {
		t.Fatal(err)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	if err := <-p.done; err != nil {
		t.Fatalf("server stopped with %v\n%s", err, p.log)
	}
	p.done <- nil // for the cleanup

	// Fill the disk to the last byte.
	f, err := os.Create(filepath.Join(fs, "ballast"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for err == nil {
		_, err = f.Write(chunk)
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling the tmpfs: %v", err)
	}
	f.Close()

	cmd := exec.Command(capstanBinary(t), "server", "--listen", freeAddr(t), "--data-dir", data, "--provisioner", "none")
	cmd.Env = append(os.Environ(), "CAPSTAN_ACCESS_KEY_ID="+testKey, "CAPSTAN_SECRET_ACCESS_KEY="+testSecret)
	log, done := runProcess(t, cmd)
	select {
	case err = <-done:
		done <- err
	case <-time.After(60 * time.Second):
		t.Fatalf("server on a full disk still running after 60s:\n%s", log)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("server on a full disk exited with %v", err)
	}
	out := log.String()
	if !strings.Contains(out, "out of space") || !strings.Contains(out, "disk is full") || strings.Contains(out, "capstan server ready") {
		t.Fatalf("server on a full disk did not say so, or said it was ready:\n%s", out)
	}

	// With the ballast gone it starts, its state intact.
	if err := os.Remove(filepath.Join(fs, "ballast")); err != nil {
		t.Fatal(err)
	}
	p = startServerProcess(t, freeAddr(t), "--data-dir", data, "--provisioner", "none")
	dc, err := p.client().DescribeClusters(context.Background(), &ecs.DescribeClustersInput{Clusters: []string{"kept"}})
	if err != nil || len(dc.Clusters) != 1 {
		t.Fatalf("cluster written before the disk filled: %v %v", dc, err)
	}
}
