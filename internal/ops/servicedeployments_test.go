package ops_test

import (
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/store"
	"github.com/capstanhq/capstan/internal/testenv"
)

// markRunning records a task RUNNING, as its agent would report it.
func markRunning(t *testing.T, srv *testenv.Server, cluster, taskArn string) {
	t.Helper()
	ctx := context.Background()
	key := store.TaskKey(cluster, taskArn[strings.LastIndexByte(taskArn, '/')+1:])
	it, err := store.Get[store.Task](ctx, srv.Store, key)
	if err != nil {
		t.Fatal(err)
	}
	it.Value.LastStatus = "RUNNING"
	if _, err := srv.Store.Txn().Update(key, it.Rev, it.Value).Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestServiceDeploymentsAndRevisions(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartServer(t, "")
	c := srv.ECS()
	if _, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("sd")}); err != nil {
		t.Fatal(err)
	}
	registerInstance(t, srv, "sd")
	register := func() string {
		td, err := c.RegisterTaskDefinition(ctx, &ecs.RegisterTaskDefinitionInput{Family: aws.String("web"),
			ContainerDefinitions: []types.ContainerDefinition{{Name: aws.String("web"), Image: aws.String("busybox"), Memory: aws.Int32(64)}}})
		if err != nil {
			t.Fatal(err)
		}
		return aws.ToString(td.TaskDefinition.TaskDefinitionArn)
	}
	td1, td2 := register(), register()
	if _, err := c.CreateService(ctx, &ecs.CreateServiceInput{Cluster: aws.String("sd"), ServiceName: aws.String("web"),
		TaskDefinition: aws.String(td1), DesiredCount: aws.Int32(1)}); err != nil {
		t.Fatal(err)
	}
	markRunning(t, srv, "sd", waitLive(t, c, "sd", "web", 1)[0])
	// The new deployment's task never runs (no agent), so the old one
	// keeps its running task: both deployments stay on the service.
	if _, err := c.UpdateService(ctx, &ecs.UpdateServiceInput{Cluster: aws.String("sd"), Service: aws.String("web"), TaskDefinition: aws.String(td2)}); err != nil {
		t.Fatal(err)
	}
	waitLive(t, c, "sd", "web", 2)

	var briefs []types.ServiceDeploymentBrief
	for token := ""; ; {
		in := &ecs.ListServiceDeploymentsInput{Cluster: aws.String("sd"), Service: aws.String("web"), MaxResults: aws.Int32(1)}
		if token != "" {
			in.NextToken = aws.String(token)
		}
		page, err := c.ListServiceDeployments(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		briefs = append(briefs, page.ServiceDeployments...)
		if token = aws.ToString(page.NextToken); token == "" {
			break
		}
	}
	if len(briefs) != 2 || briefs[0].Status != types.ServiceDeploymentStatusInProgress || briefs[1].Status != types.ServiceDeploymentStatusStopped {
		t.Fatalf("list, one per page: %+v", briefs)
	}
	newest, older := aws.ToString(briefs[0].ServiceDeploymentArn), aws.ToString(briefs[1].ServiceDeploymentArn)
	if !strings.Contains(newest, ":service-deployment/sd/web/") || !strings.Contains(aws.ToString(briefs[0].TargetServiceRevisionArn), ":service-revision/sd/web/") {
		t.Fatalf("ARNs %s, %s", newest, aws.ToString(briefs[0].TargetServiceRevisionArn))
	}
	only, err := c.ListServiceDeployments(ctx, &ecs.ListServiceDeploymentsInput{Cluster: aws.String("sd"), Service: aws.String("web"),
		Status: []types.ServiceDeploymentStatus{types.ServiceDeploymentStatusStopped}})
	if err != nil || len(only.ServiceDeployments) != 1 || aws.ToString(only.ServiceDeployments[0].ServiceDeploymentArn) != older {
		t.Fatalf("filtered by STOPPED: %v %+v", err, only)
	}

	missing := strings.Replace(newest, "/web/", "/web/9", 1)
	d, err := c.DescribeServiceDeployments(ctx, &ecs.DescribeServiceDeploymentsInput{ServiceDeploymentArns: []string{newest, missing}})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.ServiceDeployments) != 1 || len(d.Failures) != 1 || aws.ToString(d.Failures[0].Reason) != "MISSING" || aws.ToString(d.Failures[0].Arn) != missing {
		t.Fatalf("describe: %+v failures %+v", d.ServiceDeployments, d.Failures)
	}
	sd := d.ServiceDeployments[0]
	if len(sd.SourceServiceRevisions) != 1 || sd.SourceServiceRevisions[0].RunningTaskCount != 1 ||
		sd.TargetServiceRevision.RequestedTaskCount != 1 || sd.Status != types.ServiceDeploymentStatusInProgress {
		t.Fatalf("deployment %+v", sd)
	}
	r, err := c.DescribeServiceRevisions(ctx, &ecs.DescribeServiceRevisionsInput{ServiceRevisionArns: []string{
		aws.ToString(sd.TargetServiceRevision.Arn), aws.ToString(sd.SourceServiceRevisions[0].Arn)}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.ServiceRevisions) != 2 || aws.ToString(r.ServiceRevisions[0].TaskDefinition) != td2 || aws.ToString(r.ServiceRevisions[1].TaskDefinition) != td1 {
		t.Fatalf("revisions %+v", r.ServiceRevisions)
	}

	_, err = c.StopServiceDeployment(ctx, &ecs.StopServiceDeploymentInput{ServiceDeploymentArn: aws.String(newest)})
	wantECSError(t, err, "UnsupportedFeatureException", "UpdateService")
	_, err = c.StopServiceDeployment(ctx, &ecs.StopServiceDeploymentInput{ServiceDeploymentArn: aws.String(older)})
	wantECSError(t, err, "ConflictException", "STOPPED")
	_, err = c.StopServiceDeployment(ctx, &ecs.StopServiceDeploymentInput{ServiceDeploymentArn: aws.String(missing)})
	wantECSError(t, err, "ServiceDeploymentNotFoundException")
	_, err = c.DescribeServiceDeployments(ctx, &ecs.DescribeServiceDeploymentsInput{ServiceDeploymentArns: []string{"arn:aws:ecs:us-east-1:123456789012:service/sd/web"}})
	wantECSError(t, err, "InvalidParameterException", "serviceDeploymentArns[0]")
	_, err = c.ListServiceDeployments(ctx, &ecs.ListServiceDeploymentsInput{Cluster: aws.String("sd"), Service: aws.String("nope")})
	wantECSError(t, err, "ServiceNotFoundException")
	_, err = c.ListServiceDeployments(ctx, &ecs.ListServiceDeploymentsInput{Cluster: aws.String("sd"), Service: aws.String("web"), Status: []types.ServiceDeploymentStatus{"DONE"}})
	wantECSError(t, err, "InvalidParameterException", "status[0]")
}
