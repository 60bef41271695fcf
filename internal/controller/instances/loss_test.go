package instances_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/provision"
	simprov "github.com/capstanhq/capstan/internal/provision/sim"
)

// Young instances that worked (ACTIVE, their tasks running) and are lost
// together are not failed launches: their replacements go out at once,
// not one at a time after a backoff.
func TestYoungInstancesLostTogetherAreReplacedTogether(t *testing.T) {
	ctx := context.Background()
	var prov *simprov.Provisioner
	c, big := bigTaskServer(t, time.Second, func(p *simprov.Provisioner) provision.Provisioner { prov = p; return p })
	if _, err := c.CreateService(ctx, &ecs.CreateServiceInput{Cluster: aws.String("sim"), ServiceName: aws.String("web"),
		TaskDefinition: big, DesiredCount: aws.Int32(4),
		CapacityProviderStrategy: []types.CapacityProviderStrategyItem{{CapacityProvider: aws.String("hollow")}}}); err != nil {
		t.Fatal(err)
	}
	waitServiceOn(t, c, 4)
	before := prov.Handles()
	if len(before) != 4 {
		t.Fatalf("4 tasks that each fill an instance: the provisioner holds %v", before)
	}
	for _, h := range before {
		if err := prov.Kill(h); err != nil {
			t.Fatal(err)
		}
	}
	// A launch backoff would hold the first replacement 40 s (four
	// failures: 5 s doubled three times) and send the rest one at a time;
	// a loss seen only by a later pass took 20 s. Both are well past 15 s.
	killed := time.Now()
	for {
		var fresh []string
		for _, h := range prov.Handles() {
			if !slices.Contains(before, h) && prov.InstanceArn(h) != "" {
				fresh = append(fresh, h)
			}
		}
		if len(fresh) == 4 {
			t.Logf("4 replacements registered %.1fs after the loss", time.Since(killed).Seconds())
			break
		}
		if time.Since(killed) > 15*time.Second {
			t.Fatalf("%d of 4 replacements registered 15 s after the loss", len(fresh))
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitServiceOn(t, c, 4)
	stopped, err := c.ListTasks(ctx, &ecs.ListTasksInput{Cluster: aws.String("sim"), ServiceName: aws.String("web"), DesiredStatus: types.DesiredStatusStopped})
	if err != nil || len(stopped.TaskArns) != 4 {
		t.Fatalf("stopped tasks of web: %v %v, want the 4 of the lost instances", stopped, err)
	}
	out, err := c.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: aws.String("sim"), Tasks: stopped.TaskArns})
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range out.Tasks {
		if tk.StopCode != types.TaskStopCodeInfrastructureHealth {
			t.Errorf("task of a lost instance stopped with %q (%s), want InfrastructureHealth", tk.StopCode, aws.ToString(tk.StoppedReason))
		}
	}
}

// dyingProvisioner's instances, once it is set dying, die as they boot.
type dyingProvisioner struct {
	*simprov.Provisioner
	mu       sync.Mutex
	dying    bool
	launches []time.Time // while dying, when each launch returned
}

func (d *dyingProvisioner) setDying() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dying = true
}

func (d *dyingProvisioner) launched() []time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.launches)
}

func (d *dyingProvisioner) Launch(ctx context.Context, req provision.Request) (string, error) {
	h, err := d.Provisioner.Launch(ctx, req)
	d.mu.Lock()
	dying := d.dying
	if dying && err == nil {
		d.launches = append(d.launches, time.Now())
	}
	d.mu.Unlock()
	if dying && err == nil {
		go d.Provisioner.Kill(h)
	}
	return h, err
}

func (d *dyingProvisioner) LaunchBatch(ctx context.Context, reqs []provision.Request) []provision.Launched {
	return provision.LaunchEach(ctx, d, reqs)
}

// Instances that die before they were ever ACTIVE are failed launches,
// and launches back off, however many healthy instances launched before
// the failures the capacity provider has.
func TestLaunchesThatDieInBootBackOff(t *testing.T) {
	var dp *dyingProvisioner
	c, big := bigTaskServer(t, time.Second, func(p *simprov.Provisioner) provision.Provisioner {
		dp = &dyingProvisioner{Provisioner: p}
		return dp
	})
	healthy := runHollow(t, c, big, 3)
	waitRunningOn(t, c, healthy, 3, time.Minute)
	dp.setDying()
	runHollow(t, c, big, 1)
	// One task waits, so each launch after the first answers the death of
	// the one before, at least the backoff later: 5 s, then 10 s. The
	// backoff counts from when the controller saw the death, after the
	// launch returned, so load only widens the gaps (as does a probe held
	// while the healthy instances are young). Without a backoff a launch
	// followed each death within a pass (about a second).
	deadline := time.Now().Add(2 * time.Minute)
	var at []time.Time
	for at = dp.launched(); len(at) < 3; at = dp.launched() {
		if time.Now().After(deadline) {
			t.Fatalf("%d launches in 2 minutes of instances that die as they boot, want 3", len(at))
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i, backoff := range []time.Duration{5 * time.Second, 10 * time.Second} {
		// Less a second: the margin is for a launch's own time, should
		// the backoff count from its start.
		if gap := at[i+1].Sub(at[i]); gap < backoff-time.Second {
			t.Errorf("launch %d came %.1fs after launch %d died, want at least the backoff of %s", i+2, gap.Seconds(), i+1, backoff)
		}
	}
}

// waitServiceOn waits for service web's tasks to run on want instances.
func waitServiceOn(t *testing.T, c *ecs.Client, want int) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(time.Minute)
	for {
		list, err := c.ListTasks(ctx, &ecs.ListTasksInput{Cluster: aws.String("sim"), ServiceName: aws.String("web"), DesiredStatus: types.DesiredStatusRunning})
		if err != nil {
			t.Fatal(err)
		}
		on := runningOn(t, c, list.TaskArns)
		if on == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("service web runs on %d instances after a minute, want %d", on, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
