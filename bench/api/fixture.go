// The daemons the benchmark works on and the calls it makes on them.

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/capstanhq/capstan/bench/internal/benchkit"
)

// fixture is what the scenarios run against.
type fixture struct {
	cluster   string // ARN
	cp        string // ARN
	td        string // ARN
	daemons   []string
	runID     string
	setupTime time.Duration
}

func setup(ctx context.Context, c *ecs.Client, clients []*ecs.Client, n int) (*fixture, error) {
	start := time.Now()
	f := &fixture{runID: benchkit.RandomID(6)}
	cl, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("bench-" + f.runID)})
	if err != nil {
		return nil, fmt.Errorf("create cluster: %w", err)
	}
	f.cluster = aws.ToString(cl.Cluster.ClusterArn)
	cp, err := c.CreateCapacityProvider(ctx, &ecs.CreateCapacityProviderInput{
		Name:    aws.String("bench-mi-" + f.runID),
		Cluster: aws.String(f.cluster),
		ManagedInstancesProvider: &types.CreateManagedInstancesProviderConfiguration{
			InfrastructureRoleArn: aws.String("arn:aws:iam::123456789012:role/capstan"),
			InstanceLaunchTemplate: &types.InstanceLaunchTemplate{
				Ec2InstanceProfileArn: aws.String("arn:aws:iam::123456789012:instance-profile/capstan"),
				NetworkConfiguration:  &types.ManagedInstancesNetworkConfiguration{Subnets: []string{"subnet-local"}},
			},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("create capacity provider: %w", err)
	}
	f.cp = aws.ToString(cp.CapacityProvider.CapacityProviderArn)
	td, err := c.RegisterDaemonTaskDefinition(ctx, &ecs.RegisterDaemonTaskDefinitionInput{
		Family: aws.String("bench-agent-" + f.runID),
		Cpu:    aws.String("256"),
		Memory: aws.String("128"),
		ContainerDefinitions: []types.DaemonContainerDefinition{{
			Name:  aws.String("agent"),
			Image: aws.String("capstan/busybox:bench"),
		}},
	})
	if err != nil {
		return nil, fmt.Errorf("register daemon task definition: %w", err)
	}
	f.td = aws.ToString(td.DaemonTaskDefinitionArn)

	// Create the daemons from a few clients at once.
	f.daemons = make([]string, n)
	deps := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	next := make(chan int)
	for w := range min(16, len(clients), n) {
		wg.Go(func() {
			for i := range next {
				out, err := clients[w].CreateDaemon(ctx, f.createInput(fmt.Sprintf("d-%05d", i)))
				if err != nil {
					errs[i] = err
					continue
				}
				f.daemons[i], deps[i] = aws.ToString(out.DaemonArn), aws.ToString(out.DeploymentArn)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("create daemons: %w", err)
	}
	// Let the controller finish the initial deployments so it is idle when
	// the first scenario starts.
	if err := waitDeployments(ctx, c, deps); err != nil {
		return nil, err
	}
	f.setupTime = time.Since(start)
	return f, nil
}

func (f *fixture) createInput(name string) *ecs.CreateDaemonInput {
	return &ecs.CreateDaemonInput{
		DaemonName:              aws.String(name),
		ClusterArn:              aws.String(f.cluster),
		DaemonTaskDefinitionArn: aws.String(f.td),
		CapacityProviderArns:    []string{f.cp},
	}
}

func waitDeployments(ctx context.Context, c *ecs.Client, arns []string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	pending := slices.Clone(arns)
	for len(pending) > 0 {
		var still []string
		for chunk := range slices.Chunk(pending, 20) {
			out, err := c.DescribeDaemonDeployments(ctx, &ecs.DescribeDaemonDeploymentsInput{DaemonDeploymentArns: chunk})
			if err != nil {
				return fmt.Errorf("wait for deployments: %w", err)
			}
			for _, d := range out.DaemonDeployments {
				switch d.Status {
				case types.DaemonDeploymentStatusSuccessful, types.DaemonDeploymentStatusStopped,
					types.DaemonDeploymentStatusRollbackSuccessful, types.DaemonDeploymentStatusRollbackFailed:
				default:
					still = append(still, aws.ToString(d.DaemonDeploymentArn))
				}
			}
			if len(out.Failures) > 0 {
				return fmt.Errorf("wait for deployments: %s: %s", aws.ToString(out.Failures[0].Arn), aws.ToString(out.Failures[0].Reason))
			}
		}
		pending = still
		if len(pending) > 0 {
			if err := benchkit.Sleep(ctx, 100*time.Millisecond); err != nil {
				return fmt.Errorf("wait for %d deployments: %w", len(pending), err)
			}
		}
	}
	return nil
}

// countDaemons pages through the cluster's daemons.
func countDaemons(ctx context.Context, c *ecs.Client, cluster string) (int, error) {
	n := 0
	in := &ecs.ListDaemonsInput{ClusterArn: aws.String(cluster), MaxResults: aws.Int32(100)}
	for {
		out, err := c.ListDaemons(ctx, in)
		if err != nil {
			return 0, err
		}
		n += len(out.DaemonSummariesList)
		if aws.ToString(out.NextToken) == "" {
			return n, nil
		}
		in.NextToken = out.NextToken
	}
}

// settle waits until the deletes of a churn scenario have been carried out
// by the controller, so the next scenario starts against a quiet server.
func settle(ctx context.Context, c *ecs.Client, f *fixture, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		n, err := countDaemons(ctx, c, f.cluster)
		if err != nil {
			return time.Since(start), fmt.Errorf("settle: %w", err)
		}
		if n <= len(f.daemons) {
			return time.Since(start), nil
		}
		if err := benchkit.Sleep(ctx, 100*time.Millisecond); err != nil {
			return time.Since(start), fmt.Errorf("settle: %d daemons still listed, want %d: %w", n, len(f.daemons), err)
		}
	}
}

func describeWorkload(f *fixture) workload {
	return func(ctx context.Context, _, _ int, c *ecs.Client, r *recorder) {
		arn := f.daemons[mrand.IntN(len(f.daemons))]
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		t0 := time.Now()
		out, err := c.DescribeDaemon(cctx, &ecs.DescribeDaemonInput{DaemonArn: aws.String(arn)})
		d := time.Since(t0)
		cancel()
		if err == nil && (out.Daemon == nil || aws.ToString(out.Daemon.DaemonArn) != arn) {
			err = fmt.Errorf("DescribeDaemon %s returned another daemon", arn)
		}
		r.add(opDescribe, t0, d, err)
	}
}

func listWorkload(f *fixture) workload {
	want := min(100, len(f.daemons))
	return func(ctx context.Context, _, _ int, c *ecs.Client, r *recorder) {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		t0 := time.Now()
		out, err := c.ListDaemons(cctx, &ecs.ListDaemonsInput{ClusterArn: aws.String(f.cluster), MaxResults: aws.Int32(100)})
		d := time.Since(t0)
		cancel()
		if err == nil && len(out.DaemonSummariesList) != want {
			err = fmt.Errorf("ListDaemons returned %d daemons, want %d", len(out.DaemonSummariesList), want)
		}
		r.add(opList, t0, d, err)
	}
}

// churnWorkload creates a uniquely named daemon and deletes it at once.
func churnWorkload(f *fixture, tag string) workload {
	return func(ctx context.Context, worker, iter int, c *ecs.Client, r *recorder) {
		name := fmt.Sprintf("churn-%s-w%d-%d", tag, worker, iter)
		cctx, cancel := context.WithTimeout(ctx, 2*callTimeout)
		defer cancel()
		t0 := time.Now()
		out, err := c.CreateDaemon(cctx, f.createInput(name))
		t1 := time.Now()
		r.add(opCreate, t0, t1.Sub(t0), err)
		if err != nil {
			r.add(opPair, t0, t1.Sub(t0), err)
			return
		}
		_, err = c.DeleteDaemon(cctx, &ecs.DeleteDaemonInput{DaemonArn: out.DaemonArn})
		t2 := time.Now()
		// Dropped together with its pair when the pair began in warm-up.
		if !t0.Before(r.measureFrom) {
			r.add(opDelete, t1, t2.Sub(t1), err)
		}
		r.add(opPair, t0, t2.Sub(t0), err)
	}
}

// cleanup deletes what the run created on an external server; the
// deletes settle in the background.
func cleanup(ctx context.Context, clients []*ecs.Client, f *fixture, stdout io.Writer) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	next := make(chan string)
	for w := range min(16, len(clients)) {
		wg.Go(func() {
			for arn := range next {
				if _, err := clients[w].DeleteDaemon(ctx, &ecs.DeleteDaemonInput{DaemonArn: aws.String(arn)}); err != nil {
					mu.Lock()
					failed++
					mu.Unlock()
				}
			}
		})
	}
	for _, arn := range f.daemons {
		next <- arn
	}
	close(next)
	wg.Wait()
	fmt.Fprintf(stdout, "cleanup: deleted %d daemons of %s (%d failed)\n", len(f.daemons)-failed, f.cluster, failed)
}
