package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/agent/daemonnet"
	"github.com/capstanhq/capstan/internal/coverage"
	"github.com/capstanhq/capstan/internal/provision/local"
	"github.com/capstanhq/capstan/internal/runtime/docker"
	"github.com/capstanhq/capstan/internal/server"
	"github.com/capstanhq/capstan/internal/testenv"
)

// Container labels the agent sets (internal/agent/engine, daemonnet).
const (
	labelCluster  = "com.capstan.cluster"
	labelInstance = "com.capstan.instance"
	labelTaskArn  = "com.capstan.task-arn"
	labelRole     = "com.capstan.role"
	labelName     = "com.capstan.container-name"
)

// loop is what every daemon and application container runs: it idles and
// leaves at once on SIGTERM.
var loop = []string{"sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"}

// bench is the running fixture: a server with the local provisioner.
type bench struct {
	o        options
	out      io.Writer
	rt       *docker.Runtime
	srv      *server.Server
	cfg      server.Config
	c        *ecs.Client
	ev       *coverage.Client
	image    string
	bin      string
	clusters []string
	closeLog func()
	// histories are the clusters' records as read, for -events.
	histories []*coverage.History
}

func newBench(ctx context.Context, o options, out io.Writer, rt *docker.Runtime, work string) (*bench, error) {
	b := &bench{o: o, out: out, rt: rt, bin: o.binary}
	ictx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	img, err := testenv.EnsureBusyboxImage(ictx, rt)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("busybox image: %w", err)
	}
	b.image = img
	if b.bin == "" {
		b.bin = filepath.Join(work, "capstan")
		fmt.Fprintf(out, "building %s (CGO_ENABLED=0)...\n", b.bin)
		cmd := exec.CommandContext(ctx, "go", "build", "-o", b.bin, "github.com/capstanhq/capstan/cmd/capstan")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("go build ./cmd/capstan: %w", err)
		}
	}
	log, closeLog, err := serverLogger(o.serverLog)
	if err != nil {
		return nil, err
	}
	b.closeLog = closeLog
	b.cfg = server.Config{
		Listen:      "127.0.0.1:0",
		DataDir:     filepath.Join(work, "server"),
		Region:      "us-east-1",
		AccountID:   "123456789012",
		AdminKeyID:  "AKIDCAPSTANBENCH",
		AdminSecret: "capstan-bench-secret",
		Provisioner: "local",
		AgentBinary: b.bin,
		AgentEnv:    map[string]string{"ECS_IMAGE_PULL_BEHAVIOR": "prefer-cached", "ECS_CONTAINER_STOP_TIMEOUT": "5s"},
		Log:         log,
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	b.srv, err = server.Start(sctx, b.cfg)
	cancel()
	if err != nil {
		closeLog()
		return nil, fmt.Errorf("start server: %w", err)
	}
	url := "http://" + b.srv.Addr
	hc := awshttp.NewBuildableClient()
	b.c = ecs.New(ecs.Options{
		Region:           "us-east-1",
		BaseEndpoint:     aws.String(url),
		Credentials:      credentials.NewStaticCredentialsProvider(b.cfg.AdminKeyID, b.cfg.AdminSecret, ""),
		HTTPClient:       inMemoryBody{hc},
		RetryMaxAttempts: 3,
	})
	b.ev = coverage.NewClient(url, aws.Credentials{AccessKeyID: b.cfg.AdminKeyID, SecretAccessKey: b.cfg.AdminSecret}, &http.Client{Timeout: time.Minute})
	fmt.Fprintf(out, "server %s, local instances from %s\n", url, b.bin)
	return b, nil
}

// inMemoryBody hands net/http the request body as a bytes.Reader: with
// smithy-go's own body a connection can be dropped under a fast answer
// (bench/api describes the race), and polls here are many.
type inMemoryBody struct{ next ecs.HTTPClient }

func (c inMemoryBody) Do(req *http.Request) (*http.Response, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return c.next.Do(req)
	}
	b, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, fmt.Errorf("buffer request body: %w", err)
	}
	r := req.Clone(req.Context())
	r.Body = io.NopCloser(bytes.NewReader(b))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	r.ContentLength = int64(len(b))
	return c.next.Do(r)
}

// cleanup stops the server, terminates every instance left through the
// local provisioner (agent process, containers, daemon network), and
// removes whatever else of the run's clusters is still in Docker.
func (b *bench) cleanup(ctx context.Context) Cleanup {
	var c Cleanup
	fail := func(format string, args ...any) { c.Errors = append(c.Errors, fmt.Sprintf(format, args...)) }
	if err := b.srv.Close(); err != nil {
		fail("stop server: %v", err)
	}
	if b.o.agentLogs != "" {
		b.copyAgentLogs(b.o.agentLogs)
	}
	b.closeLog()
	p, err := local.New(b.bin, filepath.Join(b.cfg.DataDir, "instances"), b.rt, slog.New(slog.DiscardHandler))
	if err != nil {
		fail("local provisioner: %v", err)
	} else if handles, err := p.Handles(); err != nil && !errors.Is(err, os.ErrNotExist) {
		fail("list instances: %v", err)
	} else {
		for _, h := range handles {
			tctx, cancel := context.WithTimeout(ctx, time.Minute)
			if err := p.Terminate(tctx, h); err != nil {
				fail("terminate %s: %v", h, err)
			} else {
				c.Terminated++
			}
			cancel()
		}
	}
	for _, cl := range b.clusters {
		cs, err := b.rt.List(ctx, map[string]string{labelCluster: cl})
		if err != nil {
			fail("list containers of %s: %v", cl, err)
			continue
		}
		for _, ct := range cs {
			if err := b.rt.Remove(ctx, ct.ID); err != nil {
				fail("remove container %s: %v", ct.Name, err)
			} else {
				c.Containers++
			}
		}
		nets, err := b.rt.Networks(ctx, map[string]string{labelCluster: cl, labelRole: daemonnet.RoleNetwork})
		if err != nil {
			fail("list networks of %s: %v", cl, err)
			continue
		}
		for _, n := range nets {
			if err := daemonnet.Remove(ctx, b.rt, n.Labels[labelInstance]); err != nil {
				fail("remove network %s: %v", n.Name, err)
			} else {
				c.Networks++
			}
		}
	}
	return c
}

func randomID(n int) string {
	buf := make([]byte, (n+1)/2)
	rand.Read(buf)
	return hex.EncodeToString(buf)[:n]
}

// until polls cond every -poll until it holds or timeout passes.
func (b *bench) until(ctx context.Context, timeout time.Duration, what string, cond func(context.Context) (bool, error)) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		ok, err := cond(ctx)
		if err == nil && ok {
			return nil
		}
		if err != nil {
			last = err
		}
		if time.Now().After(deadline) {
			if last != nil {
				return fmt.Errorf("%s: not within %s (last error: %w)", what, timeout, last)
			}
			return fmt.Errorf("%s: not within %s", what, timeout)
		}
		if err := sleep(ctx, b.o.poll); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
}

func (b *bench) cluster(ctx context.Context, prefix string) (string, error) {
	name := prefix + "-" + randomID(6)
	if _, err := b.c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String(name)}); err != nil {
		return "", fmt.Errorf("create cluster: %w", err)
	}
	b.clusters = append(b.clusters, name)
	return name, nil
}

// capacityProvider makes a managed-instances capacity provider whose
// instances have 1 vCPU and 1024 MiB.
func (b *bench) capacityProvider(ctx context.Context, cluster, name string, scaleInAfter int32) (string, error) {
	out, err := b.c.CreateCapacityProvider(ctx, &ecs.CreateCapacityProviderInput{Name: aws.String(name), Cluster: aws.String(cluster),
		ManagedInstancesProvider: &types.CreateManagedInstancesProviderConfiguration{
			InfrastructureRoleArn:      aws.String("arn:aws:iam::123456789012:role/capstan"),
			InfrastructureOptimization: &types.InfrastructureOptimization{ScaleInAfter: aws.Int32(scaleInAfter)},
			InstanceLaunchTemplate: &types.InstanceLaunchTemplate{Ec2InstanceProfileArn: aws.String("arn:aws:iam::123456789012:instance-profile/capstan"),
				NetworkConfiguration: &types.ManagedInstancesNetworkConfiguration{Subnets: []string{"local"}},
				InstanceRequirements: &types.InstanceRequirementsRequest{VCpuCount: &types.VCpuCountRangeRequest{Min: aws.Int32(1)},
					MemoryMiB: &types.MemoryMiBRequest{Min: aws.Int32(1024)}}}}})
	if err != nil {
		return "", fmt.Errorf("create capacity provider %s: %w", name, err)
	}
	return aws.ToString(out.CapacityProvider.CapacityProviderArn), nil
}

// daemonTaskDefinition registers a revision of the daemon task definition
// family: one container running loop (32 MiB), with VERSION=version in its
// environment so that each revision differs from the one before.
func (b *bench) daemonTaskDefinition(ctx context.Context, family, version string) (string, error) {
	td, err := b.c.RegisterDaemonTaskDefinition(ctx, &ecs.RegisterDaemonTaskDefinitionInput{Family: aws.String(family),
		ContainerDefinitions: []types.DaemonContainerDefinition{{Name: aws.String(family), Image: aws.String(b.image), Memory: aws.Int32(32),
			Command: loop, Environment: []types.KeyValuePair{{Name: aws.String("VERSION"), Value: aws.String(version)}}}}})
	if err != nil {
		return "", fmt.Errorf("register daemon task definition %s: %w", family, err)
	}
	return aws.ToString(td.DaemonTaskDefinitionArn), nil
}

// daemon creates a critical daemon of task definition td on one capacity
// provider.
func (b *bench) daemon(ctx context.Context, cluster, name, td, cpName, cpArn string) (coverage.Daemon, error) {
	created := time.Now()
	out, err := b.c.CreateDaemon(ctx, &ecs.CreateDaemonInput{DaemonName: aws.String(name), ClusterArn: aws.String(cluster),
		DaemonTaskDefinitionArn: aws.String(td), CapacityProviderArns: []string{cpArn}, Critical: aws.Bool(true)})
	if err != nil {
		return coverage.Daemon{}, fmt.Errorf("create daemon %s: %w", name, err)
	}
	return coverage.Daemon{Name: name, Arn: aws.ToString(out.DaemonArn), Critical: true, CPs: []string{cpName}, Created: created}, nil
}

// waitDeployment waits for a daemon's deployment to finish.
func (b *bench) waitDeployment(ctx context.Context, daemonArn string, timeout time.Duration) error {
	return b.until(ctx, timeout, "daemon deployment finished", func(ctx context.Context) (bool, error) {
		d, err := b.c.DescribeDaemon(ctx, &ecs.DescribeDaemonInput{DaemonArn: aws.String(daemonArn)})
		if err != nil {
			return false, err
		}
		dep, err := b.c.DescribeDaemonDeployments(ctx, &ecs.DescribeDaemonDeploymentsInput{DaemonDeploymentArns: []string{aws.ToString(d.Daemon.DeploymentArn)}})
		if err != nil || len(dep.DaemonDeployments) == 0 {
			return false, err
		}
		return dep.DaemonDeployments[0].Status == types.DaemonDeploymentStatusSuccessful, nil
	})
}

func (b *bench) taskDefinition(ctx context.Context, family string, memory int32) (string, error) {
	out, err := b.c.RegisterTaskDefinition(ctx, &ecs.RegisterTaskDefinitionInput{Family: aws.String(family),
		ContainerDefinitions: []types.ContainerDefinition{{Name: aws.String(family), Image: aws.String(b.image), Memory: aws.Int32(memory),
			Essential: aws.Bool(true), Command: loop}}})
	if err != nil {
		return "", fmt.Errorf("register task definition %s: %w", family, err)
	}
	return aws.ToString(out.TaskDefinition.TaskDefinitionArn), nil
}

func (b *bench) task(ctx context.Context, cluster, arn string) (types.Task, error) {
	out, err := b.c.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: aws.String(cluster), Tasks: []string{arn}})
	if err != nil {
		return types.Task{}, err
	}
	if len(out.Tasks) != 1 {
		return types.Task{}, fmt.Errorf("task %s: %+v", arn, out.Failures)
	}
	return out.Tasks[0], nil
}

func (b *bench) instance(ctx context.Context, cluster, arn string) (types.ContainerInstance, error) {
	out, err := b.c.DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{Cluster: aws.String(cluster), ContainerInstances: []string{arn}})
	if err != nil {
		return types.ContainerInstance{}, err
	}
	if len(out.ContainerInstances) != 1 {
		return types.ContainerInstance{}, fmt.Errorf("instance %s: %+v", arn, out.Failures)
	}
	return out.ContainerInstances[0], nil
}

// instances lists a capacity provider's instances that are not INACTIVE.
func (b *bench) instances(ctx context.Context, cluster, cp string) ([]types.ContainerInstance, error) {
	list, err := b.c.ListContainerInstances(ctx, &ecs.ListContainerInstancesInput{Cluster: aws.String(cluster)})
	if err != nil || len(list.ContainerInstanceArns) == 0 {
		return nil, err
	}
	out, err := b.c.DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{Cluster: aws.String(cluster), ContainerInstances: list.ContainerInstanceArns})
	if err != nil {
		return nil, err
	}
	var cis []types.ContainerInstance
	for _, ci := range out.ContainerInstances {
		if aws.ToString(ci.CapacityProviderName) == cp {
			cis = append(cis, ci)
		}
	}
	return cis, nil
}

// tasks describes the tasks ListTasks names for in (desired RUNNING unless
// it says otherwise).
func (b *bench) tasks(ctx context.Context, in *ecs.ListTasksInput) ([]types.Task, error) {
	list, err := b.c.ListTasks(ctx, in)
	if err != nil || len(list.TaskArns) == 0 {
		return nil, err
	}
	var out []types.Task
	for i := 0; i < len(list.TaskArns); i += 100 {
		d, err := b.c.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: in.Cluster, Tasks: list.TaskArns[i:min(i+100, len(list.TaskArns))]})
		if err != nil {
			return nil, err
		}
		out = append(out, d.Tasks...)
	}
	return out, nil
}

// running keeps the tasks whose last status is RUNNING.
func running(ts []types.Task) []types.Task {
	var out []types.Task
	for _, t := range ts {
		if aws.ToString(t.LastStatus) == "RUNNING" {
			out = append(out, t)
		}
	}
	return out
}

// copyAgentLogs copies every instance's agent.log into dir, so that the
// logs outlive their instances (terminating one deletes its directory).
func (b *bench) copyAgentLogs(dir string) {
	root := filepath.Join(b.cfg.DataDir, "instances")
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range entries {
		src := filepath.Join(root, e.Name(), "agent.log")
		data, err := os.ReadFile(src)
		if err != nil {
			continue
		}
		dst := filepath.Join(dir, e.Name()+".log")
		if st, err := os.Stat(dst); err == nil && st.Size() >= int64(len(data)) {
			continue
		}
		os.WriteFile(dst, data, 0o644)
	}
}

// keepAgentLogs runs copyAgentLogs every 200 ms until ctx ends.
func (b *bench) keepAgentLogs(ctx context.Context, dir string) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			b.copyAgentLogs(dir)
		}
	}
}
