package install

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/agent/daemonnet"
	"github.com/capstanhq/capstan/internal/cli"
	"github.com/capstanhq/capstan/internal/testenv"
	"github.com/capstanhq/capstan/internal/testenv/agents"
)

// agentImage builds packaging/Dockerfile with `docker build` from a context
// holding the static agent and the host's CA roots, as docs/install.md says.
func agentImage(t *testing.T, version string) string {
	t.Helper()
	bin := agentBinary(t, version)
	ctxDir := t.TempDir()
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ctxDir, "capstan-agent"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	roots, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if err != nil {
		t.Fatalf("CA roots for the image: %v", err)
	}
	if err := os.WriteFile(filepath.Join(ctxDir, "ca-certificates.crt"), roots, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	ref := "capstan-test/agent:" + hex.EncodeToString(sum[:8])
	docker(t, "build", "-q", "-f", filepath.Join(repoRoot(t), "packaging/Dockerfile"), "-t", ref, ctxDir)
	t.Cleanup(func() { run(t, "", nil, "docker", "rmi", ref) }) // after the containers: cleanups run last-in first-out
	return ref
}

// TestAgentImage runs the agent image against this machine's Docker the way
// the docs say (host network, the Docker socket, the state dir and the env
// file mounted), runs a task through it with the AWS SDK, then upgrades the
// agent as docs/install.md says (the container replaced by one of a newer
// image): the task's container keeps running, the new agent adopts it, and
// `capstan instance list` shows the new version.
func TestAgentImage(t *testing.T) {
	needDockerCLI(t)
	rt := testenv.RequireDocker(t)
	image := agentImage(t, testVersion)
	newImage := agentImage(t, upgradeVersion)
	busybox := testenv.BusyboxImage(t)
	srv := testenv.StartServer(t, "")
	c := srv.ECS()
	ctx := context.Background()
	const cluster = "install"
	if _, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String(cluster)}); err != nil {
		t.Fatal(err)
	}

	// The env file, as an operator writes /etc/capstan/agent.env.
	dataDir := t.TempDir()
	env := agents.Env(t, srv, cluster, dataDir)
	var lines []string
	for k, v := range env {
		lines = append(lines, k+"="+v)
	}
	slices.Sort(lines)
	envFile := filepath.Join(t.TempDir(), "agent.env")
	if err := os.WriteFile(envFile, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	start := func(image string) string {
		return docker(t, "run", "-d", "--label", testenv.TestLabel+"="+t.Name(), "--net", "host",
			"-v", "/var/run/docker.sock:/var/run/docker.sock",
			"-v", dataDir+":"+dataDir, "-v", envFile+":/etc/capstan/agent.env:ro", image)
	}
	id := start(image)
	var instance string
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := run(t, "", nil, "docker", "logs", "--tail", "40", id)
			t.Logf("agent container logs:\n%s", out)
		}
		run(t, "", nil, "docker", "rm", "-f", id)
		if instance == "" {
			return
		}
		// The agent leaves its tasks' containers, network and namespace
		// holder behind by design; a test must not.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if cs, err := rt.List(ctx, map[string]string{"com.capstan.instance": instance}); err == nil {
			for _, c := range cs {
				rt.Remove(ctx, c.ID)
			}
		}
		if err := daemonnet.Remove(ctx, rt, instance); err != nil {
			t.Logf("cleanup: daemon networking of %s: %v", instance, err)
		}
	})

	// Registered, connected, and reporting the version stamped at build.
	describe := func() types.ContainerInstance {
		t.Helper()
		out, err := c.DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{Cluster: aws.String(cluster), ContainerInstances: []string{instance}})
		if err != nil || len(out.ContainerInstances) != 1 {
			t.Fatalf("describe instance %s: %v %+v", instance, err, out)
		}
		return out.ContainerInstances[0]
	}
	waitFor(t, 90*time.Second, "the agent in the container to register and connect", func() bool {
		if instance == "" {
			out, err := c.ListContainerInstances(ctx, &ecs.ListContainerInstancesInput{Cluster: aws.String(cluster)})
			if err != nil || len(out.ContainerInstanceArns) == 0 {
				return false
			}
			instance = out.ContainerInstanceArns[0]
		}
		return describe().AgentConnected
	})
	if ci := describe(); ci.VersionInfo == nil || aws.ToString(ci.VersionInfo.AgentVersion) != testVersion {
		t.Errorf("instance reports version info %+v, want agent version %s", ci.VersionInfo, testVersion)
	}

	td, err := c.RegisterTaskDefinition(ctx, &ecs.RegisterTaskDefinitionInput{Family: aws.String("install-sleeper"),
		ContainerDefinitions: []types.ContainerDefinition{{Name: aws.String("main"), Image: aws.String(busybox), Memory: aws.Int32(32), Command: []string{"sleep", "3600"}}}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String(cluster), TaskDefinition: td.TaskDefinition.TaskDefinitionArn})
	if err != nil || len(out.Tasks) != 1 {
		t.Fatalf("RunTask: %v %+v", err, out)
	}
	task := aws.ToString(out.Tasks[0].TaskArn)
	status := func() string {
		out, err := c.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: aws.String(cluster), Tasks: []string{task}})
		if err != nil || len(out.Tasks) != 1 {
			t.Fatalf("DescribeTasks: %v", err)
		}
		return aws.ToString(out.Tasks[0].LastStatus)
	}
	waitFor(t, 90*time.Second, "the task to be RUNNING", func() bool { return status() == "RUNNING" })
	taskContainer := func() string {
		t.Helper()
		cs, err := rt.List(ctx, map[string]string{"com.capstan.task-arn": task})
		if err != nil || len(cs) != 1 {
			t.Fatalf("containers of %s: %v %+v", task, err, cs)
		}
		return cs[0].ID
	}
	before := taskContainer()
	startedBefore := docker(t, "inspect", "-f", "{{.State.StartedAt}}", before)

	// The upgrade: the agent container replaced by one of the new image.
	docker(t, "rm", "-f", id)
	id = start(newImage)
	waitFor(t, 60*time.Second, "the upgraded agent to report its version and connect", func() bool {
		ci := describe()
		return ci.AgentConnected && ci.VersionInfo != nil && aws.ToString(ci.VersionInfo.AgentVersion) == upgradeVersion
	})
	if after := taskContainer(); after != before {
		t.Errorf("task container replaced across the agent upgrade: %s -> %s", before, after)
	}
	if got := docker(t, "inspect", "-f", "{{.State.Running}} {{.State.StartedAt}}", before); got != "true "+startedBefore {
		t.Errorf("task container after the agent upgrade: %q, want running since %s", got, startedBefore)
	}
	if s := status(); s != "RUNNING" {
		t.Errorf("task %s after the agent upgrade, want RUNNING", s)
	}
	list := instanceList(t, srv, cluster)
	if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(path.Base(instance)) + `\s.*\bconnected\b.*\s` + regexp.QuoteMeta(upgradeVersion) + `\s*$`).MatchString(list) {
		t.Errorf("capstan instance list does not show the instance connected at %s:\n%s", upgradeVersion, list)
	}

	// The upgraded agent still acts on the task.
	if _, err := c.StopTask(ctx, &ecs.StopTaskInput{Cluster: aws.String(cluster), Task: aws.String(task)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the task to stop", func() bool { return status() == "STOPPED" })
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(fmt.Sprintf("timed out after %s waiting for %s", d, what))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// instanceList runs `capstan instance list` in-process as an administrator.
func instanceList(t *testing.T, srv *testenv.Server, cluster string) string {
	t.Helper()
	conf := filepath.Join(t.TempDir(), "config.json") // none of the user's settings
	if err := os.WriteFile(conf, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CAPSTAN_CONFIG", conf)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.Config.AdminKeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.Config.AdminSecret)
	var out, errb bytes.Buffer
	if code := cli.Main(context.Background(), []string{"--endpoint", srv.URL, "instance", "list", "--cluster", cluster}, &out, &errb); code != 0 {
		t.Fatalf("capstan instance list: exit %d: %s", code, errb.String())
	}
	return out.String()
}
