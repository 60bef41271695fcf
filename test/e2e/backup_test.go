package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
)

// backedUp is what a test writes before its snapshot.
type backedUp struct {
	daemon, taskDef, daemonTaskDef string
}

func writeDefinitions(t *testing.T, c *ecs.Client, cluster string) backedUp {
	t.Helper()
	ctx := context.Background()
	if _, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String(cluster)}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateCapacityProvider(ctx, &ecs.CreateCapacityProviderInput{Name: aws.String(cluster + "-mi"), Cluster: aws.String(cluster),
		ManagedInstancesProvider: &types.CreateManagedInstancesProviderConfiguration{
			InfrastructureRoleArn: aws.String("arn:aws:iam::123456789012:role/r"),
			InstanceLaunchTemplate: &types.InstanceLaunchTemplate{Ec2InstanceProfileArn: aws.String("arn:aws:iam::123456789012:instance-profile/p"),
				NetworkConfiguration: &types.ManagedInstancesNetworkConfiguration{Subnets: []string{"s"}}}}}); err != nil {
		t.Fatal(err)
	}
	dtd, err := c.RegisterDaemonTaskDefinition(ctx, &ecs.RegisterDaemonTaskDefinitionInput{Family: aws.String("agent"),
		ContainerDefinitions: []types.DaemonContainerDefinition{{Name: aws.String("a"), Image: aws.String("x"), Memory: aws.Int32(64)}}})
	if err != nil {
		t.Fatal(err)
	}
	d, err := c.CreateDaemon(ctx, &ecs.CreateDaemonInput{DaemonName: aws.String("d"), ClusterArn: aws.String(cluster),
		DaemonTaskDefinitionArn: dtd.DaemonTaskDefinitionArn, CapacityProviderArns: []string{cluster + "-mi"}})
	if err != nil {
		t.Fatal(err)
	}
	td, err := c.RegisterTaskDefinition(ctx, &ecs.RegisterTaskDefinitionInput{Family: aws.String("web"),
		ContainerDefinitions: []types.ContainerDefinition{{Name: aws.String("w"), Image: aws.String("x"), Memory: aws.Int32(64)}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateService(ctx, &ecs.CreateServiceInput{Cluster: aws.String(cluster), ServiceName: aws.String("web"),
		TaskDefinition: td.TaskDefinition.TaskDefinitionArn, DesiredCount: aws.Int32(0)}); err != nil {
		t.Fatal(err)
	}
	return backedUp{daemon: aws.ToString(d.DaemonArn), taskDef: aws.ToString(td.TaskDefinition.TaskDefinitionArn),
		daemonTaskDef: aws.ToString(dtd.DaemonTaskDefinitionArn)}
}

// present checks that a server sees what was backed up, and nothing
// written after the snapshot.
func (b backedUp) present(t *testing.T, c *ecs.Client, who string) {
	t.Helper()
	ctx := context.Background()
	cl, err := c.DescribeClusters(ctx, &ecs.DescribeClustersInput{Clusters: []string{"kept", "after-snapshot"}})
	if err != nil || len(cl.Clusters) != 1 || aws.ToString(cl.Clusters[0].ClusterName) != "kept" {
		t.Fatalf("%s: clusters: %+v %v; want kept only", who, cl, err)
	}
	dd, err := c.DescribeDaemon(ctx, &ecs.DescribeDaemonInput{DaemonArn: aws.String(b.daemon)})
	if err != nil || dd.Daemon == nil || aws.ToString(dd.Daemon.DaemonArn) != b.daemon {
		t.Fatalf("%s: daemon: %+v %v", who, dd, err)
	}
	if _, err := c.DescribeDaemonTaskDefinition(ctx, &ecs.DescribeDaemonTaskDefinitionInput{DaemonTaskDefinition: aws.String(b.daemonTaskDef)}); err != nil {
		t.Fatalf("%s: daemon task definition: %v", who, err)
	}
	if _, err := c.DescribeTaskDefinition(ctx, &ecs.DescribeTaskDefinitionInput{TaskDefinition: aws.String(b.taskDef)}); err != nil {
		t.Fatalf("%s: task definition: %v", who, err)
	}
	sv, err := c.DescribeServices(ctx, &ecs.DescribeServicesInput{Cluster: aws.String("kept"), Services: []string{"web"}})
	if err != nil || len(sv.Services) != 1 || aws.ToString(sv.Services[0].TaskDefinition) != b.taskDef {
		t.Fatalf("%s: service: %+v %v", who, sv, err)
	}
}

// capstanFails runs the capstan binary expecting it to fail saying want.
func capstanFails(t *testing.T, want string, args ...string) {
	t.Helper()
	out, err := exec.Command(capstanBinary(t), args...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), want) {
		t.Errorf("capstan %s: %v, output does not say %q:\n%s", strings.Join(args, " "), err, want, out)
	}
}

// A running server's embedded etcd is saved with `capstan etcd snapshot
// save` and restored with `capstan etcd snapshot restore` into a fresh
// data dir; a server started there (with the secrets key kept beside the
// snapshot) sees the cluster, daemon, service and task definitions, and
// nothing written after the snapshot. The same snapshot restored as the
// member of a new `capstan etcd` cluster serves a server too. Restoring
// over existing data, without a data dir or from no file is refused.
func TestBackupAndRestore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := startServerProcess(t, freeAddr(t), "--data-dir", dir, "--provisioner", "none")
	b := writeDefinitions(t, s.client(), "kept")
	snap := filepath.Join(t.TempDir(), "backup.db")
	if out := capstanOut(t, "etcd", "snapshot", "save", "--data-dir", filepath.Join(dir, "etcd"), snap); !strings.Contains(out, "wrote "+snap) {
		t.Fatalf("snapshot save: %s", out)
	}
	if _, err := s.client().CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("after-snapshot")}); err != nil {
		t.Fatal(err)
	}
	s.stopTERM(t)

	// Into a new server's data dir, with the secrets key.
	restored := t.TempDir()
	if out := capstanOut(t, "etcd", "snapshot", "restore", "--data-dir", filepath.Join(restored, "etcd"), snap); !strings.Contains(out, "restored "+snap) {
		t.Fatalf("snapshot restore: %s", out)
	}
	key, err := os.ReadFile(filepath.Join(dir, "secrets.key"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(restored, "secrets.key"), key, 0o600); err != nil {
		t.Fatal(err)
	}
	r := startServerProcess(t, freeAddr(t), "--data-dir", restored, "--provisioner", "none")
	b.present(t, r.client(), "server on the restored data dir")
	if _, err := r.client().CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("after-restore")}); err != nil {
		t.Fatalf("a write on the restored data: %v", err)
	}
	r.stopTERM(t)

	// As the one member of a new capstan etcd cluster.
	caDir := filepath.Join(t.TempDir(), "ca")
	capstanOut(t, "etcd", "ca", "--dir", caDir)
	m := &clusterMember{name: "r1", dir: t.TempDir(), listen: freeAddr(t), peer: freeAddr(t)}
	initial := "r1=https://" + m.peer
	capstanOut(t, "etcd", "snapshot", "restore", "--data-dir", m.dir, "--name", "r1", "--initial-cluster", initial, snap)
	m.start(t, caDir, initial, "new")
	m.awaitReady(t)
	tlsDir := filepath.Join(m.dir, "tls")
	e := startServerProcess(t, freeAddr(t), "--data-dir", t.TempDir(), "--etcd-endpoints", "https://"+m.listen,
		"--etcd-cacert", filepath.Join(tlsDir, "ca.crt"), "--etcd-cert", filepath.Join(tlsDir, "client.crt"), "--etcd-key", filepath.Join(tlsDir, "client.key"),
		"--secrets-key-file", filepath.Join(dir, "secrets.key"))
	b.present(t, e.client(), "server on a capstan etcd member restored from the snapshot")
	e.stopTERM(t)
	m.p.stop(t)

	capstanFails(t, "move it aside first", "etcd", "snapshot", "restore", "--data-dir", filepath.Join(restored, "etcd"), snap)
	capstanFails(t, "--data-dir is required", "etcd", "snapshot", "restore", snap)
	capstanFails(t, "no such file", "etcd", "snapshot", "restore", "--data-dir", t.TempDir(), filepath.Join(t.TempDir(), "none.db"))
	capstanFails(t, "does not name this member", "etcd", "snapshot", "restore", "--data-dir", t.TempDir(), "--name", "x", "--initial-cluster", initial, snap)
	capstanFails(t, "needs --name", "etcd", "snapshot", "restore", "--data-dir", t.TempDir(), "--initial-cluster", initial, snap)
}
