package console_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/ops"
	"github.com/capstanhq/capstan/internal/testenv"
)

// waitStatus waits for the daemon's latest deployment to reach a status
// matching want.
func waitStatus(t *testing.T, srv *testenv.Server, daemon string, want *regexp.Regexp) types.DaemonDeployment {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx := context.Background()
		d, err := srv.ECS().DescribeDaemon(ctx, &ecs.DescribeDaemonInput{DaemonArn: aws.String(daemon)})
		if err != nil {
			t.Fatal(err)
		}
		out, err := srv.ECS().DescribeDaemonDeployments(ctx, &ecs.DescribeDaemonDeploymentsInput{DaemonDeploymentArns: []string{aws.ToString(d.Daemon.DeploymentArn)}})
		if err != nil || len(out.DaemonDeployments) != 1 {
			t.Fatalf("describe deployment: %+v %v", out, err)
		}
		if dep := out.DaemonDeployments[0]; want.MatchString(string(dep.Status)) {
			return dep
		} else if time.Now().After(deadline) {
			t.Fatalf("deployment %s is %s, want %s", aws.ToString(dep.DaemonDeploymentArn), dep.Status, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestStopDeploymentButton: the daemon page offers "Stop deployment" only
// while the rollout moves forward and to who may call
// CapstanV1.StopDaemonDeployment; the POST rolls the deployment back.
func TestStopDeploymentButton(t *testing.T) {
	srv := testenv.StartServer(t, "")
	ctx := context.Background()
	arn := daemonFixture(t, srv)
	page := "/console/daemon?arn=" + url.QueryEscape(arn)
	waitStatus(t, srv, arn, regexp.MustCompile(`^SUCCESSFUL$`))
	a := newBrowser(t, srv)
	a.signIn(adminKey, adminSecret)
	resp, body := a.get(page)
	wantStatus(t, "finished rollout", resp, body, 200, `id="stop" disabled`, "the deployment is SUCCESSFUL; only a PENDING or IN_PROGRESS one can be stopped")

	// An instance whose agent never runs the daemon holds the next
	// deployment IN_PROGRESS.
	cred, err := srv.Service.CreateAgentCredential(ctx, &ops.CreateAgentCredentialRequest{Cluster: "apps", CapacityProvider: "apps-mi"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.ECSWith(cred.AccessKeyID, cred.SecretAccessKey).RegisterContainerInstance(ctx, &ecs.RegisterContainerInstanceInput{Cluster: aws.String("apps"),
		TotalResources: []types.Resource{{Name: aws.String("CPU"), Type: aws.String("INTEGER"), IntegerValue: 2048},
			{Name: aws.String("MEMORY"), Type: aws.String("INTEGER"), IntegerValue: 4096}}}); err != nil {
		t.Fatal(err)
	}
	d, err := srv.ECS().DescribeDaemon(ctx, &ecs.DescribeDaemonInput{DaemonArn: aws.String(arn)})
	if err != nil {
		t.Fatal(err)
	}
	var cps []string
	for _, cp := range d.Daemon.CurrentRevisions[0].CapacityProviders {
		cps = append(cps, aws.ToString(cp.Arn))
	}
	up, err := srv.ECS().UpdateDaemon(ctx, &ecs.UpdateDaemonInput{DaemonArn: aws.String(arn), DaemonTaskDefinitionArn: aws.String("agentd:2"), CapacityProviderArns: cps})
	if err != nil {
		t.Fatal(err)
	}
	dep := aws.ToString(up.DeploymentArn)
	waitStatus(t, srv, arn, regexp.MustCompile(`^IN_PROGRESS$`))

	// A read-only user sees it greyed with the authorizer's reason, and
	// the API refuses the POST all the same.
	key, secret := readOnlyUser(t, srv)
	v := newBrowser(t, srv)
	v.signIn(key, secret)
	resp, body = v.get(page)
	wantStatus(t, "stop as viewer", resp, body, 200, `id="stop" disabled`, `id="stop-denied"`, "ecs:StopDaemonDeployment")
	resp, body = v.post("/console/daemon/stop", url.Values{"csrf": {v.csrf()}, "arn": {arn}})
	wantStatus(t, "stop POST as viewer", resp, body, http.StatusForbidden, "AccessDeniedException", "ecs:StopDaemonDeployment")

	resp, body = a.get(page)
	wantStatus(t, "running rollout", resp, body, 200, `<button type="submit" id="stop">Stop deployment</button>`)
	tok := a.csrf()
	resp, body = a.post("/console/daemon/stop", url.Values{"arn": {arn}})
	wantStatus(t, "stop without CSRF token", resp, body, http.StatusForbidden, "CSRF")
	resp, body = a.post("/console/daemon/stop", url.Values{"csrf": {tok}})
	wantStatus(t, "stop without arn", resp, body, 400, "arn: the daemon ARN is required")
	resp, body = a.post("/console/daemon/stop", url.Values{"csrf": {tok}, "arn": {arn}, "deployment": {"nope"}})
	wantStatus(t, "stop of another deployment", resp, body, 400, `daemonDeploymentArn: &#34;nope&#34; is not a deployment of daemon`)
	waitStatus(t, srv, arn, regexp.MustCompile(`^IN_PROGRESS$`))

	resp, body = a.post("/console/daemon/stop", url.Values{"csrf": {tok}, "arn": {arn}, "deployment": {dep}})
	wantStatus(t, "stop", resp, body, http.StatusSeeOther)
	got := waitStatus(t, srv, arn, regexp.MustCompile(`^(STOP_REQUESTED|ROLLBACK_IN_PROGRESS|ROLLBACK_SUCCESSFUL)$`))
	if aws.ToString(got.DaemonDeploymentArn) != dep || got.Rollback == nil {
		t.Fatalf("stopped deployment: %+v", got)
	}
	resp, body = a.post("/console/daemon/stop", url.Values{"csrf": {tok}, "arn": {arn}, "deployment": {dep}})
	wantStatus(t, "second stop", resp, body, 400, "ClientException", "daemon deployment "+dep+" is ")
	resp, body = a.get(page)
	wantStatus(t, "stopped rollout", resp, body, 200, `id="stop" disabled`, "only a PENDING or IN_PROGRESS one can be stopped")
}
