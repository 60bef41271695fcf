package console_test

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/chromedp/chromedp"

	"github.com/capstanhq/capstan/internal/testenv"
	"github.com/capstanhq/capstan/internal/testenv/agents"
)

// liveState is what the daemon page shows of its rollout.
type liveState struct {
	Status  string   `json:"status"`
	Breaker string   `json:"breaker"`
	Revs    []string `json:"revs"`
	Stop    bool     `json:"stop"` // the stop button is offered
}

const liveStateJS = `({status: (document.getElementById("rollout-status") || {}).textContent || "",
	breaker: (document.getElementById("breaker") || {}).textContent || "",
	revs: [...document.querySelectorAll("#cells li")].map(e => e.dataset.revision),
	stop: !!document.getElementById("stop") && !document.getElementById("stop").disabled})`

// watch polls the page until done says so, noting every state it showed.
func watch(t *testing.T, b context.Context, what string, limit time.Duration, done func(liveState) bool) []liveState {
	t.Helper()
	var seen []liveState
	last := ""
	deadline := time.Now().Add(limit)
	for {
		s := eval[liveState](t, b, "live state", liveStateJS)
		if k := fmt.Sprint(s); k != last {
			seen, last = append(seen, s), k
		}
		if done(s) {
			return seen
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not seen within %s; states:\n%v", what, limit, seen)
		}
		time.Sleep(150 * time.Millisecond)
	}
}

var breakerCount = regexp.MustCompile(`^(\d+) of (\d+) failures`)

// TestBrowserBreakerRollsBack: in headless chromium, a daemon update to a
// revision whose container exits at once trips the circuit breaker: the
// page shows the failures rise, ROLLBACK_IN_PROGRESS, then
// ROLLBACK_SUCCESSFUL with the cells back on the old revision, live. A
// second rollout, stopped with the page's "Stop deployment" button while it
// bakes, rolls back the same way.
func TestBrowserBreakerRollsBack(t *testing.T) {
	chrome := requireChromium(t)
	rt := testenv.RequireDocker(t)
	image := testenv.BusyboxImage(t)
	dir := artifacts(t)
	srv := testenv.StartServer(t, "")
	c := srv.ECS()
	ctx := context.Background()
	if _, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("apps")}); err != nil {
		t.Fatal(err)
	}
	cp, err := c.CreateCapacityProvider(ctx, &ecs.CreateCapacityProviderInput{Name: aws.String("apps-mi"), Cluster: aws.String("apps"),
		ManagedInstancesProvider: &types.CreateManagedInstancesProviderConfiguration{
			InfrastructureRoleArn: aws.String("arn:aws:iam::123456789012:role/capstan"),
			InstanceLaunchTemplate: &types.InstanceLaunchTemplate{Ec2InstanceProfileArn: aws.String("arn:aws:iam::123456789012:instance-profile/capstan"),
				NetworkConfiguration: &types.ManagedInstancesNetworkConfiguration{Subnets: []string{"local"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	cpArn := aws.ToString(cp.CapacityProvider.CapacityProviderArn)
	register := func(version string, cmd ...string) string {
		td, err := c.RegisterDaemonTaskDefinition(ctx, &ecs.RegisterDaemonTaskDefinitionInput{Family: aws.String("agentd"),
			ContainerDefinitions: []types.DaemonContainerDefinition{{Name: aws.String("agentd"), Image: aws.String(image), Memory: aws.Int32(32),
				Command: cmd, Environment: []types.KeyValuePair{{Name: aws.String("VERSION"), Value: aws.String(version)}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return aws.ToString(td.DaemonTaskDefinitionArn)
	}
	loop := []string{"sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"}
	rev1 := register("1", loop...)
	register("2", "sh", "-c", "exit 1") // agentd:2 exits at once
	rev3 := register("3", loop...)
	d, err := c.CreateDaemon(ctx, &ecs.CreateDaemonInput{DaemonName: aws.String("agentd"), ClusterArn: aws.String("apps"),
		DaemonTaskDefinitionArn: aws.String(rev1), CapacityProviderArns: []string{cpArn}})
	if err != nil {
		t.Fatal(err)
	}
	daemonArn := aws.ToString(d.DaemonArn)
	for range 2 {
		agents.StartEnv(t, agents.EnvFor(t, srv, "apps", "apps-mi", t.TempDir()), rt)
	}
	waitFor(t, 90*time.Second, "agentd running on both instances", func() bool { return runningDaemonTasks(t, c, "agentd") == 2 })

	b := newChrome(t, chrome)
	signInBrowser(t, b, srv.URL, adminKey, adminSecret)
	page := srv.URL + "/console/daemon?arn=" + url.QueryEscape(daemonArn)
	run(t, b, "daemon page", chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS("#cells li")))
	run(t, b, "preview", chromedp.SendKeys(chromedp.ID("taskDefinition"), "agentd:2"), chromedp.Click(chromedp.ID("preview")),
		chromedp.WaitVisible(chromedp.ID("confirm")))
	run(t, b, "confirm", chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("cells")))
	eval[bool](t, b, "marker", `window.consoleMarker = "same page"; true`)

	back := func(s liveState) bool {
		return s.Status == "ROLLBACK_SUCCESSFUL" && strings.Join(s.Revs, ",") == "agentd:1,agentd:1"
	}
	shot := false
	seen := watch(t, b, "the breaker's rollback", 240*time.Second, func(s liveState) bool {
		if s.Status == "ROLLBACK_IN_PROGRESS" && !shot {
			screenshot(t, b, dir, "breaker-rolling-back")
			shot = true
		}
		return back(s)
	})
	t.Logf("states the page went through:\n%v", seen)
	if eval[string](t, b, "marker", `window.consoleMarker || ""`) != "same page" {
		t.Fatal("the daemon page was reloaded; the rollout must update in place")
	}
	// The failures rose to the threshold while the page watched, and the
	// page showed the rollback under way before it ended.
	var counts []int
	threshold, rolling := 0, false
	for _, s := range seen {
		if m := breakerCount.FindStringSubmatch(s.Breaker); m != nil && s.Status == "IN_PROGRESS" || m != nil && strings.HasPrefix(s.Status, "ROLLBACK") {
			n, _ := strconv.Atoi(m[1])
			threshold, _ = strconv.Atoi(m[2])
			if len(counts) == 0 || counts[len(counts)-1] != n {
				counts = append(counts, n)
			}
		}
		rolling = rolling || s.Status == "ROLLBACK_IN_PROGRESS"
	}
	if len(counts) < 2 || counts[len(counts)-1] < threshold || threshold == 0 {
		t.Fatalf("breaker failures seen %v against threshold %d: want a rise to it", counts, threshold)
	}
	if !rolling {
		t.Fatalf("ROLLBACK_IN_PROGRESS never shown: %v", seen)
	}
	final := seen[len(seen)-1]
	if !strings.Contains(final.Breaker, "TRIGGERED") || final.Stop {
		t.Fatalf("after the breaker's rollback: %+v", final)
	}
	screenshot(t, b, dir, "breaker-rolled-back")

	// A second rollout, baking a minute once both instances run it: the
	// button stops it and the page follows the rollback.
	if _, err := c.UpdateDaemon(ctx, &ecs.UpdateDaemonInput{DaemonArn: aws.String(daemonArn), DaemonTaskDefinitionArn: aws.String(rev3),
		CapacityProviderArns: []string{cpArn}, DeploymentConfiguration: &types.DaemonDeploymentConfiguration{BakeTimeInMinutes: 1}}); err != nil {
		t.Fatal(err)
	}
	watch(t, b, "the second rollout baking on agentd:3", 180*time.Second, func(s liveState) bool {
		return s.Status == "IN_PROGRESS" && s.Stop && strings.Join(s.Revs, ",") == "agentd:3,agentd:3"
	})
	screenshot(t, b, dir, "stop-offered")
	run(t, b, "stop", chromedp.Click(chromedp.ID("stop")), chromedp.WaitVisible(chromedp.ID("cells")))
	seen = watch(t, b, "the stopped rollout's rollback", 180*time.Second, back)
	t.Logf("after Stop:\n%v", seen)
	// Its reason is the rollback's outcome once it ended (as for a breaker).
	// One render lists the deployments before it describes the rollout: a
	// write between the two calls shows in the row one render after the
	// status.
	for deadline := time.Now().Add(30 * time.Second); ; {
		reason := eval[string](t, b, "deployments", `document.querySelector("#deployments tbody tr").innerText`)
		if strings.Contains(reason, "agentd:3") && strings.Contains(reason, "ROLLBACK_SUCCESSFUL") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("latest deployment row 30 s after the rollback ended: %q", reason)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if final := seen[len(seen)-1]; final.Stop {
		t.Fatalf("stop still offered after the rollback: %+v", final)
	}
	screenshot(t, b, dir, "stop-rolled-back")
}
