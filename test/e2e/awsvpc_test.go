package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
)

// get fetches http://addr:port/path from the test process, on the host.
func get(addr, port, path string) (string, error) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + net.JoinHostPort(addr, port) + path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return string(b), &net.AddrError{Err: resp.Status, Addr: addr}
	}
	return string(b), err
}

// detail is the value of an attachment detail.
func detail(a types.Attachment, name string) string {
	for _, kv := range a.Details {
		if aws.ToString(kv.Name) == name {
			return aws.ToString(kv.Value)
		}
	}
	return ""
}

// TestAwsvpcFargateService runs a task definition written for AWS Fargate
// (awsvpc, FARGATE, task-level cpu and memory, a platform version) as a
// service with launchType FARGATE, which runs it on a managed instance. The task gets an address of its own,
// shown in DescribeTasks as ECS shows an ENI; the host reaches the task's
// port on it; the task reaches the instance's daemon as "daemon"; scaling
// the service to 0 takes the address away.
func TestAwsvpcFargateService(t *testing.T) {
	ctx := context.Background()
	f := newManagedFleet(t)
	cp := f.managedCapacityProvider("vpc", 600)
	f.daemon("statsd", cp, true, "sh", "-c", "mkdir -p /www && echo daemon-ok > /www/index.html && exec httpd -f -p 9000 -h /www")

	// The task asks the daemon for its page before it serves its own, and
	// serves what the daemon answered as /daemon.txt.
	script := `mkdir -p /www; until printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 2 daemon 9000 > /www/daemon.txt && grep -q daemon-ok /www/daemon.txt; do sleep 1; done; ` +
		`echo task-ok > /www/index.html; exec httpd -f -p 8080 -h /www`
	reg, err := f.c.RegisterTaskDefinition(ctx, &ecs.RegisterTaskDefinitionInput{
		Family:                  aws.String("fargate-web"),
		NetworkMode:             types.NetworkModeAwsvpc,
		RequiresCompatibilities: []types.Compatibility{types.CompatibilityFargate},
		Cpu:                     aws.String("256"),
		Memory:                  aws.String("512"),
		EphemeralStorage:        &types.EphemeralStorage{SizeInGiB: 21},
		RuntimePlatform:         &types.RuntimePlatform{OperatingSystemFamily: types.OSFamilyLinux},
		ExecutionRoleArn:        aws.String("arn:aws:iam::123456789012:role/ecsTaskExecutionRole"),
		ContainerDefinitions: []types.ContainerDefinition{{
			Name: aws.String("web"), Image: aws.String(f.image), Essential: aws.Bool(true),
			Command:      []string{"sh", "-c", script},
			PortMappings: []types.PortMapping{{ContainerPort: aws.Int32(8080), Protocol: types.TransportProtocolTcp}},
		}},
	})
	if err != nil {
		t.Fatalf("register a Fargate definition: %v", err)
	}
	if !slices.Contains(reg.TaskDefinition.Compatibilities, types.CompatibilityFargate) {
		t.Errorf("compatibilities %v", reg.TaskDefinition.Compatibilities)
	}
	if _, err := f.c.CreateService(ctx, &ecs.CreateServiceInput{Cluster: aws.String(f.cluster), ServiceName: aws.String("web"),
		TaskDefinition: reg.TaskDefinition.TaskDefinitionArn, DesiredCount: aws.Int32(1), PlatformVersion: aws.String("LATEST"),
		LaunchType: types.LaunchTypeFargate, // placed on the cluster's managed-instances provider
		NetworkConfiguration: &types.NetworkConfiguration{AwsvpcConfiguration: &types.AwsVpcConfiguration{
			Subnets: []string{"subnet-0local"}, SecurityGroups: []string{"sg-0local"}}}}); err != nil {
		t.Fatalf("create the service: %v", err)
	}
	var tk types.Task
	eventually(t, 180*time.Second, "service task RUNNING", func() bool { var ok bool; tk, ok = f.runningServiceTask("web"); return ok })

	// DescribeTasks shows the task's own address as ECS shows an ENI.
	if len(tk.Attachments) != 1 {
		t.Fatalf("attachments %+v", tk.Attachments)
	}
	a := tk.Attachments[0]
	addr := detail(a, "privateIPv4Address")
	if aws.ToString(a.Type) != "ElasticNetworkInterface" || aws.ToString(a.Status) != "ATTACHED" || net.ParseIP(addr) == nil ||
		detail(a, "subnetId") != "subnet-0local" || !strings.HasPrefix(detail(a, "networkInterfaceId"), "eni-") ||
		detail(a, "privateDnsName") == "" {
		t.Fatalf("attachment %s %s %+v", aws.ToString(a.Type), aws.ToString(a.Status), a.Details)
	}
	nis := tk.Containers[0].NetworkInterfaces
	if len(nis) != 1 || aws.ToString(nis[0].PrivateIpv4Address) != addr || aws.ToString(nis[0].AttachmentId) != aws.ToString(a.Id) {
		t.Fatalf("container networkInterfaces %+v, attachment %s at %s", nis, aws.ToString(a.Id), addr)
	}
	inst := f.instance(aws.ToString(tk.ContainerInstanceArn))
	if aws.ToString(inst.CapacityProviderName) != "vpc" {
		t.Fatalf("placed on %+v", inst)
	}

	// The host reaches the task on its own address, and the task reached
	// the daemon as "daemon".
	var body, fromDaemon string
	eventually(t, 60*time.Second, "the task answers on "+addr+":8080", func() bool {
		body, err = get(addr, "8080", "/")
		return err == nil && strings.Contains(body, "task-ok")
	})
	if fromDaemon, err = get(addr, "8080", "/daemon.txt"); err != nil || !strings.Contains(fromDaemon, "daemon-ok") {
		t.Fatalf("what the task got from the daemon: %q %v", fromDaemon, err)
	}

	// Scaled to 0, the task stops and its address goes.
	if _, err := f.c.UpdateService(ctx, &ecs.UpdateServiceInput{Cluster: aws.String(f.cluster), Service: aws.String("web"), DesiredCount: aws.Int32(0)}); err != nil {
		t.Fatal(err)
	}
	stopped := f.waitStatus(aws.ToString(tk.TaskArn), "STOPPED", 90*time.Second)
	if len(stopped.Attachments) != 1 || aws.ToString(stopped.Attachments[0].Status) != "DELETED" {
		t.Fatalf("stopped task's attachments %+v", stopped.Attachments)
	}
	eventually(t, 30*time.Second, "the task's namespace holder removed", func() bool {
		cs, err := f.rt.List(ctx, map[string]string{"com.capstan.network-of": aws.ToString(tk.TaskArn)})
		return err == nil && len(cs) == 0
	})
	if _, err := get(addr, "8080", "/"); err == nil {
		t.Fatalf("the stopped task's address %s still answers", addr)
	}
}
