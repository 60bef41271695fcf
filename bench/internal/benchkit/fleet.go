package benchkit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/moby/moby/client"

	"github.com/capstanhq/capstan/internal/agent/daemonnet"
	"github.com/capstanhq/capstan/internal/coverage"
	"github.com/capstanhq/capstan/internal/provision/local"
	"github.com/capstanhq/capstan/internal/runtime/docker"
	"github.com/capstanhq/capstan/internal/server"
	"github.com/capstanhq/capstan/internal/testenv"
)

// Container labels the agent sets (internal/agent/engine, daemonnet).
const (
	LabelCluster  = "com.capstan.cluster"
	LabelInstance = "com.capstan.instance"
	LabelTaskArn  = "com.capstan.task-arn"
	LabelRole     = "com.capstan.role"
	LabelName     = "com.capstan.container-name"
)

// Loop is what every daemon and application container runs: it idles and
// leaves at once on SIGTERM.
var Loop = []string{"sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"}

// FleetOptions are the flags that shape a local fleet.
type FleetOptions struct {
	// WorkPrefix names the run's temporary directory, made in DataDir
	// (default: the system temp dir).
	WorkPrefix string
	DataDir    string
	// Binary is the statically linked capstan the instances run as their
	// agent (default: CGO_ENABLED=0 go build ./cmd/capstan).
	Binary string
	// ServerLog, if set, gets the in-process server's debug log.
	ServerLog string
	// AgentLogs, if set, is a directory every instance's agent log is
	// copied into while the run lasts and at cleanup.
	AgentLogs string
	// Poll is the pause between polls in Until.
	Poll time.Duration
}

// Fleet is a running local fleet: a server in this process with the local
// provisioner, whose instances run the agent binary on the local Docker
// Engine, and clients of its API.
type Fleet struct {
	o       FleetOptions
	Out     io.Writer
	RT      *docker.Runtime
	Srv     *server.Server
	Cfg     server.Config
	C       *ecs.Client
	Ev      *coverage.Client
	Machine Machine
	Image   string
	Bin     string
	// Clusters are the clusters made by Cluster; cleanup removes what is
	// left of them in Docker.
	Clusters []string
	// Restarted are agents the program started again in place of the
	// provisioner's; cleanup reaps them.
	Restarted []*exec.Cmd

	work       string
	closeLog   func()
	stopLogs   context.CancelFunc
	cleanupCtx context.Context
	cleaned    bool
}

// OpenFleet checks the Docker Engine, describes the machine, makes the
// run's temporary directory, builds cmd/capstan (CGO_ENABLED=0) unless
// o.Binary names one, ensures the busybox image, starts the server with
// the local provisioner and, with o.AgentLogs, starts copying the agents'
// logs. Close undoes it all.
func OpenFleet(ctx context.Context, o FleetOptions, out io.Writer) (*Fleet, error) {
	rt, err := docker.New(docker.Options{})
	if err != nil {
		return nil, err
	}
	pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
	err = rt.Ping(pctx)
	pcancel()
	if err != nil {
		rt.Close()
		return nil, fmt.Errorf("the Docker Engine is required: %w", err)
	}
	f := &Fleet{o: o, Out: out, RT: rt, Bin: o.Binary, cleanupCtx: context.WithoutCancel(ctx), stopLogs: func() {}}
	f.Machine = ReadMachine(ctx, rt.Client())
	f.work, err = os.MkdirTemp(o.DataDir, o.WorkPrefix)
	if err != nil {
		rt.Close()
		return nil, err
	}
	if err := f.start(ctx); err != nil {
		os.RemoveAll(f.work)
		rt.Close()
		return nil, err
	}
	if o.AgentLogs != "" {
		if err := os.MkdirAll(o.AgentLogs, 0o755); err != nil {
			f.Close()
			return nil, err
		}
		lctx, stopLogs := context.WithCancel(ctx)
		f.stopLogs = stopLogs
		go f.KeepAgentLogs(lctx, o.AgentLogs)
	}
	return f, nil
}

func (f *Fleet) start(ctx context.Context) error {
	ictx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	img, err := testenv.EnsureBusyboxImage(ictx, f.RT)
	cancel()
	if err != nil {
		return fmt.Errorf("busybox image: %w", err)
	}
	f.Image = img
	if f.Bin == "" {
		f.Bin = filepath.Join(f.work, "capstan")
		fmt.Fprintf(f.Out, "building %s (CGO_ENABLED=0)...\n", f.Bin)
		cmd := exec.CommandContext(ctx, "go", "build", "-o", f.Bin, "github.com/capstanhq/capstan/cmd/capstan")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go build ./cmd/capstan: %w", err)
		}
	}
	log, closeLog, err := serverLogger(f.o.ServerLog)
	if err != nil {
		return err
	}
	f.closeLog = closeLog
	f.Cfg = server.Config{
		Listen:      "127.0.0.1:0",
		DataDir:     filepath.Join(f.work, "server"),
		Region:      "us-east-1",
		AccountID:   "123456789012",
		AdminKeyID:  "AKIDCAPSTANBENCH",
		AdminSecret: "capstan-bench-secret",
		Provisioner: "local",
		AgentBinary: f.Bin,
		AgentEnv:    map[string]string{"ECS_IMAGE_PULL_BEHAVIOR": "prefer-cached", "ECS_CONTAINER_STOP_TIMEOUT": "5s"},
		Log:         log,
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	f.Srv, err = server.Start(sctx, f.Cfg)
	cancel()
	if err != nil {
		closeLog()
		return fmt.Errorf("start server: %w", err)
	}
	url := "http://" + f.Srv.Addr
	hc := awshttp.NewBuildableClient()
	f.C = ecs.New(ecs.Options{
		Region:           "us-east-1",
		BaseEndpoint:     aws.String(url),
		Credentials:      credentials.NewStaticCredentialsProvider(f.Cfg.AdminKeyID, f.Cfg.AdminSecret, ""),
		HTTPClient:       InMemoryBody{hc},
		RetryMaxAttempts: 3,
	})
	f.Ev = coverage.NewClient(url, aws.Credentials{AccessKeyID: f.Cfg.AdminKeyID, SecretAccessKey: f.Cfg.AdminSecret}, &http.Client{Timeout: time.Minute})
	fmt.Fprintf(f.Out, "server %s, local instances from %s\n", url, f.Bin)
	return nil
}

// Close cleans up (printing what it removed) unless Cleanup already ran,
// stops copying agent logs, removes the temporary directory and closes
// the Docker client.
func (f *Fleet) Close() {
	if !f.cleaned {
		f.Cleanup()
	}
	f.stopLogs()
	os.RemoveAll(f.work)
	f.RT.Close()
}

// Cleanup is what the end of the run removed.
type Cleanup struct {
	Terminated int      `json:"instancesTerminated"`
	Containers int      `json:"containersRemoved"`
	Networks   int      `json:"networksRemoved"`
	Errors     []string `json:"errors,omitempty"`
}

// Cleanup stops the server, terminates every instance left through the
// local provisioner (agent process, containers, daemon network), reaps the
// agents the program restarted, and removes whatever else of the run's
// clusters is still in Docker; it prints and returns what it removed.
// Whatever happened in the run, the instances and their containers go.
func (f *Fleet) Cleanup() Cleanup {
	f.cleaned = true
	c := f.cleanup(f.cleanupCtx)
	fmt.Fprintf(f.Out, "cleanup: %d instances terminated, %d containers and %d networks removed\n",
		c.Terminated, c.Containers, c.Networks)
	for _, e := range c.Errors {
		fmt.Fprintln(f.Out, "cleanup:", e)
	}
	return c
}

func (f *Fleet) cleanup(ctx context.Context) Cleanup {
	var c Cleanup
	fail := func(format string, args ...any) { c.Errors = append(c.Errors, fmt.Sprintf(format, args...)) }
	if err := f.Srv.Close(); err != nil {
		fail("stop server: %v", err)
	}
	if f.o.AgentLogs != "" {
		f.CopyAgentLogs(f.o.AgentLogs)
	}
	f.closeLog()
	p, err := local.New(f.Bin, filepath.Join(f.Cfg.DataDir, "instances"), f.RT, slog.New(slog.DiscardHandler))
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
	for _, cmd := range f.Restarted {
		if cmd.Process != nil {
			cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, cl := range f.Clusters {
		cs, err := f.RT.List(ctx, map[string]string{LabelCluster: cl})
		if err != nil {
			fail("list containers of %s: %v", cl, err)
			continue
		}
		for _, ct := range cs {
			if err := f.RT.Remove(ctx, ct.ID); err != nil {
				fail("remove container %s: %v", ct.Name, err)
			} else {
				c.Containers++
			}
		}
		nets, err := f.RT.Networks(ctx, map[string]string{LabelCluster: cl, LabelRole: daemonnet.RoleNetwork})
		if err != nil {
			fail("list networks of %s: %v", cl, err)
			continue
		}
		for _, n := range nets {
			if err := daemonnet.Remove(ctx, f.RT, n.Labels[LabelInstance]); err != nil {
				fail("remove network %s: %v", n.Name, err)
			} else {
				c.Networks++
			}
		}
	}
	return c
}

// Machine describes where the numbers were taken.
type Machine struct {
	GOOS          string `json:"goos"`
	GOARCH        string `json:"goarch"`
	NumCPU        int    `json:"numCPU"`
	GoVersion     string `json:"goVersion"`
	CPUModel      string `json:"cpuModel,omitempty"`
	Revision      string `json:"vcsRevision,omitempty"`
	DockerVersion string `json:"dockerVersion"`
	StorageDriver string `json:"dockerStorageDriver,omitempty"`
	Containers    int    `json:"dockerContainersAtStart"`
	LoadAvgStart  string `json:"loadAvgStart,omitempty"`
	LoadAvgEnd    string `json:"loadAvgEnd,omitempty"`
}

// ReadMachine describes this machine and its Docker Engine; the revision
// falls back to git rev-parse HEAD, as go run stamps none.
func ReadMachine(ctx context.Context, dc *client.Client) Machine {
	m := Machine{GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, NumCPU: runtime.NumCPU(), GoVersion: runtime.Version(), LoadAvgStart: LoadAvg(),
		CPUModel: CPUModel(), Revision: VCSRevision()}
	if m.Revision == "" { // go run stamps no VCS information
		if out, err := exec.CommandContext(ctx, "git", "rev-parse", "HEAD").Output(); err == nil {
			m.Revision = strings.TrimSpace(string(out))
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if v, err := dc.ServerVersion(ctx, client.ServerVersionOptions{}); err == nil {
		m.DockerVersion = v.Version
	}
	if info, err := dc.Info(ctx, client.InfoOptions{}); err == nil {
		m.StorageDriver, m.Containers = info.Info.Driver, info.Info.Containers
	}
	return m
}

// serverLogger is the in-process server's logger: debug to a file, or
// nothing.
func serverLogger(path string) (*slog.Logger, func(), error) {
	if path == "" {
		return slog.New(slog.DiscardHandler), func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, err
	}
	return slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug})), func() { f.Close() }, nil
}

// Until polls cond every -poll until it holds or timeout passes.
func (f *Fleet) Until(ctx context.Context, timeout time.Duration, what string, cond func(context.Context) (bool, error)) error {
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
		if err := Sleep(ctx, f.o.Poll); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
}

func (f *Fleet) Cluster(ctx context.Context, prefix string) (string, error) {
	name := prefix + "-" + RandomHex(6)
	if _, err := f.C.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String(name)}); err != nil {
		return "", fmt.Errorf("create cluster: %w", err)
	}
	f.Clusters = append(f.Clusters, name)
	return name, nil
}

// CapacityProvider makes a managed-instances capacity provider whose
// instances have 1 vCPU and 1024 MiB.
func (f *Fleet) CapacityProvider(ctx context.Context, cluster, name string, scaleInAfter int32) (string, error) {
	out, err := f.C.CreateCapacityProvider(ctx, &ecs.CreateCapacityProviderInput{Name: aws.String(name), Cluster: aws.String(cluster),
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

// WaitDeployment waits for a daemon's deployment to finish.
func (f *Fleet) WaitDeployment(ctx context.Context, daemonArn string, timeout time.Duration) error {
	return f.Until(ctx, timeout, "daemon deployment finished", func(ctx context.Context) (bool, error) {
		d, err := f.C.DescribeDaemon(ctx, &ecs.DescribeDaemonInput{DaemonArn: aws.String(daemonArn)})
		if err != nil {
			return false, err
		}
		dep, err := f.C.DescribeDaemonDeployments(ctx, &ecs.DescribeDaemonDeploymentsInput{DaemonDeploymentArns: []string{aws.ToString(d.Daemon.DeploymentArn)}})
		if err != nil || len(dep.DaemonDeployments) == 0 {
			return false, err
		}
		return dep.DaemonDeployments[0].Status == types.DaemonDeploymentStatusSuccessful, nil
	})
}

func (f *Fleet) TaskDefinition(ctx context.Context, family string, memory int32) (string, error) {
	out, err := f.C.RegisterTaskDefinition(ctx, &ecs.RegisterTaskDefinitionInput{Family: aws.String(family),
		ContainerDefinitions: []types.ContainerDefinition{{Name: aws.String(family), Image: aws.String(f.Image), Memory: aws.Int32(memory),
			Essential: aws.Bool(true), Command: Loop}}})
	if err != nil {
		return "", fmt.Errorf("register task definition %s: %w", family, err)
	}
	return aws.ToString(out.TaskDefinition.TaskDefinitionArn), nil
}

func (f *Fleet) Task(ctx context.Context, cluster, arn string) (types.Task, error) {
	out, err := f.C.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: aws.String(cluster), Tasks: []string{arn}})
	if err != nil {
		return types.Task{}, err
	}
	if len(out.Tasks) != 1 {
		return types.Task{}, fmt.Errorf("task %s: %+v", arn, out.Failures)
	}
	return out.Tasks[0], nil
}

func (f *Fleet) Instance(ctx context.Context, cluster, arn string) (types.ContainerInstance, error) {
	out, err := f.C.DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{Cluster: aws.String(cluster), ContainerInstances: []string{arn}})
	if err != nil {
		return types.ContainerInstance{}, err
	}
	if len(out.ContainerInstances) != 1 {
		return types.ContainerInstance{}, fmt.Errorf("instance %s: %+v", arn, out.Failures)
	}
	return out.ContainerInstances[0], nil
}

// Instances lists a capacity provider's instances that are not INACTIVE.
func (f *Fleet) Instances(ctx context.Context, cluster, cp string) ([]types.ContainerInstance, error) {
	list, err := f.C.ListContainerInstances(ctx, &ecs.ListContainerInstancesInput{Cluster: aws.String(cluster)})
	if err != nil || len(list.ContainerInstanceArns) == 0 {
		return nil, err
	}
	out, err := f.C.DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{Cluster: aws.String(cluster), ContainerInstances: list.ContainerInstanceArns})
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

// Tasks describes the tasks ListTasks names for in (desired RUNNING unless
// it says otherwise).
func (f *Fleet) Tasks(ctx context.Context, in *ecs.ListTasksInput) ([]types.Task, error) {
	list, err := f.C.ListTasks(ctx, in)
	if err != nil || len(list.TaskArns) == 0 {
		return nil, err
	}
	var out []types.Task
	for i := 0; i < len(list.TaskArns); i += 100 {
		d, err := f.C.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: in.Cluster, Tasks: list.TaskArns[i:min(i+100, len(list.TaskArns))]})
		if err != nil {
			return nil, err
		}
		out = append(out, d.Tasks...)
	}
	return out, nil
}

// Running keeps the tasks whose last status is RUNNING.
func Running(ts []types.Task) []types.Task {
	var out []types.Task
	for _, t := range ts {
		if aws.ToString(t.LastStatus) == "RUNNING" {
			out = append(out, t)
		}
	}
	return out
}

// CopyAgentLogs copies every instance's agent.log into dir, so that the
// logs outlive their instances (terminating one deletes its directory).
func (f *Fleet) CopyAgentLogs(dir string) {
	root := filepath.Join(f.Cfg.DataDir, "instances")
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

// KeepAgentLogs runs CopyAgentLogs every 200 ms until ctx ends.
func (f *Fleet) KeepAgentLogs(ctx context.Context, dir string) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f.CopyAgentLogs(dir)
		}
	}
}

// WriteEvents writes every event of the histories to path, one JSON
// object a line.
func WriteEvents(path string, hs []*coverage.History) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, h := range hs {
		for _, ev := range h.Events() {
			if err := enc.Encode(ev); err != nil {
				f.Close()
				return err
			}
		}
	}
	return f.Close()
}
