package ops_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/ops"
)

// registerBound registers an instance of capacity provider cp as its agent
// would; no agent runs, so a daemon never starts there and a deployment
// stays IN_PROGRESS.
func (f *daemonFixture) registerBound(t *testing.T, cp string) {
	t.Helper()
	ctx := context.Background()
	cred, err := f.srv.Service.CreateAgentCredential(ctx, &ops.CreateAgentCredentialRequest{Cluster: "fleet", CapacityProvider: cp})
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.srv.ECSWith(cred.AccessKeyID, cred.SecretAccessKey).RegisterContainerInstance(ctx, &ecs.RegisterContainerInstanceInput{
		Cluster: aws.String("fleet"),
		TotalResources: []types.Resource{
			{Name: aws.String("CPU"), Type: aws.String("INTEGER"), IntegerValue: 4096},
			{Name: aws.String("MEMORY"), Type: aws.String("INTEGER"), IntegerValue: 8192},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitDeployment waits until the deployment's status is one of want.
func (f *daemonFixture) waitDeployment(t *testing.T, arn string, want ...types.DaemonDeploymentStatus) types.DaemonDeployment {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := f.c.DescribeDaemonDeployments(context.Background(), &ecs.DescribeDaemonDeploymentsInput{DaemonDeploymentArns: []string{arn}})
		if err != nil || len(out.DaemonDeployments) != 1 {
			t.Fatalf("describe %s: %+v %v", arn, out, err)
		}
		d := out.DaemonDeployments[0]
		for _, w := range want {
			if d.Status == w {
				return d
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("deployment %s is %s, want one of %v", arn, d.Status, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestStopDaemonDeployment(t *testing.T) {
	ctx := context.Background()
	f := newDaemonFixture(t)
	f.registerBound(t, "fleet-mi")
	created := f.create(t, "agent", nil)
	daemon, dep1 := aws.ToString(created.DaemonArn), aws.ToString(created.DeploymentArn)
	f.waitDeployment(t, dep1, types.DaemonDeploymentStatusInProgress)
	td2 := registerDaemonTD(t, f.c, "monitoring-agent")
	up, err := f.c.UpdateDaemon(ctx, &ecs.UpdateDaemonInput{DaemonArn: aws.String(daemon), DaemonTaskDefinitionArn: aws.String(td2), CapacityProviderArns: []string{f.cp}})
	if err != nil {
		t.Fatal(err)
	}
	dep2 := aws.ToString(up.DeploymentArn)
	first := f.waitDeployment(t, dep1, types.DaemonDeploymentStatusStopped)
	rev1 := aws.ToString(first.TargetDaemonRevision.Arn)
	f.waitDeployment(t, dep2, types.DaemonDeploymentStatusInProgress)

	stop := func(in ops.StopDaemonDeploymentRequest) (ops.StopDaemonDeploymentResponse, error) {
		var out ops.StopDaemonDeploymentResponse
		err := callExtension(ctx, f.srv, "StopDaemonDeployment", in, &out)
		return out, err
	}
	// Bad input and other states are refused, naming the field or the
	// deployment and its status, and change nothing.
	for _, c := range []struct {
		in   ops.StopDaemonDeploymentRequest
		want string
	}{
		{ops.StopDaemonDeploymentRequest{}, "InvalidParameterException: daemonArn: is required"},
		{ops.StopDaemonDeploymentRequest{DaemonArn: daemon, DaemonDeploymentArn: "nope"}, `InvalidParameterException: daemonDeploymentArn: "nope" is not a deployment of daemon ` + daemon},
		{ops.StopDaemonDeploymentRequest{DaemonArn: daemon, DaemonDeploymentArn: strings.Replace(dep2, "/agent/", "/other/", 1)}, "is not a deployment of daemon " + daemon},
		{ops.StopDaemonDeploymentRequest{DaemonArn: daemon, DaemonDeploymentArn: dep2 + "x"}, "InvalidParameterException: daemonDeploymentArn: daemon deployment " + dep2 + "x does not exist"},
		{ops.StopDaemonDeploymentRequest{DaemonArn: daemon, DaemonDeploymentArn: dep1}, "ClientException: daemon deployment " + dep1 + " is STOPPED: only a PENDING or IN_PROGRESS deployment"},
		{ops.StopDaemonDeploymentRequest{DaemonArn: strings.Replace(daemon, "/agent", "/none", 1)}, "DaemonNotFoundException"},
	} {
		if _, err := stop(c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("stop %+v: got %v, want %q", c.in, err, c.want)
		}
	}
	if d := f.waitDeployment(t, dep2, types.DaemonDeploymentStatusInProgress); d.Rollback != nil {
		t.Fatalf("a refused stop changed the deployment: %+v", d.Rollback)
	}

	// The latest deployment (named by default) rolls back to the revision
	// before, through the breaker's machinery.
	out, err := stop(ops.StopDaemonDeploymentRequest{DaemonArn: daemon})
	if err != nil {
		t.Fatal(err)
	}
	if out.DaemonDeploymentArn != dep2 || out.Status != "STOP_REQUESTED" || out.RollbackTargetDaemonRevisionArn != rev1 ||
		!strings.Contains(out.StatusReason, "StopDaemonDeployment") {
		t.Fatalf("stop answered %+v (rollback target want %s)", out, rev1)
	}
	d := f.waitDeployment(t, dep2, types.DaemonDeploymentStatusRollbackInProgress, types.DaemonDeploymentStatusRollbackSuccessful)
	if d.Rollback == nil || aws.ToString(d.Rollback.RollbackTargetDaemonRevisionArn) != rev1 || !strings.Contains(aws.ToString(d.Rollback.Reason), "StopDaemonDeployment") {
		t.Fatalf("rolled back deployment: %+v", d)
	}
	if d.CircuitBreaker != nil && d.CircuitBreaker.Status == types.DaemonDeploymentRollbackMonitorsStatusTriggered {
		t.Fatalf("an operator's stop marked the breaker triggered: %+v", d.CircuitBreaker)
	}
	var ro ops.DescribeDaemonRolloutResponse
	if err := callExtension(ctx, f.srv, "DescribeDaemonRollout", ops.DescribeDaemonRolloutRequest{DaemonArn: daemon}, &ro); err != nil {
		t.Fatal(err)
	}
	if ro.RollbackTargetDaemonRevisionArn != rev1 {
		t.Fatalf("rollout view: %+v", ro)
	}
	if _, err := stop(ops.StopDaemonDeploymentRequest{DaemonArn: daemon}); err == nil || !strings.Contains(err.Error(), "daemon deployment "+dep2+" is ROLLBACK_") {
		t.Fatalf("second stop: %v", err)
	}
}
