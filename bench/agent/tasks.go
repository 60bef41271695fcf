package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/capstanhq/capstan/bench/internal/benchkit"
	"github.com/capstanhq/capstan/internal/agent/daemonnet"
)

// runTasks starts n tasks (up to 10 per RunTask, as ECS allows) and waits
// until all are RUNNING.
func (b *bench) runTasks(ctx context.Context, n int) ([]string, error) {
	var arns []string
	for left := n; left > 0; left -= 10 {
		out, err := b.ecs.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String(b.cluster), TaskDefinition: aws.String(b.td), Count: aws.Int32(int32(min(10, left)))})
		if err != nil {
			return arns, fmt.Errorf("RunTask: %w", err)
		}
		if len(out.Failures) > 0 {
			return arns, fmt.Errorf("RunTask: %s: %s", aws.ToString(out.Failures[0].Arn), aws.ToString(out.Failures[0].Reason))
		}
		for _, t := range out.Tasks {
			arns = append(arns, aws.ToString(t.TaskArn))
		}
	}
	return arns, b.waitAll(ctx, arns, "RUNNING", 3*time.Minute)
}

// waitAll polls until every task reports status.
func (b *bench) waitAll(ctx context.Context, arns []string, status string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pending := slices.Clone(arns)
	for len(pending) > 0 {
		if err := b.agent.alive(); err != nil {
			return err
		}
		var still []string
		for chunk := range slices.Chunk(pending, 100) {
			out, err := b.ecs.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: aws.String(b.cluster), Tasks: chunk})
			if err != nil {
				return fmt.Errorf("wait for %s: %w", status, err)
			}
			for _, t := range out.Tasks {
				last := aws.ToString(t.LastStatus)
				switch {
				case last == status:
				case last == "STOPPED":
					return fmt.Errorf("task %s stopped while waiting for %s: %s", aws.ToString(t.TaskArn), status, stopReason(t))
				default:
					still = append(still, aws.ToString(t.TaskArn))
				}
			}
			if len(out.Failures) > 0 {
				return fmt.Errorf("wait for %s: %s: %s", status, aws.ToString(out.Failures[0].Arn), aws.ToString(out.Failures[0].Reason))
			}
		}
		pending = still
		if len(pending) > 0 {
			if err := benchkit.Sleep(ctx, 50*time.Millisecond); err != nil {
				return fmt.Errorf("%d tasks not %s after %s: %w", len(pending), status, timeout, err)
			}
		}
	}
	return nil
}

func stopReason(t types.Task) string {
	r := aws.ToString(t.StoppedReason)
	for _, c := range t.Containers {
		if c.Reason != nil {
			r += "; " + aws.ToString(c.Name) + ": " + aws.ToString(c.Reason)
		}
	}
	return r
}

// stopTasks stops the tasks, waits for STOPPED, and removes their
// containers at once rather than after the agent's cleanup wait.
func (b *bench) stopTasks(ctx context.Context, arns []string) error {
	for _, arn := range arns {
		if _, err := b.ecs.StopTask(ctx, &ecs.StopTaskInput{Cluster: aws.String(b.cluster), Task: aws.String(arn), Reason: aws.String("bench/agent")}); err != nil {
			return fmt.Errorf("StopTask: %w", err)
		}
	}
	if err := b.waitAll(ctx, arns, "STOPPED", 2*time.Minute); err != nil {
		return err
	}
	for _, arn := range arns {
		if err := b.removeLabeled(ctx, labelTaskArn+"="+arn); err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) removeLabeled(ctx context.Context, label string) error {
	res, err := b.dc.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("label", label)})
	if err != nil {
		return fmt.Errorf("list containers %s: %w", label, err)
	}
	for _, c := range res.Items {
		if _, err := b.dc.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true}); err != nil && !isNotFound(err) {
			return fmt.Errorf("remove container %s: %w", c.ID, err)
		}
	}
	return nil
}

// removeAll removes every container of the cluster, task or raw, whatever
// its state.
func (b *bench) removeAll(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if b.agent != nil {
		b.agent.stop() // first, so it does not restart or report what goes
	}
	if err := b.removeLabeled(ctx, labelCluster+"="+b.cluster); err != nil {
		fmt.Fprintln(os.Stderr, "bench/agent: cleanup:", err)
	}
	// The agent's instance network (and its firewall rules) outlive the
	// agent's process.
	nets, err := b.rt.Networks(ctx, map[string]string{labelCluster: b.cluster})
	for _, n := range nets {
		if err == nil {
			err = daemonnet.Remove(ctx, b.rt, n.Labels[labelInstance])
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/agent: cleanup of the instance network:", err)
	}
}

func isNotFound(err error) bool { return cerrdefs.IsNotFound(err) }
