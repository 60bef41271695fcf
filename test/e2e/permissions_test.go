package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/testenv"
)

// TestTeamsPermissions is the platform-team / application-team split with
// the real AWS CLI: the root creates a platform group allowed daemons and
// capacity providers and an apps group allowed services, tasks and task
// definitions in one cluster, and a user of each; each user can do what its
// group allows and is refused the rest with AWS's wording; the audit trail
// shows all of it.
func TestTeamsPermissions(t *testing.T) {
	needAWS(t)
	srv := testenv.StartServer(t, "")
	const account = "123456789012"
	arn := func(rest string) string { return "arn:aws:ecs:us-east-1:" + account + ":" + rest }
	cli := func(env []string, args ...string) (string, string, error) {
		t.Helper()
		return runAWS(t, env, append(args, "--endpoint-url", srv.URL, "--output", "json")...)
	}
	must := func(env []string, args ...string) map[string]any {
		t.Helper()
		out, errOut, err := cli(env, args...)
		if err != nil {
			t.Fatalf("aws %s: %v\n%s", strings.Join(args, " "), err, errOut)
		}
		var v map[string]any
		if strings.TrimSpace(out) != "" {
			if err := json.Unmarshal([]byte(out), &v); err != nil {
				t.Fatalf("aws %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
		return v
	}
	denied := func(env []string, wantMsg string, args ...string) {
		t.Helper()
		_, errOut, err := cli(env, args...)
		if err == nil {
			t.Fatalf("aws %s succeeded; want AccessDeniedException", strings.Join(args, " "))
		}
		if !strings.Contains(errOut, "AccessDeniedException") || !strings.Contains(errOut, wantMsg) {
			t.Fatalf("aws %s: %s\nwant AccessDeniedException with %q", strings.Join(args, " "), errOut, wantMsg)
		}
	}
	root := srv.Env()
	dir := t.TempDir()
	file := func(name string, v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return "file://" + p
	}

	// The root sets up two clusters and the two teams.
	must(root, "ecs", "create-cluster", "--cluster-name", "apps")
	must(root, "ecs", "create-cluster", "--cluster-name", "other")
	must(root, "iam", "create-group", "--group-name", "platform")
	must(root, "iam", "put-group-policy", "--group-name", "platform", "--policy-name", "daemons", "--policy-document", file("platform.json", map[string]any{
		"Version": "2012-10-17",
		"Statement": []map[string]any{{
			"Sid":      "Daemons",
			"Effect":   "Allow",
			"Action":   []string{"ecs:*Daemon*", "ecs:*CapacityProvider*", "ecs:PutClusterCapacityProviders", "ecs:Describe*", "ecs:List*", "ecs:TagResource"},
			"Resource": "*",
		}},
	}))
	must(root, "iam", "create-group", "--group-name", "apps")
	must(root, "iam", "put-group-policy", "--group-name", "apps", "--policy-name", "services", "--policy-document", file("apps.json", map[string]any{
		"Version": "2012-10-17",
		"Statement": []map[string]any{{
			"Sid":       "InAppsCluster",
			"Effect":    "Allow",
			"Action":    []string{"ecs:CreateService", "ecs:UpdateService", "ecs:DeleteService", "ecs:DescribeServices", "ecs:RunTask", "ecs:StopTask", "ecs:DescribeTasks", "ecs:ListTasks"},
			"Resource":  "*",
			"Condition": map[string]any{"ArnEquals": map[string]any{"ecs:cluster": arn("cluster/apps")}},
		}, {
			"Sid":      "TheAppsCluster",
			"Effect":   "Allow",
			"Action":   "ecs:DescribeClusters",
			"Resource": arn("cluster/apps"),
		}, {
			"Sid":      "TaskDefinitions",
			"Effect":   "Allow",
			"Action":   []string{"ecs:RegisterTaskDefinition", "ecs:DescribeTaskDefinition", "ecs:ListTaskDefinitions"},
			"Resource": "*",
		}},
	}))
	user := func(name, group string) []string {
		must(root, "iam", "create-user", "--user-name", name)
		must(root, "iam", "add-user-to-group", "--user-name", name, "--group-name", group)
		k := must(root, "iam", "create-access-key", "--user-name", name)["AccessKey"].(map[string]any)
		return append(srv.Env(), "AWS_ACCESS_KEY_ID="+k["AccessKeyId"].(string), "AWS_SECRET_ACCESS_KEY="+k["SecretAccessKey"].(string))
	}
	alice, bob := user("alice", "platform"), user("bob", "apps")

	// Each caller is who it says.
	for _, c := range []struct {
		env  []string
		want string
	}{{root, "arn:aws:iam::" + account + ":root"}, {alice, "arn:aws:iam::" + account + ":user/alice"}, {bob, "arn:aws:iam::" + account + ":user/bob"}} {
		if got := must(c.env, "sts", "get-caller-identity")["Arn"]; got != c.want {
			t.Errorf("get-caller-identity: %v, want %s", got, c.want)
		}
	}

	// The platform user brings a daemon to the apps cluster and rolls it out.
	dtd := must(alice, "ecs", "register-daemon-task-definition", "--cli-input-json", "file://../../examples/cloudwatch-agent-daemon.json")
	dtdArn := dtd["daemonTaskDefinitionArn"].(string)
	cp := must(alice, "ecs", "create-capacity-provider", "--cli-input-json", file("cp.json", map[string]any{
		"name": "apps-mi", "cluster": "apps",
		"managedInstancesProvider": map[string]any{
			"infrastructureRoleArn": "arn:aws:iam::" + account + ":role/capstan-infrastructure",
			"instanceLaunchTemplate": map[string]any{
				"ec2InstanceProfileArn": "arn:aws:iam::" + account + ":instance-profile/capstan-instance",
				"networkConfiguration":  map[string]any{"subnets": []string{"subnet-local"}},
				"instanceRequirements":  map[string]any{"vCpuCount": map[string]any{"min": 2}, "memoryMiB": map[string]any{"min": 4096}},
			},
		},
	}))
	cpArn := cp["capacityProvider"].(map[string]any)["capacityProviderArn"].(string)
	d := must(alice, "ecs", "create-daemon", "--daemon-name", "agent", "--cluster-arn", arn("cluster/apps"),
		"--daemon-task-definition-arn", dtdArn, "--capacity-provider-arns", cpArn)
	daemonArn := d["daemonArn"].(string)
	must(alice, "ecs", "update-daemon", "--daemon-arn", daemonArn, "--daemon-task-definition-arn", dtdArn, "--capacity-provider-arns", cpArn)

	// The apps user runs a service in its cluster.
	must(bob, "ecs", "register-task-definition", "--family", "web", "--container-definitions", `[{"name":"web","image":"busybox","memory":64}]`)
	must(bob, "ecs", "create-service", "--cluster", "apps", "--service-name", "web", "--task-definition", "web", "--desired-count", "0")

	// ... and is refused the platform's actions, host access and the other cluster.
	denied(bob, "User: arn:aws:iam::"+account+":user/bob is not authorized to perform: ecs:UpdateDaemon on resource: "+daemonArn+
		" because no identity-based policy allows the ecs:UpdateDaemon action",
		"ecs", "update-daemon", "--daemon-arn", daemonArn, "--daemon-task-definition-arn", dtdArn, "--capacity-provider-arns", cpArn)
	denied(bob, "is not authorized to perform: ecs:RegisterDaemonTaskDefinition",
		"ecs", "register-daemon-task-definition", "--cli-input-json", "file://../../examples/cloudwatch-agent-daemon.json")
	denied(bob, "is not authorized to perform: capstan:HostAccess",
		"ecs", "register-task-definition", "--family", "root", "--container-definitions",
		`[{"name":"c","image":"busybox","memory":64,"mountPoints":[{"sourceVolume":"root","containerPath":"/host"}]}]`,
		"--volumes", `[{"name":"root","host":{"sourcePath":"/"}}]`)
	denied(bob, "is not authorized to perform: ecs:DescribeClusters on resource: "+arn("cluster/other"),
		"ecs", "describe-clusters", "--clusters", "other")
	denied(bob, "is not authorized to perform: ecs:CreateService",
		"ecs", "create-service", "--cluster", "other", "--service-name", "web", "--task-definition", "web", "--desired-count", "0")

	// The audit trail has the allowed and the refused calls, with who made them.
	audit := func(principal string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, testenv.CapstanBinary(t), "audit", "--principal", principal, "--json")
		cmd.Env = append(srv.Env(), "CAPSTAN_ENDPOINT="+srv.URL, "HOME="+t.TempDir())
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("capstan audit --principal %s: %v", principal, err)
		}
		return string(out)
	}
	want := map[string][]string{
		"bob":   {`"eventName":"CreateService"`, `"eventName":"UpdateDaemon"`, `"errorCode":"AccessDeniedException"`, `"userName":"bob"`, `"eventName":"DescribeClusters"`},
		"alice": {`"eventName":"UpdateDaemon"`, `"eventName":"CreateDaemon"`, `"userName":"alice"`, daemonArn},
	}
	for who, wants := range want {
		var got string
		for deadline := time.Now().Add(30 * time.Second); ; {
			got = audit(who)
			missing := slices.IndexFunc(wants, func(w string) bool { return !strings.Contains(got, w) })
			if missing < 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("audit of %s lacks %s:\n%s", who, wants[missing], got)
			}
			time.Sleep(200 * time.Millisecond) // the trail writes in batches
		}
		if who == "alice" && strings.Contains(got, "AccessDeniedException") {
			t.Errorf("alice was refused something:\n%s", got)
		}
	}
}
