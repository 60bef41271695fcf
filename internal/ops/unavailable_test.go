package ops_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/testenv"
)

// Operations whose feature Capstan lacks answer as ECS does without it,
// after checking what they name.
func TestUnavailableOperationsAnswerAsECS(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartServer(t, "")
	c := srv.ECS()
	if _, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("un")}); err != nil {
		t.Fatal(err)
	}
	ci := aws.ToString(registerInstance(t, srv, "un").ContainerInstanceArn)
	td, err := c.RegisterTaskDefinition(ctx, &ecs.RegisterTaskDefinitionInput{Family: aws.String("web"),
		ContainerDefinitions: []types.ContainerDefinition{{Name: aws.String("web"), Image: aws.String("busybox"), Memory: aws.Int32(64)}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateService(ctx, &ecs.CreateServiceInput{Cluster: aws.String("un"), ServiceName: aws.String("web"),
		TaskDefinition: td.TaskDefinition.TaskDefinitionArn, DesiredCount: aws.Int32(0)}); err != nil {
		t.Fatal(err)
	}
	run, err := c.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String("un"), TaskDefinition: td.TaskDefinition.TaskDefinitionArn})
	if err != nil || len(run.Tasks) != 1 {
		t.Fatalf("run: %v", err)
	}
	task := aws.ToString(run.Tasks[0].TaskArn)

	_, err = c.CreateTaskSet(ctx, &ecs.CreateTaskSetInput{Cluster: aws.String("un"), Service: aws.String("web"), TaskDefinition: aws.String("web")})
	wantECSError(t, err, "InvalidParameterException", "external deployment controllers")
	_, err = c.DescribeTaskSets(ctx, &ecs.DescribeTaskSetsInput{Cluster: aws.String("un"), Service: aws.String("web")})
	wantECSError(t, err, "InvalidParameterException", "external deployment controllers")
	_, err = c.UpdateServicePrimaryTaskSet(ctx, &ecs.UpdateServicePrimaryTaskSetInput{Cluster: aws.String("un"), Service: aws.String("nope"), PrimaryTaskSet: aws.String("ts")})
	wantECSError(t, err, "ServiceNotFoundException")
	_, err = c.DeleteTaskSet(ctx, &ecs.DeleteTaskSetInput{Cluster: aws.String("gone"), Service: aws.String("web"), TaskSet: aws.String("ts")})
	wantECSError(t, err, "ClusterNotFoundException")

	_, err = c.ListServicesByNamespace(ctx, &ecs.ListServicesByNamespaceInput{Namespace: aws.String("prod.local")})
	wantECSError(t, err, "NamespaceNotFoundException", "prod.local")

	_, err = c.ExecuteCommand(ctx, &ecs.ExecuteCommandInput{Cluster: aws.String("un"), Task: aws.String(task), Command: aws.String("sh"), Interactive: true})
	wantECSError(t, err, "InvalidParameterException", "execute command was not enabled")
	_, err = c.ExecuteCommand(ctx, &ecs.ExecuteCommandInput{Cluster: aws.String("un"), Task: aws.String("0123456789abcdef0123456789abcdef"), Command: aws.String("sh"), Interactive: true})
	wantECSError(t, err, "InvalidParameterException", "task", "not found")

	_, err = c.UpdateContainerAgent(ctx, &ecs.UpdateContainerAgentInput{Cluster: aws.String("un"), ContainerInstance: aws.String(ci)})
	wantECSError(t, err, "NoUpdateAvailableException")
	_, err = c.UpdateContainerAgent(ctx, &ecs.UpdateContainerAgentInput{Cluster: aws.String("un"), ContainerInstance: aws.String("0123456789abcdef0123456789abcdef")})
	wantECSError(t, err, "InvalidParameterException", "containerInstance")

	_, err = c.SubmitTaskStateChange(ctx, &ecs.SubmitTaskStateChangeInput{Cluster: aws.String("un"), Task: aws.String(task), Status: aws.String("RUNNING")})
	wantECSError(t, err, "UnsupportedFeatureException", "agent session")
	_, err = c.SubmitContainerStateChange(ctx, &ecs.SubmitContainerStateChangeInput{Cluster: aws.String("gone")})
	wantECSError(t, err, "ClusterNotFoundException")

	_, err = c.DescribeExpressGatewayService(ctx, &ecs.DescribeExpressGatewayServiceInput{ServiceArn: aws.String("arn:aws:ecs:us-east-1:123456789012:service/un/web")})
	wantECSError(t, err, "ResourceNotFoundException")
	_, err = c.DeleteExpressGatewayService(ctx, &ecs.DeleteExpressGatewayServiceInput{ServiceArn: aws.String("arn:aws:ecs:us-east-1:123456789012:service/un/web")})
	wantECSError(t, err, "ServiceNotFoundException")

	_, err = c.ContinueServiceDeployment(ctx, &ecs.ContinueServiceDeploymentInput{HookId: aws.String("h"),
		ServiceDeploymentArn: aws.String("arn:aws:ecs:us-east-1:123456789012:service-deployment/un/web/1")})
	wantECSError(t, err, "ServiceDeploymentNotFoundException")
}
