package main

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/ops"
	"github.com/capstanhq/capstan/internal/testenv"
)

// client runs the capstan binary as a user would, against endpoint.
func client(t *testing.T, env []string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(capstanBinary(t), args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
	return cmd
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// TestCLIRoughEdges drives the binary through what a new user runs into:
// a mistyped flag, an endpoint that is not Capstan, Ctrl-C while waiting
// on a deployment.
func TestCLIRoughEdges(t *testing.T) {
	srv := testenv.StartServer(t, "")
	env := []string{"CAPSTAN_ENDPOINT=" + srv.URL, "AWS_ACCESS_KEY_ID=" + srv.Config.AdminKeyID, "AWS_SECRET_ACCESS_KEY=" + srv.Config.AdminSecret}

	// A usage error: the message, the flag as typed, where the help is.
	out, err := client(t, env, "cluster", "list", "--bogus").CombinedOutput()
	if exitCode(err) != 2 || string(out) != "capstan: flag provided but not defined: --bogus\nRun 'capstan cluster list --help' for usage.\n" {
		t.Errorf("mistyped flag: exit %d\n%s", exitCode(err), out)
	}

	// Not a Capstan endpoint: said so, not a JSON decoder's complaint.
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
	}))
	defer web.Close()
	out, err = client(t, append(env, "CAPSTAN_ENDPOINT="+web.URL), "cluster", "list").CombinedOutput()
	if exitCode(err) != 1 || !strings.Contains(string(out), web.URL+" is not a Capstan/ECS API: it answered HTTP 405") || strings.Contains(string(out), "invalid character") {
		t.Errorf("non-Capstan endpoint: exit %d\n%s", exitCode(err), out)
	}

	// A deployment that cannot finish: an instance without an agent
	// never takes the daemon.
	ctx := context.Background()
	c := srv.ECS()
	if _, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("c")}); err != nil {
		t.Fatal(err)
	}
	if out, err := client(t, env, "capacity-provider", "create", "busy", "--cluster", "c", "--vcpu", "2", "--memory-mib", "4096").CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if out, err := client(t, env, "daemon-task-definition", "register", "-f", "../../internal/cli/testdata/cloudwatch-agent.json").CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	cred, err := srv.Service.CreateAgentCredential(ctx, &ops.CreateAgentCredentialRequest{Cluster: "c", CapacityProvider: "busy"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.ECSWith(cred.AccessKeyID, cred.SecretAccessKey).RegisterContainerInstance(ctx, &ecs.RegisterContainerInstanceInput{
		Cluster: aws.String("c"),
		TotalResources: []types.Resource{
			{Name: aws.String("CPU"), Type: aws.String("INTEGER"), IntegerValue: 1024},
			{Name: aws.String("MEMORY"), Type: aws.String("INTEGER"), IntegerValue: 2048},
		},
	}); err != nil {
		t.Fatal(err)
	}
	if out, err := client(t, env, "daemon", "create", "slow", "--cluster", "c", "--task-definition", "cloudwatch-agent:1", "--capacity-provider", "busy").CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	cmd := client(t, env, "daemon", "update", "slow", "--cluster", "c", "--keep-unspecified", "--wait")
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Interrupt once it follows the deployment.
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(stdout.String(), "busy 0/1") {
		if time.Now().After(deadline) {
			t.Fatalf("update --wait shows no progress:\n%s\n%s", stdout.String(), stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGINT)
	err = cmd.Wait()
	want := "capstan: stopped waiting; the deployment goes on in the server. Follow it again with: capstan daemon rollout status slow --cluster c\n"
	if exitCode(err) != 130 || stderr.String() != want {
		t.Fatalf("Ctrl-C during --wait: exit %d\nstdout:\n%s\nstderr:\n%s", exitCode(err), stdout.String(), stderr.String())
	}
	out, err = client(t, env, "daemon", "deployments", "slow", "--cluster", "c", "-o", "json").CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"IN_PROGRESS"`) {
		t.Fatalf("the deployment after Ctrl-C: %v\n%s", err, out)
	}
}

// TestRoleFlagMistakes: server, dev and etcd report a flag mistake as the
// client does, in two lines, and print their flags only when asked.
func TestRoleFlagMistakes(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"server", "--bogus"}, "capstan: flag provided but not defined: --bogus\nRun 'capstan server --help' for usage.\n"},
		{[]string{"dev", "--data-dri", "x"}, "capstan: flag provided but not defined: --data-dri\nRun 'capstan dev --help' for usage.\n"},
		{[]string{"etcd", "--listen"}, "capstan: flag needs an argument: --listen\nRun 'capstan etcd --help' for usage.\n"},
		{[]string{"dev", "urls", "-x"}, "capstan: flag provided but not defined: -x\nRun 'capstan dev urls --help' for usage.\n"},
		{[]string{"etcd", "member"}, "capstan: unknown verb \"\": list, add or remove\nRun 'capstan etcd member --help' for usage.\n"},
	} {
		cmd := client(t, nil, c.args...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if exitCode(err) != 2 || stderr.String() != c.want || stdout.String() != "" {
			t.Errorf("capstan %v: exit %d\nstdout:\n%s\nstderr:\n%s", c.args, exitCode(err), stdout.String(), stderr.String())
		}
	}
	out, err := client(t, nil, "server", "--help").Output()
	if err != nil || !strings.Contains(string(out), "-data-dir") {
		t.Errorf("server --help: %v\n%s", err, out)
	}
	out, err = client(t, nil, "etcd", "member", "--help").Output()
	if err != nil || !strings.Contains(string(out), "capstan etcd member remove [flags] NAME|ID") {
		t.Errorf("etcd member --help: %v\n%s", err, out)
	}
}
