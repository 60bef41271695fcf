package ops_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/testenv"
)

// The members ECS answers with [] when empty, so that clients may index
// them without checking. The Go SDK decodes [] to an empty non-nil slice
// and a missing member to nil, which is what these tests tell apart.
func TestTaskDefinitionEmptyListsAsECS(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartServer(t, "")
	c := srv.ECS()
	bare := func(family string, required ...types.Compatibility) *ecs.RegisterTaskDefinitionInput {
		return &ecs.RegisterTaskDefinitionInput{Family: aws.String(family), RequiresCompatibilities: required,
			ContainerDefinitions: []types.ContainerDefinition{{Name: aws.String("app"), Image: aws.String("busybox"), Memory: aws.Int32(64)}}}
	}
	check := func(op string, td *types.TaskDefinition) {
		t.Helper()
		if td == nil {
			t.Fatalf("%s: no task definition", op)
		}
		for name, nilList := range map[string]bool{
			"volumes": td.Volumes == nil, "placementConstraints": td.PlacementConstraints == nil,
			"requiresAttributes": td.RequiresAttributes == nil, "compatibilities": td.Compatibilities == nil,
		} {
			if nilList {
				t.Errorf("%s: %s left out, ECS returns []", op, name)
			}
		}
		for _, cd := range td.ContainerDefinitions {
			for name, nilList := range map[string]bool{
				"portMappings": cd.PortMappings == nil, "environment": cd.Environment == nil, "mountPoints": cd.MountPoints == nil,
				"volumesFrom": cd.VolumesFrom == nil, "systemControls": cd.SystemControls == nil,
			} {
				if nilList {
					t.Errorf("%s: container %s: %s left out, ECS returns []", op, aws.ToString(cd.Name), name)
				}
			}
		}
	}
	reg, err := c.RegisterTaskDefinition(ctx, bare("plain"))
	if err != nil {
		t.Fatal(err)
	}
	check("RegisterTaskDefinition", reg.TaskDefinition)
	if got := reg.TaskDefinition.Compatibilities; !slices.Equal(got, []types.Compatibility{"EC2", "MANAGED_INSTANCES"}) {
		t.Errorf("compatibilities without requiresCompatibilities: %v", got)
	}
	desc, err := c.DescribeTaskDefinition(ctx, &ecs.DescribeTaskDefinitionInput{TaskDefinition: aws.String("plain:1")})
	if err != nil {
		t.Fatal(err)
	}
	check("DescribeTaskDefinition", desc.TaskDefinition)

	// compatibilities say what was asked, never more.
	ec2, err := c.RegisterTaskDefinition(ctx, bare("ec2only", types.CompatibilityEc2))
	if err != nil {
		t.Fatal(err)
	}
	if got := ec2.TaskDefinition.Compatibilities; !slices.Equal(got, []types.Compatibility{"EC2"}) {
		t.Errorf("EC2-only definition reports compatibilities %v, want [EC2]", got)
	}
	mi, err := c.RegisterTaskDefinition(ctx, bare("mionly", types.CompatibilityManagedInstances, types.CompatibilityManagedInstances))
	if err != nil {
		t.Fatal(err)
	}
	if got := mi.TaskDefinition.Compatibilities; !slices.Equal(got, []types.Compatibility{"MANAGED_INSTANCES"}) {
		t.Errorf("MANAGED_INSTANCES definition reports compatibilities %v", got)
	}

	dereg, err := c.DeregisterTaskDefinition(ctx, &ecs.DeregisterTaskDefinitionInput{TaskDefinition: aws.String("plain:1")})
	if err != nil {
		t.Fatal(err)
	}
	check("DeregisterTaskDefinition", dereg.TaskDefinition)
	del, err := c.DeleteTaskDefinitions(ctx, &ecs.DeleteTaskDefinitionsInput{TaskDefinitions: []string{"plain:1", "fake_task:7"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(del.TaskDefinitions) != 1 {
		t.Fatalf("deleted %d definitions", len(del.TaskDefinitions))
	}
	check("DeleteTaskDefinitions", &del.TaskDefinitions[0])
	// An unknown revision is a failure of the call, named as the caller named it.
	if len(del.Failures) != 1 || aws.ToString(del.Failures[0].Arn) != "fake_task:7" || aws.ToString(del.Failures[0].Reason) != "MISSING" {
		t.Fatalf("failures %+v", del.Failures)
	}
}

// The codes and messages ECS answers with, compared whole: scripts match
// on them.
func TestErrorsAsECS(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartServer(t, "")
	c := srv.ECS()

	_, err := c.ListServices(ctx, &ecs.ListServicesInput{Cluster: aws.String("foo")})
	wantECSExact(t, err, "ClusterNotFoundException", "Cluster not found.")
	_, err = c.DescribeServices(ctx, &ecs.DescribeServicesInput{Cluster: aws.String("foo"), Services: []string{"web"}})
	wantECSExact(t, err, "ClusterNotFoundException", "Cluster not found.")

	_, err = c.RegisterTaskDefinition(ctx, &ecs.RegisterTaskDefinitionInput{Family: aws.String("nomem"),
		ContainerDefinitions: []types.ContainerDefinition{{Name: aws.String("web"), Image: aws.String("busybox")}}})
	wantECSExact(t, err, "ClientException", "Invalid setting for container 'web'. At least one of 'memory' or 'memoryReservation' must be specified.")

	_, err = c.DeregisterTaskDefinition(ctx, &ecs.DeregisterTaskDefinitionInput{TaskDefinition: aws.String("fake_task")})
	wantECSExact(t, err, "ClientException", "Revision is missing.")
	_, err = c.DeregisterTaskDefinition(ctx, &ecs.DeregisterTaskDefinitionInput{TaskDefinition: aws.String("fake_task:1")})
	wantECSExact(t, err, "ClientException", "The specified task definition does not exist.")
	_, err = c.DescribeTaskDefinition(ctx, &ecs.DescribeTaskDefinitionInput{TaskDefinition: aws.String("fake_task")})
	wantECSExact(t, err, "ClientException", "Unable to describe task definition.")

	if _, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("apps")}); err != nil {
		t.Fatal(err)
	}
	_, err = c.DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{Cluster: aws.String("apps"), ContainerInstances: []string{}})
	wantECSExact(t, err, "ClientException", "Container Instances cannot be empty.")

	td := tdRegister(t, c, &ecs.RegisterTaskDefinitionInput{Family: aws.String("web"),
		ContainerDefinitions: []types.ContainerDefinition{{Name: aws.String("web"), Image: aws.String("busybox"), Memory: aws.Int32(64)}}})
	if _, err := c.CreateService(ctx, &ecs.CreateServiceInput{Cluster: aws.String("apps"), ServiceName: aws.String("web"),
		TaskDefinition: td.TaskDefinitionArn, DesiredCount: aws.Int32(1)}); err != nil {
		t.Fatal(err)
	}
	_, err = c.DeleteService(ctx, &ecs.DeleteServiceInput{Cluster: aws.String("apps"), Service: aws.String("web")})
	wantECSExact(t, err, "InvalidParameterException", "The service cannot be stopped while it is scaled above 0.")
	_, err = c.UpdateService(ctx, &ecs.UpdateServiceInput{Cluster: aws.String("apps"), Service: aws.String("nope"), DesiredCount: aws.Int32(0)})
	wantECSExact(t, err, "ServiceNotFoundException", "Service not found.")
	if _, err := c.DeleteService(ctx, &ecs.DeleteServiceInput{Cluster: aws.String("apps"), Service: aws.String("web"), Force: aws.Bool(true)}); err != nil {
		t.Fatal(err)
	}
	_, err = c.UpdateService(ctx, &ecs.UpdateServiceInput{Cluster: aws.String("apps"), Service: aws.String("web"), DesiredCount: aws.Int32(1)})
	wantECSExact(t, err, "ServiceNotActiveException", "Service was not ACTIVE.")

	_, err = c.DescribeServices(ctx, &ecs.DescribeServicesInput{Cluster: aws.String("apps"), Services: []string{}})
	wantECSExact(t, err, "InvalidParameterException", "Services cannot be empty.")
	_, err = c.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: aws.String("apps"), Tasks: []string{}})
	wantECSExact(t, err, "InvalidParameterException", "Tasks cannot be empty.")
	_, err = c.StopTask(ctx, &ecs.StopTaskInput{Cluster: aws.String("apps"), Task: aws.String("0123456789abcdef0123456789abcdef")})
	wantECSExact(t, err, "InvalidParameterException", "The referenced task was not found.")

	// An instance with a task not yet stopped: deregistering it without
	// force is refused in ECS's words and leaves it registered.
	ci := registerInstance(t, srv, "apps")
	started, err := c.StartTask(ctx, &ecs.StartTaskInput{Cluster: aws.String("apps"), TaskDefinition: td.TaskDefinitionArn,
		ContainerInstances: []string{aws.ToString(ci.ContainerInstanceArn)}})
	if err != nil || len(started.Tasks) != 1 {
		t.Fatalf("start task: %+v %v", started, err)
	}
	_, err = c.DeregisterContainerInstance(ctx, &ecs.DeregisterContainerInstanceInput{Cluster: aws.String("apps"), ContainerInstance: ci.ContainerInstanceArn})
	wantECSExact(t, err, "InvalidParameterException", "Found running tasks on the instance.")
	d, err := c.DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{Cluster: aws.String("apps"), ContainerInstances: []string{aws.ToString(ci.ContainerInstanceArn)}})
	if err != nil || len(d.ContainerInstances) != 1 || aws.ToString(d.ContainerInstances[0].Status) != "ACTIVE" {
		t.Fatalf("after the refused deregistration: %+v %v", d, err)
	}
}

// ARNs of another region or account name nothing here: describe calls
// report them as MISSING with the ARN as given, beside what they found.
func TestDescribeForeignARNsAreFailures(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartServer(t, "")
	c := srv.ECS()
	if _, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("apps")}); err != nil {
		t.Fatal(err)
	}
	td := tdRegister(t, c, &ecs.RegisterTaskDefinitionInput{Family: aws.String("web"),
		ContainerDefinitions: []types.ContainerDefinition{{Name: aws.String("web"), Image: aws.String("busybox"), Memory: aws.Int32(64)}}})
	if _, err := c.CreateService(ctx, &ecs.CreateServiceInput{Cluster: aws.String("apps"), ServiceName: aws.String("web"),
		TaskDefinition: td.TaskDefinitionArn, DesiredCount: aws.Int32(0)}); err != nil {
		t.Fatal(err)
	}
	cls, err := c.DescribeClusters(ctx, &ecs.DescribeClustersInput{Clusters: []string{"apps"}})
	if err != nil || len(cls.Clusters) != 1 || cls.Clusters[0].Statistics == nil || cls.Clusters[0].CapacityProviders == nil ||
		cls.Clusters[0].DefaultCapacityProviderStrategy == nil {
		t.Fatalf("cluster lists left out: %+v %v", cls, err)
	}
	otherRegion := "arn:aws:ecs:eu-west-1:123456789012:service/apps/web"
	otherAccount := "arn:aws:ecs:us-east-1:999999999999:service/apps/web"
	out, err := c.DescribeServices(ctx, &ecs.DescribeServicesInput{Cluster: aws.String("apps"), Services: []string{otherRegion, "web", otherAccount, "gone"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Services) != 1 || aws.ToString(out.Services[0].ServiceName) != "web" {
		t.Fatalf("services %+v", out.Services)
	}
	var arns []string
	for _, f := range out.Failures {
		if aws.ToString(f.Reason) != "MISSING" {
			t.Errorf("failure %+v: reason", f)
		}
		arns = append(arns, aws.ToString(f.Arn))
	}
	slices.Sort(arns)
	want := []string{"arn:aws:ecs:us-east-1:123456789012:service/apps/gone", otherRegion, otherAccount}
	slices.Sort(want)
	if !slices.Equal(arns, want) {
		t.Fatalf("failure ARNs %v, want %v", arns, want)
	}
	// The service's lists are there, empty.
	s := out.Services[0]
	if s.LoadBalancers == nil || s.ServiceRegistries == nil || s.Events == nil || s.PlacementConstraints == nil || s.PlacementStrategy == nil {
		t.Errorf("service lists left out: %+v", s)
	}

	foreignCluster := "arn:aws:ecs:eu-west-1:123456789012:cluster/apps"
	fc, err := c.DescribeClusters(ctx, &ecs.DescribeClustersInput{Clusters: []string{foreignCluster, "apps"}})
	if err != nil || len(fc.Clusters) != 1 || len(fc.Failures) != 1 || aws.ToString(fc.Failures[0].Arn) != foreignCluster || aws.ToString(fc.Failures[0].Reason) != "MISSING" {
		t.Fatalf("describe a cluster of another region: %+v %v", fc, err)
	}
	foreignInstance := "arn:aws:ecs:eu-west-1:123456789012:container-instance/apps/0123456789abcdef0123456789abcdef"
	fi, err := c.DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{Cluster: aws.String("apps"), ContainerInstances: []string{foreignInstance}})
	if err != nil || len(fi.Failures) != 1 || aws.ToString(fi.Failures[0].Arn) != foreignInstance || aws.ToString(fi.Failures[0].Reason) != "MISSING" {
		t.Fatalf("describe an instance of another region: %+v %v", fi, err)
	}
	foreignTask := "arn:aws:ecs:eu-west-1:123456789012:task/apps/0123456789abcdef0123456789abcdef"
	tasks, err := c.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: aws.String("apps"), Tasks: []string{foreignTask}})
	if err != nil || len(tasks.Failures) != 1 || aws.ToString(tasks.Failures[0].Arn) != foreignTask || aws.ToString(tasks.Failures[0].Reason) != "MISSING" {
		t.Fatalf("describe a task of another region: %+v %v", tasks, err)
	}
}

// A request signed for another region than the server's is refused with
// AWS's error, before anything runs; the server's own region works.
func TestRequestsOfAnotherRegionRefused(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartServer(t, "")
	other := ecs.New(ecs.Options{Region: "eu-west-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: credentials.NewStaticCredentialsProvider(srv.Config.AdminKeyID, srv.Config.AdminSecret, ""),
		Retryer:     testenv.Retryer()})
	_, err := other.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("elsewhere")})
	wantECSExact(t, err, "InvalidSignatureException", "Credential should be scoped to a valid region, not 'eu-west-1'.")
	list, err := srv.ECS().ListClusters(ctx, &ecs.ListClustersInput{})
	if err != nil {
		t.Fatal(err)
	}
	for _, arn := range list.ClusterArns {
		if strings.HasSuffix(arn, "/elsewhere") {
			t.Fatalf("the refused request created %s", arn)
		}
	}
}

// The AWS CLI configured for another region gets AWS's refusal.
func TestAWSCLIOtherRegionRefused(t *testing.T) {
	aws := testenv.RequireBinary(t, "awscli", "aws")
	srv := testenv.StartServer(t, "")
	cmd := exec.Command(aws, "ecs", "list-clusters", "--endpoint-url", srv.URL, "--region", "eu-west-1")
	cmd.Env = srv.Env()
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("accepted a request signed for eu-west-1: %s", out)
	}
	if !strings.Contains(string(out), "InvalidSignatureException") || !strings.Contains(string(out), "Credential should be scoped to a valid region, not 'eu-west-1'.") {
		t.Fatalf("aws CLI output: %s", out)
	}
	cmd = exec.Command("aws", "ecs", "list-clusters", "--endpoint-url", srv.URL, "--region", "us-east-1")
	cmd.Env = srv.Env()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the server's own region: %v: %s", err, out)
	}
}

// RunTask on a cluster whose only instance has no agent connected answers
// per-instance failures, as ECS does, not an error; StartTask and RunTask
// return the tasks' tags.
func TestRunTaskWithoutAgentAndTags(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartServer(t, "")
	c := srv.ECS()
	if _, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("apps")}); err != nil {
		t.Fatal(err)
	}
	td := tdRegister(t, c, &ecs.RegisterTaskDefinitionInput{Family: aws.String("web"),
		ContainerDefinitions: []types.ContainerDefinition{{Name: aws.String("web"), Image: aws.String("busybox"), Memory: aws.Int32(64)}}})
	// No instance at all is ECS's whole-call error.
	_, err := c.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String("apps"), TaskDefinition: td.TaskDefinitionArn})
	wantECSExact(t, err, "InvalidParameterException", "No Container Instances were found in your cluster.")

	reg, err := c.RegisterContainerInstance(ctx, &ecs.RegisterContainerInstanceInput{Cluster: aws.String("apps"),
		TotalResources: []types.Resource{
			{Name: aws.String("CPU"), Type: aws.String("INTEGER"), IntegerValue: 1024},
			{Name: aws.String("MEMORY"), Type: aws.String("INTEGER"), IntegerValue: 1024},
		}})
	if err != nil {
		t.Fatal(err)
	}
	ciArn := aws.ToString(reg.ContainerInstance.ContainerInstanceArn)
	dci, err := c.DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{Cluster: aws.String("apps"), ContainerInstances: []string{ciArn}})
	if err != nil || len(dci.ContainerInstances) != 1 {
		t.Fatalf("describe instance: %+v %v", dci, err)
	}
	if ci := dci.ContainerInstances[0]; ci.Attachments == nil || ci.Attributes == nil || ci.RegisteredResources == nil || ci.RemainingResources == nil {
		t.Errorf("container instance lists left out: %+v", ci)
	}
	run, err := c.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String("apps"), TaskDefinition: td.TaskDefinitionArn, Count: aws.Int32(2)})
	if err != nil {
		t.Fatalf("RunTask with a disconnected agent: %v", err)
	}
	if len(run.Tasks) != 0 || run.Tasks == nil || len(run.Failures) != 1 || aws.ToString(run.Failures[0].Arn) != ciArn || aws.ToString(run.Failures[0].Reason) != "AGENT" {
		t.Fatalf("RunTask answer %+v", run)
	}

	tags := []types.Tag{{Key: aws.String("team"), Value: aws.String("web")}}
	st, err := c.StartTask(ctx, &ecs.StartTaskInput{Cluster: aws.String("apps"), TaskDefinition: td.TaskDefinitionArn,
		ContainerInstances: []string{ciArn}, Tags: tags})
	if err != nil || len(st.Tasks) != 1 {
		t.Fatalf("StartTask: %+v %v", st, err)
	}
	task := st.Tasks[0]
	if len(task.Tags) != 1 || aws.ToString(task.Tags[0].Key) != "team" || st.Failures == nil {
		t.Fatalf("StartTask answer without its tags: %+v", st)
	}
	if task.Attachments == nil || task.Overrides == nil || task.Overrides.ContainerOverrides == nil || task.Containers[0].NetworkBindings == nil {
		t.Errorf("task lists left out: %+v", task)
	}
	untagged, err := c.StartTask(ctx, &ecs.StartTaskInput{Cluster: aws.String("apps"), TaskDefinition: td.TaskDefinitionArn,
		ContainerInstances: []string{ciArn}})
	if err != nil || len(untagged.Tasks) != 1 || untagged.Tasks[0].Tags == nil {
		t.Fatalf("StartTask without tags must answer tags []: %+v %v", untagged, err)
	}

	// The tasks and the instance take tags like any other resource.
	taskArn := aws.ToString(task.TaskArn)
	for _, arn := range []string{taskArn, ciArn} {
		if _, err := c.TagResource(ctx, &ecs.TagResourceInput{ResourceArn: aws.String(arn), Tags: []types.Tag{{Key: aws.String("env"), Value: aws.String("prod")}}}); err != nil {
			t.Fatalf("tag %s: %v", arn, err)
		}
		lt, err := c.ListTagsForResource(ctx, &ecs.ListTagsForResourceInput{ResourceArn: aws.String(arn)})
		if err != nil || !slices.ContainsFunc(lt.Tags, func(t types.Tag) bool { return aws.ToString(t.Key) == "env" }) {
			t.Fatalf("tags of %s: %+v %v", arn, lt, err)
		}
		if _, err := c.UntagResource(ctx, &ecs.UntagResourceInput{ResourceArn: aws.String(arn), TagKeys: []string{"env"}}); err != nil {
			t.Fatalf("untag %s: %v", arn, err)
		}
	}
	dt, err := c.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: aws.String("apps"), Tasks: []string{taskArn}, Include: []types.TaskField{types.TaskFieldTags}})
	if err != nil || len(dt.Tasks) != 1 || len(dt.Tasks[0].Tags) != 1 || aws.ToString(dt.Tasks[0].Tags[0].Key) != "team" {
		t.Fatalf("task tags after tag and untag: %+v %v", dt, err)
	}
	// Without TAGS, ECS answers tags [] (aws-cli's describe-tasks example).
	dt, err = c.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: aws.String("apps"), Tasks: []string{taskArn}})
	if err != nil || len(dt.Tasks) != 1 || dt.Tasks[0].Tags == nil || len(dt.Tasks[0].Tags) != 0 || dt.Failures == nil {
		t.Fatalf("describe without TAGS: %+v %v", dt, err)
	}

	// A re-registration without totalResources keeps what was registered;
	// a new instance without them is refused, naming the member.
	again, err := c.RegisterContainerInstance(ctx, &ecs.RegisterContainerInstanceInput{Cluster: aws.String("apps"), ContainerInstanceArn: aws.String(ciArn)})
	if err != nil {
		t.Fatalf("re-register without totalResources: %v", err)
	}
	if r := again.ContainerInstance.RegisteredResources; len(r) < 2 {
		t.Fatalf("registered resources after re-registration: %+v", r)
	}
	_, err = c.RegisterContainerInstance(ctx, &ecs.RegisterContainerInstanceInput{Cluster: aws.String("apps")})
	wantECSError(t, err, "InvalidParameterException", "totalResources")
}

func TestServiceTags(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartServer(t, "")
	c := srv.ECS()
	if _, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("apps")}); err != nil {
		t.Fatal(err)
	}
	td := tdRegister(t, c, &ecs.RegisterTaskDefinitionInput{Family: aws.String("web"),
		ContainerDefinitions: []types.ContainerDefinition{{Name: aws.String("web"), Image: aws.String("busybox"), Memory: aws.Int32(64)}}})
	out, err := c.CreateService(ctx, &ecs.CreateServiceInput{Cluster: aws.String("apps"), ServiceName: aws.String("web"),
		TaskDefinition: td.TaskDefinitionArn, DesiredCount: aws.Int32(0)})
	if err != nil {
		t.Fatal(err)
	}
	arn := aws.ToString(out.Service.ServiceArn)
	if _, err := c.TagResource(ctx, &ecs.TagResourceInput{ResourceArn: aws.String(arn), Tags: []types.Tag{{Key: aws.String("env"), Value: aws.String("prod")}}}); err != nil {
		t.Fatal(err)
	}
	d, err := c.DescribeServices(ctx, &ecs.DescribeServicesInput{Cluster: aws.String("apps"), Services: []string{"web"}, Include: []types.ServiceField{types.ServiceFieldTags}})
	if err != nil || len(d.Services) != 1 || len(d.Services[0].Tags) != 1 || aws.ToString(d.Services[0].Tags[0].Value) != "prod" {
		t.Fatalf("service tags: %+v %v", d, err)
	}
	if _, err := c.UntagResource(ctx, &ecs.UntagResourceInput{ResourceArn: aws.String(arn), TagKeys: []string{"env"}}); err != nil {
		t.Fatal(err)
	}
	lt, err := c.ListTagsForResource(ctx, &ecs.ListTagsForResourceInput{ResourceArn: aws.String(arn)})
	if err != nil || lt.Tags == nil || len(lt.Tags) != 0 {
		t.Fatalf("tags after untag: %+v %v", lt, err)
	}
	_, err = c.TagResource(ctx, &ecs.TagResourceInput{ResourceArn: aws.String("arn:aws:ecs:us-east-1:123456789012:service/apps/nope"),
		Tags: []types.Tag{{Key: aws.String("env"), Value: aws.String("prod")}}})
	wantECSError(t, err, "ResourceNotFoundException")
}

// boto3 indexes the lists ECS always returns; a missing one is a KeyError
// in a script. This runs the calls through botocore, the client.
func TestBotoIndexesECSLists(t *testing.T) {
	if err := exec.Command("python3", "-c", "import boto3").Run(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("python3 with boto3 is required when CI is set: %v", err)
		}
		t.Skipf("python3 with boto3 not available: %v", err)
	}
	srv := testenv.StartServer(t, "")
	script := `
import boto3, json, sys
c = boto3.client("ecs", endpoint_url=sys.argv[1], region_name="us-east-1")
td = c.register_task_definition(family="py", containerDefinitions=[{"name": "app", "image": "busybox", "memory": 64}])["taskDefinition"]
out = {"volumes": td["volumes"], "placementConstraints": td["placementConstraints"], "compatibilities": td["compatibilities"]}
cd = td["containerDefinitions"][0]
for k in ("portMappings", "environment", "mountPoints", "volumesFrom", "systemControls"):
    out[k] = cd[k]
try:
    c.deregister_task_definition(taskDefinition="fake_task")
except c.exceptions.ClientException as e:
    out["deregister"] = e.response["Error"]["Message"]
try:
    c.list_services(cluster="foo")
except c.exceptions.ClusterNotFoundException as e:
    out["cluster"] = e.response["Error"]["Message"]
print(json.dumps(out))
`
	cmd := exec.Command("python3", "-c", script, srv.URL)
	cmd.Env = srv.Env()
	b, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("boto3: %v\n%s", err, stderr)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	for _, k := range []string{"volumes", "placementConstraints", "portMappings", "environment", "mountPoints", "volumesFrom", "systemControls"} {
		if l, ok := got[k].([]any); !ok || len(l) != 0 {
			t.Errorf("%s = %v, want []", k, got[k])
		}
	}
	if got["deregister"] != "Revision is missing." || got["cluster"] != "Cluster not found." {
		t.Errorf("messages %v", got)
	}
}

// A task that fits on no instance is a failure with ECS's reason code;
// Capstan's explanation is the detail.
func TestRunTaskResourceFailureReason(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartServer(t, "")
	c := srv.ECS()
	if _, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("apps")}); err != nil {
		t.Fatal(err)
	}
	registerInstance(t, srv, "apps") // 2048 CPU units, 4096 MiB, agent connected
	td := tdRegister(t, c, &ecs.RegisterTaskDefinitionInput{Family: aws.String("big"),
		ContainerDefinitions: []types.ContainerDefinition{{Name: aws.String("big"), Image: aws.String("busybox"), Memory: aws.Int32(8192)}}})
	run, err := c.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String("apps"), TaskDefinition: td.TaskDefinitionArn})
	if err != nil {
		t.Fatal(err)
	}
	if len(run.Tasks) != 0 || len(run.Failures) != 1 || aws.ToString(run.Failures[0].Reason) != "RESOURCE:MEMORY" ||
		!strings.Contains(aws.ToString(run.Failures[0].Detail), "8192") {
		t.Fatalf("RunTask answer %+v", run.Failures)
	}
}
