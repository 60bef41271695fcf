package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"

	"github.com/capstanhq/capstan/internal/store"
)

// earlierCommit is a version of Capstan from before the schema version
// was recorded (schema 0).
const earlierCommit = "c0f5eac"

// earlierBinary builds capstan at commit in a git worktree of its own,
// cached under the user's cache dir by commit: a clean machine builds it
// once.
func earlierBinary(t *testing.T, commit string) string {
	t.Helper()
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("the upgrade test needs the git repository: %v", err)
	}
	full, err := exec.Command("git", "rev-parse", "--verify", commit+"^{commit}").Output()
	if err != nil {
		t.Fatalf("commit %s is not in this repository (a shallow clone?): %v", commit, err)
	}
	sha := strings.TrimSpace(string(full))
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	bin := filepath.Join(cache, "capstan-test", "capstan-"+sha)
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	wt := filepath.Join(t.TempDir(), "worktree")
	if out, err := exec.Command("git", "-C", strings.TrimSpace(string(root)), "worktree", "add", "--detach", wt, sha).CombinedOutput(); err != nil {
		t.Fatalf("git worktree add: %v\n%s", err, out)
	}
	defer exec.Command("git", "-C", strings.TrimSpace(string(root)), "worktree", "remove", "--force", wt).Run()
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := fmt.Sprintf("%s.%d", bin, os.Getpid())
	build := exec.Command("go", "build", "-o", tmp, "./cmd/capstan")
	build.Dir = wt
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build capstan at %s: %v\n%s", commit, err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// startServerBinary starts bin as a server on dataDir and waits for it
// to serve.
func startServerBinary(t *testing.T, bin, dataDir string) *serverProcess {
	t.Helper()
	addr := freeAddr(t)
	cmd := exec.Command(bin, "server", "--listen", addr, "--account-id", "123456789012", "--data-dir", dataDir, "--provisioner", "none")
	cmd.Env = append(os.Environ(), "CAPSTAN_ACCESS_KEY_ID="+testKey, "CAPSTAN_SECRET_ACCESS_KEY="+testSecret)
	p := &serverProcess{cmd: cmd, addr: addr}
	p.log, p.done = runProcess(t, cmd)
	c := p.client()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := c.ListClusters(ctx, &ecs.ListClustersInput{})
		cancel()
		if err == nil {
			return p
		}
		select {
		case err := <-p.done:
			p.done <- err
			t.Fatalf("%s server exited during start: %v\n%s", bin, err, p.log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s server not serving after 60s: %v\n%s", bin, err, p.log)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (p *serverProcess) stopTERM(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err
	case <-time.After(30 * time.Second):
		t.Fatalf("server did not stop 30s after SIGTERM\n%s", p.log)
	}
}

// A data dir written by an earlier Capstan (no schema version recorded)
// opens with this build: its cluster, daemon and service are there, and
// the schema version is recorded. The earlier build still runs on the
// migrated dir (adjacent versions side by side). Data of a newer schema
// that does not admit this build is refused, naming both versions.
func TestUpgradeFromEarlierCommit(t *testing.T) {
	ctx := context.Background()
	old := earlierBinary(t, earlierCommit)
	dir := t.TempDir()

	s := startServerBinary(t, old, dir)
	c := s.client()
	b := writeDefinitions(t, c, "up")
	s.stopTERM(t)

	// What the earlier build wrote, as this build sees it.
	present := func(c *ecs.Client, who string) {
		t.Helper()
		cl, err := c.DescribeClusters(ctx, &ecs.DescribeClustersInput{Clusters: []string{"up"}})
		if err != nil || len(cl.Clusters) != 1 {
			t.Fatalf("%s: cluster: %+v %v", who, cl, err)
		}
		dd, err := c.DescribeDaemon(ctx, &ecs.DescribeDaemonInput{DaemonArn: aws.String(b.daemon)})
		if err != nil || dd.Daemon == nil || aws.ToString(dd.Daemon.DaemonArn) != b.daemon {
			t.Fatalf("%s: daemon: %+v %v", who, dd, err)
		}
		sv, err := c.DescribeServices(ctx, &ecs.DescribeServicesInput{Cluster: aws.String("up"), Services: []string{"web"}})
		if err != nil || len(sv.Services) != 1 || aws.ToString(sv.Services[0].TaskDefinition) != b.taskDef {
			t.Fatalf("%s: service: %+v %v", who, sv, err)
		}
	}
	s = startServerProcess(t, freeAddr(t), "--data-dir", dir, "--provisioner", "none")
	present(s.client(), "this build")
	if !strings.Contains(s.log.String(), `"stored data migrated","from_schema":0,"to_schema":1`) {
		t.Fatalf("the server did not say it migrated the data:\n%s", s.log)
	}
	s.stopTERM(t)

	// The earlier build runs on the migrated dir, as it would beside a
	// newer server during a rolling upgrade.
	s = startServerBinary(t, old, dir)
	present(s.client(), "earlier build after the migration")
	if _, err := s.client().CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("by-old")}); err != nil {
		t.Fatal(err)
	}
	s.stopTERM(t)

	st, err := store.Open(ctx, store.Config{DataDir: filepath.Join(dir, "etcd")})
	if err != nil {
		t.Fatal(err)
	}
	v, _, err := st.Schema(ctx)
	if err != nil || v != store.SchemaVersion {
		t.Fatalf("recorded schema %d, %v; want %d", v, err, store.SchemaVersion)
	}
	// A newer version that no longer admits this one.
	newer := store.SchemaVersion + 1
	if _, err := st.Txn().Put("schema", map[string]int{"version": newer, "minVersion": newer}).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	st.Close()
	octx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(octx, capstanBinary(t), "server", "--listen", freeAddr(t), "--account-id", "123456789012", "--data-dir", dir, "--provisioner", "none")
	cmd.Env = append(os.Environ(), "CAPSTAN_ACCESS_KEY_ID="+testKey, "CAPSTAN_SECRET_ACCESS_KEY="+testSecret)
	out, err := cmd.CombinedOutput()
	want := fmt.Sprintf("written by schema version %d, which needs Capstan of schema version %d or later, and this build has schema version %d", newer, newer, store.SchemaVersion)
	if err == nil || !strings.Contains(string(out), want) {
		t.Fatalf("a server on data of a newer schema: %v, want it to say %q:\n%s", err, want, out)
	}
}
