package e2e

import (
	"context"
	"encoding/base64"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/aws/aws-sdk-go-v2/service/iam"

	"github.com/capstanhq/capstan/internal/provision"
	ec2prov "github.com/capstanhq/capstan/internal/provision/ec2"
	"github.com/capstanhq/capstan/internal/provision/sim"
	"github.com/capstanhq/capstan/internal/testenv"
)

// startMoto starts moto_server, an independent implementation of the EC2
// API, on a free port. Under CI its absence fails the test.
func startMoto(t *testing.T) string {
	t.Helper()
	bin := testenv.RequireBinary(t, "moto[server] (pip)", "moto_server")
	addr := freeAddr(t)
	host, port := "127.0.0.1", addr[len("127.0.0.1:"):]
	cmd := exec.Command(bin, "-H", host, "-p", port)
	log, done := runProcess(t, cmd)
	url := "http://" + addr
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url + "/moto-api/")
		if err == nil {
			resp.Body.Close()
			return url
		}
		select {
		case err := <-done:
			done <- err
			t.Fatalf("moto_server exited: %v\n%s", err, log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("moto_server not up after 30s\n%s", log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// machines plays the boot of the EC2 instances Capstan launches, which
// moto does not: each new instance carrying Capstan's owner tag gets a
// hollow agent started with the settings its user data writes, and an
// instance EC2 shows terminated loses its agent, as a machine would.
type machines struct {
	t      *testing.T
	ec2    *ec2.Client
	prov   *sim.Provisioner
	sizes  map[string][2]int // instance type: vCPUs, MiB
	mu     sync.Mutex
	booted map[string]bool // EC2 instance ID: booted (false once gone)
	// bootedAt and goneAt are when the loop booted an instance and saw it
	// leave running.
	bootedAt, goneAt map[string]time.Time
	cancel           context.CancelFunc
	done             chan struct{}
}

func newMachines(t *testing.T, client *ec2.Client) *machines {
	prov, err := sim.New(sim.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &machines{t: t, ec2: client, prov: prov, sizes: map[string][2]int{}, booted: map[string]bool{}, bootedAt: map[string]time.Time{}, goneAt: map[string]time.Time{}, cancel: cancel, done: make(chan struct{})}
	go m.loop(ctx)
	t.Cleanup(func() {
		cancel()
		<-m.done
		prov.Close()
	})
	return m
}

func (m *machines) loop(ctx context.Context) {
	defer close(m.done)
	for ctx.Err() == nil {
		if err := m.pass(ctx); err != nil && ctx.Err() == nil {
			m.t.Logf("boot loop: %v", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (m *machines) pass(ctx context.Context) error {
	out, err := m.ec2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{{Name: aws.String("tag-key"), Values: []string{ec2prov.TagOwner}}}})
	if err != nil {
		return err
	}
	for _, r := range out.Reservations {
		for _, in := range r.Instances {
			id, state := aws.ToString(in.InstanceId), in.State.Name
			m.mu.Lock()
			booted, known := m.booted[id]
			m.mu.Unlock()
			switch {
			case !known && (state == ec2types.InstanceStateNamePending || state == ec2types.InstanceStateNameRunning):
				if err := m.boot(ctx, id, string(in.InstanceType)); err != nil {
					return err
				}
			case booted && state != ec2types.InstanceStateNamePending && state != ec2types.InstanceStateNameRunning:
				m.prov.Terminate(ctx, id)
				m.mu.Lock()
				m.booted[id] = false
				m.goneAt[id] = time.Now()
				m.mu.Unlock()
			}
		}
	}
	return nil
}

// boot reads the instance's user data and starts its agent.
func (m *machines) boot(ctx context.Context, id, instanceType string) error {
	attr, err := m.ec2.DescribeInstanceAttribute(ctx, &ec2.DescribeInstanceAttributeInput{InstanceId: aws.String(id), Attribute: ec2types.InstanceAttributeNameUserData})
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if attr.UserData == nil || attr.UserData.Value == nil {
		m.booted[id] = false // launched without user data: not Capstan's, nothing boots
		return nil
	}
	script, err := base64.StdEncoding.DecodeString(aws.ToString(attr.UserData.Value))
	if err != nil {
		return err
	}
	env, err := ec2prov.ParseUserData(string(script))
	if err != nil {
		m.booted[id] = false
		return nil
	}
	size, ok := m.sizes[instanceType]
	if !ok {
		it, err := m.ec2.DescribeInstanceTypes(ctx, &ec2.DescribeInstanceTypesInput{InstanceTypes: []ec2types.InstanceType{ec2types.InstanceType(instanceType)}})
		if err != nil || len(it.InstanceTypes) != 1 {
			return err
		}
		size = [2]int{int(aws.ToInt32(it.InstanceTypes[0].VCpuInfo.DefaultVCpus)), int(aws.ToInt64(it.InstanceTypes[0].MemoryInfo.SizeInMiB))}
		m.sizes[instanceType] = size
	}
	if _, err := m.prov.Launch(ctx, provision.Request{ID: id, CPU: size[0] * 1024, MemoryMiB: size[1], Env: env}); err != nil {
		return err
	}
	m.booted[id] = true
	m.bootedAt[id] = time.Now()
	return nil
}

// ec2Env is what the test's EC2 calls and the server's AWS configuration
// chain use: moto takes any credential.
func ec2Client(endpoint string) *ec2.Client {
	return ec2.New(ec2.Options{Region: "us-east-1", BaseEndpoint: aws.String(endpoint), Credentials: credentials.NewStaticCredentialsProvider("testing", "testing", "")})
}

// tagsOf maps an instance's tags.
func tagsOf(in ec2types.Instance) map[string]string {
	out := map[string]string{}
	for _, t := range in.Tags {
		out[aws.ToString(t.Key)] = aws.ToString(t.Value)
	}
	return out
}

// instancesByState lists the instances carrying key (any value), by state.
func instancesWith(t *testing.T, c *ec2.Client, key string) []ec2types.Instance {
	t.Helper()
	out, err := c.DescribeInstances(context.Background(), &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{{Name: aws.String("tag-key"), Values: []string{key}}}})
	if err != nil {
		t.Fatal(err)
	}
	var all []ec2types.Instance
	for _, r := range out.Reservations {
		all = append(all, r.Instances...)
	}
	return all
}

func instanceState(t *testing.T, c *ec2.Client, id string) ec2types.InstanceStateName {
	t.Helper()
	out, err := c.DescribeInstances(context.Background(), &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if err != nil || len(out.Reservations) != 1 {
		t.Fatalf("describe %s: %v", id, err)
	}
	return out.Reservations[0].Instances[0].State.Name
}

// TestEC2Provisioner runs managed instances on EC2 as moto serves it: the
// launch template becomes RunInstances (type chosen by attributes, tags,
// network, profile, user data), the booted agent registers and runs the
// critical daemon before the app task, a daemon rollout replaces the
// instance start-before-stop and terminates the old one in EC2, and a
// server killed mid-launch and restarted leaks no instance and touches
// none it did not launch.
func TestEC2Provisioner(t *testing.T) {
	ctx := context.Background()
	m := newMotoAccount(t, "capstan-instance")
	motoURL, ec, image, profile := m.url, m.ec, m.image, m.profile
	subnet := aws.ToString(m.subnet.SubnetId)
	sg, err := ec.CreateSecurityGroup(ctx, &ec2.CreateSecurityGroupInput{GroupName: aws.String("capstan-instances"), Description: aws.String("capstan"),
		VpcId: m.subnet.VpcId})
	if err != nil {
		t.Fatal(err)
	}
	// Instances Capstan did not launch: one untagged, one a user tagged
	// with an owner of their own. Neither may be touched.
	foreign := func(tags []ec2types.Tag) string {
		in := &ec2.RunInstancesInput{ImageId: aws.String(image), InstanceType: ec2types.InstanceTypeT3Micro, MinCount: aws.Int32(1), MaxCount: aws.Int32(1)}
		if tags != nil {
			in.TagSpecifications = []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeInstance, Tags: tags}}
		}
		out, err := ec.RunInstances(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		return aws.ToString(out.Instances[0].InstanceId)
	}
	untagged := foreign(nil)
	otherOwner := foreign([]ec2types.Tag{{Key: aws.String(ec2prov.TagOwner), Value: aws.String("someone-else")},
		{Key: aws.String(ec2prov.TagCluster), Value: aws.String("ec2")}, {Key: aws.String(ec2prov.TagInstanceID), Value: aws.String("mi-theirs")}})

	boots := newMachines(t, ec)
	dir := t.TempDir()
	addr := freeAddr(t)
	args := []string{"--data-dir", dir, "--provisioner", "ec2", "--ec2-endpoint", motoURL, "--ec2-image-id", image}
	p := startEC2Server(t, addr, args...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server log:\n%s", p.log)
		}
	})
	f := &fleet{t: t, c: p.client(), image: "busybox:sim", cluster: "ec2"}
	if _, err := f.c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String(f.cluster)}); err != nil {
		t.Fatal(err)
	}
	cpOut, err := f.c.CreateCapacityProvider(ctx, &ecs.CreateCapacityProviderInput{Name: aws.String("fleet"), Cluster: aws.String(f.cluster),
		ManagedInstancesProvider: &types.CreateManagedInstancesProviderConfiguration{
			InfrastructureRoleArn:      aws.String("arn:aws:iam::123456789012:role/capstan"),
			InfrastructureOptimization: &types.InfrastructureOptimization{ScaleInAfter: aws.Int32(-1)},
			InstanceLaunchTemplate: &types.InstanceLaunchTemplate{Ec2InstanceProfileArn: aws.String(profile),
				Monitoring:           types.ManagedInstancesMonitoringOptionsDetailed,
				NetworkConfiguration: &types.ManagedInstancesNetworkConfiguration{Subnets: []string{subnet}, SecurityGroups: []string{aws.ToString(sg.GroupId)}},
				StorageConfiguration: &types.ManagedInstancesStorageConfiguration{StorageSizeGiB: aws.Int32(40)},
				// Of the 2-vCPU, 4-GiB Intel types in c5*/t2, c5d is
				// excluded and t2 is burstable (left out by default):
				// c5.large is what meets them.
				InstanceRequirements: &types.InstanceRequirementsRequest{VCpuCount: &types.VCpuCountRangeRequest{Min: aws.Int32(2), Max: aws.Int32(2)},
					MemoryMiB:             &types.MemoryMiBRequest{Min: aws.Int32(4096), Max: aws.Int32(4096)},
					CpuManufacturers:      []types.CpuManufacturer{types.CpuManufacturerIntel},
					AllowedInstanceTypes:  []string{"c5*.*", "t2.*"},
					ExcludedInstanceTypes: []string{"c5d.*"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	cp := aws.ToString(cpOut.CapacityProvider.CapacityProviderArn)
	daemonArn := f.daemon("agentd", cp, true, "sleep", "3600")
	td := f.register("job", f.container("job", "sleep", "3600"))
	run, err := f.c.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String(f.cluster), TaskDefinition: aws.String(td),
		CapacityProviderStrategy: []types.CapacityProviderStrategyItem{{CapacityProvider: aws.String("fleet")}}})
	if err != nil || len(run.Tasks) != 1 {
		t.Fatalf("run task: %+v %v", run, err)
	}
	app := f.waitStatus(aws.ToString(run.Tasks[0].TaskArn), "RUNNING", 90*time.Second)
	t.Log("app task RUNNING")

	// The instance EC2 launched: type, tags, network, profile, storage.
	var ours []ec2types.Instance
	for _, in := range instancesWith(t, ec, ec2prov.TagInstanceID) {
		if tagsOf(in)[ec2prov.TagOwner] != "someone-else" {
			ours = append(ours, in)
		}
	}
	if len(ours) != 1 {
		t.Fatalf("EC2 instances launched: %d, want 1", len(ours))
	}
	first := ours[0]
	firstID := aws.ToString(first.InstanceId)
	tags := tagsOf(first)
	if first.InstanceType != ec2types.InstanceTypeC5Large {
		t.Errorf("instance type %s, want c5.large", first.InstanceType)
	}
	if tags[ec2prov.TagCluster] != "ec2" || tags[ec2prov.TagCapacityProvider] != "fleet" || len(tags[ec2prov.TagInstanceID]) < 4 || tags[ec2prov.TagOwner] == "" {
		t.Errorf("tags %v", tags)
	}
	if aws.ToString(first.SubnetId) != subnet || len(first.SecurityGroups) != 1 || aws.ToString(first.SecurityGroups[0].GroupId) != aws.ToString(sg.GroupId) {
		t.Errorf("network: subnet %s groups %+v", aws.ToString(first.SubnetId), first.SecurityGroups)
	}
	if first.IamInstanceProfile == nil || aws.ToString(first.IamInstanceProfile.Arn) != profile {
		t.Errorf("instance profile %+v", first.IamInstanceProfile)
	}
	if first.Monitoring == nil || first.Monitoring.State != ec2types.MonitoringStateEnabled {
		t.Errorf("monitoring %+v", first.Monitoring)
	}
	if first.ImageId == nil || aws.ToString(first.ImageId) != image {
		t.Errorf("image %s", aws.ToString(first.ImageId))
	}

	// The booted agent registered; its critical daemon started before the app.
	inst := aws.ToString(app.ContainerInstanceArn)
	if inst == "" || inst != boots.prov.InstanceArn(firstID) {
		t.Fatalf("app task on %s, the booted instance registered as %s", inst, boots.prov.InstanceArn(firstID))
	}
	dts := f.daemonTasks("agentd", "RUNNING")
	if len(dts) != 1 || aws.ToString(dts[0].ContainerInstanceArn) != inst || !dts[0].StartedAt.Before(*app.StartedAt) {
		t.Fatalf("daemon tasks %+v, app started %v", dts, app.StartedAt)
	}

	// A service task joins the app on the instance.
	web := f.register("web", f.container("web", "sleep", "3600"))
	if _, err := f.c.CreateService(ctx, &ecs.CreateServiceInput{Cluster: aws.String(f.cluster), ServiceName: aws.String("web"), TaskDefinition: aws.String(web),
		DesiredCount: aws.Int32(1), CapacityProviderStrategy: []types.CapacityProviderStrategyItem{{CapacityProvider: aws.String("fleet")}}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the service task runs on the instance", func() bool {
		tk, ok := f.runningServiceTask("web")
		return ok && aws.ToString(tk.ContainerInstanceArn) == inst
	})
	if n := len(instancesWith(t, ec, ec2prov.TagInstanceID)); n != 2 { // ours and otherOwner
		t.Fatalf("the service task launched another instance: %d tagged", n)
	}

	// A daemon rollout replaces the instance: the new one first (booted
	// before the old one is terminated), the service task moves there,
	// and the old one is terminated in EC2.
	td2, err := f.c.RegisterDaemonTaskDefinition(ctx, &ecs.RegisterDaemonTaskDefinitionInput{Family: aws.String("agentd"),
		ContainerDefinitions: []types.DaemonContainerDefinition{{Name: aws.String("agentd"), Image: aws.String(f.image), Memory: aws.Int32(32), Command: []string{"sleep", "3601"}}}})
	if err != nil {
		t.Fatal(err)
	}
	up, err := f.c.UpdateDaemon(ctx, &ecs.UpdateDaemonInput{DaemonArn: aws.String(daemonArn), DaemonTaskDefinitionArn: td2.DaemonTaskDefinitionArn,
		CapacityProviderArns: []string{cp}, Critical: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("rollout started")
	eventually(t, 2*time.Minute, "rollout succeeds", func() bool {
		out, err := f.c.DescribeDaemonDeployments(ctx, &ecs.DescribeDaemonDeploymentsInput{DaemonDeploymentArns: []string{aws.ToString(up.DeploymentArn)}})
		if err != nil || len(out.DaemonDeployments) != 1 {
			t.Fatalf("describe deployment: %v", err)
		}
		s := out.DaemonDeployments[0].Status
		if s == types.DaemonDeploymentStatusStopped || s == types.DaemonDeploymentStatusRollbackSuccessful || s == types.DaemonDeploymentStatusRollbackFailed {
			t.Fatalf("rollout ended %s: %s", s, aws.ToString(out.DaemonDeployments[0].StatusReason))
		}
		return s == types.DaemonDeploymentStatusSuccessful
	})
	eventually(t, 60*time.Second, "old instance terminated in EC2", func() bool {
		return instanceState(t, ec, firstID) == ec2types.InstanceStateNameTerminated
	})
	// One instance is left: the replacement, booted, ACTIVE, running the
	// new revision of the daemon.
	var second string
	eventually(t, 60*time.Second, "the replacement runs the new daemon revision", func() bool {
		live := liveBooted(boots)
		if len(live) != 1 {
			return false
		}
		for id := range live {
			second = id
		}
		dts := f.daemonTasks("agentd", "RUNNING")
		return len(dts) == 1 && aws.ToString(dts[0].ContainerInstanceArn) == boots.prov.InstanceArn(second) &&
			aws.ToString(dts[0].TaskDefinitionArn) == aws.ToString(td2.DaemonTaskDefinitionArn)
	})
	if second == firstID || instanceState(t, ec, second) != ec2types.InstanceStateNameRunning {
		t.Fatalf("replacement %s", second)
	}
	boots.mu.Lock()
	bootedSecond, goneFirst := boots.bootedAt[second], boots.goneAt[firstID]
	boots.mu.Unlock()
	if goneFirst.IsZero() || !bootedSecond.Before(goneFirst) {
		t.Errorf("start-before-stop: replacement booted %v, old instance gone %v", bootedSecond, goneFirst)
	}
	eventually(t, 60*time.Second, "the service task runs on the replacement", func() bool {
		tk, ok := f.runningServiceTask("web")
		return ok && aws.ToString(tk.ContainerInstanceArn) == boots.prov.InstanceArn(second)
	})

	// Kill the server mid-launch: tasks that need new instances, and the
	// kill as soon as EC2 shows the first of them. A leaked launch is
	// also planted: an instance with this deployment's tags whose record
	// never was written, as a server stopped between RunInstances and its
	// record's update would leave.
	big := f.register("big", types.ContainerDefinition{Name: aws.String("big"), Image: aws.String(f.image), Memory: aws.Int32(3000), Command: []string{"sleep", "3600"}})
	before := len(instancesWith(t, ec, ec2prov.TagInstanceID))
	for range 3 {
		if _, err := f.c.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String(f.cluster), TaskDefinition: aws.String(big),
			CapacityProviderStrategy: []types.CapacityProviderStrategyItem{{CapacityProvider: aws.String("fleet")}}}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 60*time.Second, "a launch reaches EC2", func() bool { return len(instancesWith(t, ec, ec2prov.TagInstanceID)) > before })
	t.Log("killing the server mid-launch")
	p.kill9(t)
	leaked := foreign([]ec2types.Tag{{Key: aws.String(ec2prov.TagOwner), Value: aws.String(tags[ec2prov.TagOwner])},
		{Key: aws.String(ec2prov.TagCluster), Value: aws.String("ec2")}, {Key: aws.String(ec2prov.TagCapacityProvider), Value: aws.String("fleet")},
		{Key: aws.String(ec2prov.TagInstanceID), Value: aws.String("mi-neverrecorded")}})
	p = startEC2Server(t, addr, args...)
	f.c = p.client()
	eventually(t, 60*time.Second, "the planted leak is terminated", func() bool {
		return instanceState(t, ec, leaked) == ec2types.InstanceStateNameTerminated
	})
	// Every running instance with this deployment's tags is one whose
	// agent is an ACTIVE container instance of the cluster, or goes.
	t.Log("restarted; planted leak terminated")
	eventually(t, 2*time.Minute, "every tagged running instance is known to the server", func() bool {
		active := map[string]bool{}
		list, err := f.c.ListContainerInstances(ctx, &ecs.ListContainerInstancesInput{Cluster: aws.String(f.cluster), Status: types.ContainerInstanceStatusActive})
		if err != nil {
			return false
		}
		for _, a := range list.ContainerInstanceArns {
			active[a] = true
		}
		for _, in := range instancesWith(t, ec, ec2prov.TagOwner) {
			tg := tagsOf(in)
			if tg[ec2prov.TagOwner] != tags[ec2prov.TagOwner] || in.State.Name == ec2types.InstanceStateNameTerminated {
				continue
			}
			if !active[boots.prov.InstanceArn(aws.ToString(in.InstanceId))] {
				return false
			}
		}
		return true
	})
	eventually(t, 2*time.Minute, "the big tasks run", func() bool {
		list, err := f.c.ListTasks(ctx, &ecs.ListTasksInput{Cluster: aws.String(f.cluster), Family: aws.String("big"), DesiredStatus: types.DesiredStatusRunning})
		if err != nil || len(list.TaskArns) != 3 {
			return false
		}
		out, err := f.c.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: aws.String(f.cluster), Tasks: list.TaskArns})
		return err == nil && !slices.ContainsFunc(out.Tasks, func(tk types.Task) bool { return aws.ToString(tk.LastStatus) != "RUNNING" })
	})
	for _, id := range []string{untagged, otherOwner} {
		if s := instanceState(t, ec, id); s != ec2types.InstanceStateNameRunning {
			t.Errorf("instance %s Capstan did not launch is %s", id, s)
		}
	}
	// A launch that cannot succeed (AWS-made CPUs are arm64, the image is
	// x86_64: no type fits) is a warning event naming the capacity provider and
	// why, and the task waits; nothing is launched.
	if _, err := f.c.CreateCapacityProvider(ctx, &ecs.CreateCapacityProviderInput{Name: aws.String("nomatch"), Cluster: aws.String(f.cluster),
		ManagedInstancesProvider: &types.CreateManagedInstancesProviderConfiguration{InfrastructureRoleArn: aws.String("arn:aws:iam::123456789012:role/capstan"),
			InstanceLaunchTemplate: &types.InstanceLaunchTemplate{Ec2InstanceProfileArn: aws.String(profile),
				NetworkConfiguration: &types.ManagedInstancesNetworkConfiguration{Subnets: []string{subnet}},
				InstanceRequirements: &types.InstanceRequirementsRequest{VCpuCount: &types.VCpuCountRangeRequest{Min: aws.Int32(1)},
					MemoryMiB: &types.MemoryMiBRequest{Min: aws.Int32(1024)}, CpuManufacturers: []types.CpuManufacturer{types.CpuManufacturerAmazonWebServices}}}}}); err != nil {
		t.Fatal(err)
	}
	launchedBefore := len(instancesWith(t, ec, ec2prov.TagInstanceID))
	waiting, err := f.c.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String(f.cluster), TaskDefinition: aws.String(td),
		CapacityProviderStrategy: []types.CapacityProviderStrategyItem{{CapacityProvider: aws.String("nomatch")}}})
	if err != nil || len(waiting.Tasks) != 1 {
		t.Fatalf("run on nomatch: %+v %v", waiting, err)
	}
	eventually(t, 30*time.Second, "a launch-impaired event for nomatch", func() bool {
		cmd := exec.Command(capstanBinary(t), "--endpoint", "http://"+p.addr, "--access-key-id", testKey, "--secret-access-key", testSecret,
			"-o", "json", "events", "--cluster", f.cluster, "--type", "launch")
		cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
		out, err := cmd.Output()
		return err == nil && strings.Contains(string(out), "MANAGED_INSTANCE_LAUNCH_IMPAIRED") && strings.Contains(string(out), `"capacityProviderName":"nomatch"`) &&
			strings.Contains(string(out), "no EC2 instance type meets")
	})
	if s := aws.ToString(f.task(aws.ToString(waiting.Tasks[0].TaskArn)).LastStatus); s != "PROVISIONING" {
		t.Errorf("task on nomatch is %s", s)
	}
	if n := len(instancesWith(t, ec, ec2prov.TagInstanceID)); n != launchedBefore {
		t.Errorf("instances launched for nomatch: %d", n-launchedBefore)
	}
	t.Logf("EC2 instances launched by Capstan over the test: %s", strconv.Itoa(len(instancesWith(t, ec, ec2prov.TagInstanceID))-2))
}

// startEC2Server is startServerProcess with a bounded health check: a
// server stuck in its start (an EC2 call) fails the test with its log.
func startEC2Server(t *testing.T, addr string, args ...string) *serverProcess {
	t.Helper()
	cmd := exec.Command(capstanBinary(t), append([]string{"server", "--listen", addr, "--account-id", "123456789012"}, args...)...)
	cmd.Env = append(os.Environ(), "CAPSTAN_ACCESS_KEY_ID="+testKey, "CAPSTAN_SECRET_ACCESS_KEY="+testSecret)
	p := &serverProcess{cmd: cmd, addr: addr}
	p.log, p.done = runProcess(t, cmd)
	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if resp, err := hc.Get("http://" + addr + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return p
			}
		}
		select {
		case err := <-p.done:
			p.done <- err
			t.Fatalf("server exited during start: %v\n%s", err, p.log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("server not healthy after 60s\n%s", p.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// liveBooted is the EC2 instances with a running agent.
func liveBooted(m *machines) map[string]bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]bool{}
	for id, b := range m.booted {
		if b {
			out[id] = true
		}
	}
	return out
}

// TestEC2ProvisionerBadStart: the ec2 provisioner without an image, or with
// one EC2 does not have, stops the server at start naming what is wrong.
func TestEC2ProvisionerBadStart(t *testing.T) {
	motoURL := startMoto(t)
	t.Setenv("AWS_ACCESS_KEY_ID", "testing")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "testing")
	t.Setenv("AWS_REGION", "us-east-1")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--provisioner", "ec2", "--ec2-endpoint", motoURL}, "--ec2-image-id"},
		{[]string{"--provisioner", "ec2", "--ec2-endpoint", motoURL, "--ec2-image-id", "ami-12345678"}, "ami-12345678"},
	} {
		cmd := exec.Command(capstanBinary(t), append([]string{"server", "--listen", freeAddr(t), "--data-dir", t.TempDir()}, c.args...)...)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Errorf("capstan server %v: %v, output without %q:\n%s", c.args, err, c.want, out)
		}
	}
}

// motoAccount is a moto EC2 and IAM with what a launch template needs: an
// x86_64 image, a subnet and an instance profile; the AWS environment
// points the server's SDK at moto's test credentials.
type motoAccount struct {
	url, image, profile string
	ec                  *ec2.Client
	subnet              ec2types.Subnet
}

func newMotoAccount(t *testing.T, profileName string) motoAccount {
	t.Helper()
	ctx := context.Background()
	m := motoAccount{url: startMoto(t)}
	m.ec = ec2Client(m.url)
	t.Setenv("AWS_ACCESS_KEY_ID", "testing")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "testing")
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	imgs, err := m.ec.DescribeImages(ctx, &ec2.DescribeImagesInput{Owners: []string{"amazon"},
		Filters: []ec2types.Filter{{Name: aws.String("architecture"), Values: []string{"x86_64"}}, {Name: aws.String("name"), Values: []string{"amzn-ami-hvm-*"}}}})
	if err != nil || len(imgs.Images) == 0 {
		t.Fatalf("no x86_64 image in moto: %v", err)
	}
	m.image = aws.ToString(imgs.Images[0].ImageId)
	subnets, err := m.ec.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{})
	if err != nil || len(subnets.Subnets) == 0 {
		t.Fatalf("no subnet in moto: %v", err)
	}
	m.subnet = subnets.Subnets[0]
	ic := iam.New(iam.Options{Region: "us-east-1", BaseEndpoint: aws.String(m.url), Credentials: credentials.NewStaticCredentialsProvider("testing", "testing", "")})
	ip, err := ic.CreateInstanceProfile(ctx, &iam.CreateInstanceProfileInput{InstanceProfileName: aws.String(profileName)})
	if err != nil {
		t.Fatal(err)
	}
	m.profile = aws.ToString(ip.InstanceProfile.Arn)
	return m
}
