package ops_test

import (
	"context"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/testenv"
)

// fargateWeb is a task definition as users bring it for AWS Fargate.
func fargateWeb(family string) *ecs.RegisterTaskDefinitionInput {
	return &ecs.RegisterTaskDefinitionInput{
		Family:                  aws.String(family),
		NetworkMode:             types.NetworkModeAwsvpc,
		RequiresCompatibilities: []types.Compatibility{types.CompatibilityFargate},
		Cpu:                     aws.String("256"),
		Memory:                  aws.String("512"),
		EphemeralStorage:        &types.EphemeralStorage{SizeInGiB: 40},
		RuntimePlatform:         &types.RuntimePlatform{OperatingSystemFamily: types.OSFamilyLinux},
		ContainerDefinitions: []types.ContainerDefinition{{
			Name:         aws.String("web"),
			Image:        aws.String("nginx:1.27"),
			PortMappings: []types.PortMapping{{ContainerPort: aws.Int32(80)}},
		}},
	}
}

func awsvpcConfig() *types.NetworkConfiguration {
	return &types.NetworkConfiguration{AwsvpcConfiguration: &types.AwsVpcConfiguration{
		Subnets: []string{"subnet-0abc"}, SecurityGroups: []string{"sg-0abc"}}}
}

func TestFargateDefinitions(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartServer(t, "")
	c := srv.ECS()

	td := tdRegister(t, c, fargateWeb("fg"))
	if td.NetworkMode != types.NetworkModeAwsvpc || aws.ToString(td.Cpu) != "256" || aws.ToString(td.Memory) != "512" {
		t.Fatalf("registered %s %s/%s", td.NetworkMode, aws.ToString(td.Cpu), aws.ToString(td.Memory))
	}
	if !slices.Contains(td.Compatibilities, types.CompatibilityFargate) || !slices.Contains(td.Compatibilities, types.CompatibilityEc2) {
		t.Errorf("compatibilities %v, want EC2 and FARGATE", td.Compatibilities)
	}
	if pm := td.ContainerDefinitions[0].PortMappings[0]; aws.ToInt32(pm.HostPort) != 80 {
		t.Errorf("awsvpc hostPort %d, want the containerPort", aws.ToInt32(pm.HostPort))
	}

	rows := []struct {
		name   string
		mutate func(in *ecs.RegisterTaskDefinitionInput)
		code   string
		words  []string
	}{
		{"fargate in bridge mode", func(in *ecs.RegisterTaskDefinitionInput) { in.NetworkMode = types.NetworkModeBridge },
			"ClientException", []string{"Fargate only supports network mode 'awsvpc'"}},
		{"no Fargate size", func(in *ecs.RegisterTaskDefinitionInput) { in.Memory = aws.String("4096") },
			"ClientException", []string{"No Fargate configuration exists for given values"}},
		{"efs volume", func(in *ecs.RegisterTaskDefinitionInput) {
			in.Volumes = []types.Volume{{Name: aws.String("data"), EfsVolumeConfiguration: &types.EFSVolumeConfiguration{FileSystemId: aws.String("fs-1")}}}
		}, "UnsupportedFeatureException", []string{"volumes[0].efsVolumeConfiguration", "EFS"}},
		{"fsx volume", func(in *ecs.RegisterTaskDefinitionInput) {
			in.Volumes = []types.Volume{{Name: aws.String("data"), FsxWindowsFileServerVolumeConfiguration: &types.FSxWindowsFileServerVolumeConfiguration{
				FileSystemId: aws.String("fs-1"), RootDirectory: aws.String(`\share`),
				AuthorizationConfig: &types.FSxWindowsFileServerAuthorizationConfig{CredentialsParameter: aws.String("arn:x"), Domain: aws.String("corp")}}}}
		}, "UnsupportedFeatureException", []string{"fsxWindowsFileServerVolumeConfiguration", "FSx"}},
		{"inference accelerators", func(in *ecs.RegisterTaskDefinitionInput) {
			in.InferenceAccelerators = []types.InferenceAccelerator{{DeviceName: aws.String("d"), DeviceType: aws.String("eia2.medium")}}
		}, "UnsupportedFeatureException", []string{"inferenceAccelerators"}},
		{"awsvpc host port", func(in *ecs.RegisterTaskDefinitionInput) {
			in.ContainerDefinitions[0].PortMappings[0].HostPort = aws.Int32(8080)
		}, "InvalidParameterException", []string{"portMappings[0].hostPort", "awsvpc"}},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			in := fargateWeb("refused")
			row.mutate(in)
			_, err := c.RegisterTaskDefinition(ctx, in)
			wantECSError(t, err, row.code, row.words...)
		})
	}
	// None of the refused ones took a revision.
	if out, err := c.ListTaskDefinitions(ctx, &ecs.ListTaskDefinitionsInput{FamilyPrefix: aws.String("refused")}); err != nil || len(out.TaskDefinitionArns) != 0 {
		t.Fatalf("refused definitions listed: %v %v", out, err)
	}
}

func TestAwsvpcNetworkConfiguration(t *testing.T) {
	ctx := context.Background()
	f := newSvcFixture(t)
	fg := aws.ToString(tdRegister(t, f.c, fargateWeb("fg")).TaskDefinitionArn)

	// ECS's words for a missing or misplaced networkConfiguration.
	_, err := f.c.CreateService(ctx, &ecs.CreateServiceInput{Cluster: aws.String("apps"), ServiceName: aws.String("vpc"),
		TaskDefinition: aws.String(fg), DesiredCount: aws.Int32(0)})
	wantECSError(t, err, "InvalidParameterException", "Network Configuration must be provided when networkMode 'awsvpc' is specified.")
	_, err = f.c.CreateService(ctx, &ecs.CreateServiceInput{Cluster: aws.String("apps"), ServiceName: aws.String("br"),
		TaskDefinition: aws.String(f.td1), DesiredCount: aws.Int32(0), NetworkConfiguration: awsvpcConfig()})
	wantECSError(t, err, "InvalidParameterException", "Network Configuration is not valid for the given networkMode of this task definition.")
	_, err = f.c.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String("apps"), TaskDefinition: aws.String(fg)})
	wantECSError(t, err, "InvalidParameterException", "Network Configuration must be provided when networkMode 'awsvpc' is specified.")
	_, err = f.c.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String("apps"), TaskDefinition: aws.String(f.td1), NetworkConfiguration: awsvpcConfig()})
	wantECSError(t, err, "InvalidParameterException", "Network Configuration is not valid")

	// Features that need an integration Capstan has not are named.
	for name, mod := range map[string]func(*ecs.CreateServiceInput){
		"loadBalancers": func(in *ecs.CreateServiceInput) {
			in.LoadBalancers = []types.LoadBalancer{{ContainerName: aws.String("web"), ContainerPort: aws.Int32(80),
				TargetGroupArn: aws.String("arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/x/1")}}
		},
		"serviceRegistries": func(in *ecs.CreateServiceInput) {
			in.ServiceRegistries = []types.ServiceRegistry{{RegistryArn: aws.String("arn:aws:servicediscovery:us-east-1:123456789012:service/srv-1")}}
		},
	} {
		in := &ecs.CreateServiceInput{Cluster: aws.String("apps"), ServiceName: aws.String("lb"), TaskDefinition: aws.String(fg),
			DesiredCount: aws.Int32(0), NetworkConfiguration: awsvpcConfig()}
		mod(in)
		_, err := f.c.CreateService(ctx, in)
		wantECSError(t, err, "UnsupportedFeatureException", name)
	}

	// Given one, the service keeps it as ECS shows it; the platform version
	// is accepted and has no effect.
	out, err := f.c.CreateService(ctx, &ecs.CreateServiceInput{Cluster: aws.String("apps"), ServiceName: aws.String("vpc"),
		TaskDefinition: aws.String(fg), DesiredCount: aws.Int32(0), NetworkConfiguration: awsvpcConfig(), PlatformVersion: aws.String("LATEST")})
	if err != nil {
		t.Fatal(err)
	}
	nc := out.Service.NetworkConfiguration
	if nc == nil || nc.AwsvpcConfiguration == nil || !slices.Equal(nc.AwsvpcConfiguration.Subnets, []string{"subnet-0abc"}) {
		t.Fatalf("service networkConfiguration %+v", nc)
	}
	if got := f.describe(t, "vpc").NetworkConfiguration; got == nil || got.AwsvpcConfiguration == nil {
		t.Fatalf("described networkConfiguration %+v", got)
	}

	// launchType FARGATE: managed instances, for definitions Fargate runs.
	_, err = f.c.CreateService(ctx, &ecs.CreateServiceInput{Cluster: aws.String("apps"), ServiceName: aws.String("fg"),
		TaskDefinition: aws.String(fg), DesiredCount: aws.Int32(0), NetworkConfiguration: awsvpcConfig(), LaunchType: types.LaunchTypeFargate})
	wantECSError(t, err, "InvalidParameterException", "launchType", "managed-instances capacity provider")
	createCapacityProvider(t, f.c, "apps", "apps-mi")
	svc, err := f.c.CreateService(ctx, &ecs.CreateServiceInput{Cluster: aws.String("apps"), ServiceName: aws.String("fg"),
		TaskDefinition: aws.String(fg), DesiredCount: aws.Int32(0), NetworkConfiguration: awsvpcConfig(), LaunchType: types.LaunchTypeFargate})
	if err != nil {
		t.Fatal(err)
	}
	if s := svc.Service.CapacityProviderStrategy; len(s) != 1 || aws.ToString(s[0].CapacityProvider) != "apps-mi" {
		t.Fatalf("FARGATE service's strategy %+v", s)
	}
	_, err = f.c.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String("apps"), TaskDefinition: aws.String(f.td1), LaunchType: types.LaunchTypeFargate})
	wantECSError(t, err, "InvalidParameterException", "Task definition does not support launch_type FARGATE.")
	run, err := f.c.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String("apps"), TaskDefinition: aws.String(fg), LaunchType: types.LaunchTypeFargate,
		NetworkConfiguration: awsvpcConfig()})
	if err != nil || len(run.Tasks) != 1 {
		t.Fatalf("RunTask FARGATE: %+v %v", run, err)
	}
	tk := run.Tasks[0]
	if aws.ToString(tk.CapacityProviderName) != "apps-mi" && aws.ToString(tk.LastStatus) != "PROVISIONING" {
		t.Errorf("FARGATE task %s on %q", aws.ToString(tk.LastStatus), aws.ToString(tk.CapacityProviderName))
	}
	if len(tk.Attachments) != 1 || aws.ToString(tk.Attachments[0].Type) != "ElasticNetworkInterface" ||
		aws.ToString(tk.Attachments[0].Status) != "PRECREATED" {
		t.Fatalf("new awsvpc task's attachments %+v", tk.Attachments)
	}
}
