package console_test

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
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

// requireChromium finds Debian's chromium; under CI its absence fails.
func requireChromium(t *testing.T) string {
	t.Helper()
	return testenv.RequireBinary(t, "chromium", "chromium", "chromium-browser", "google-chrome")
}

// artifacts is where screenshots go: $CAPSTAN_ARTIFACTS/console, else a
// temporary directory.
func artifacts(t *testing.T) string {
	dir := t.TempDir()
	if a := os.Getenv("CAPSTAN_ARTIFACTS"); a != "" {
		dir = filepath.Join(a, "console")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("console screenshots in %s", dir)
	return dir
}

// newChrome starts a headless chromium with a fresh profile (no cookies).
func newChrome(t *testing.T, path string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(1280, 800), chromedp.UserDataDir(t.TempDir()))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancel2 := chromedp.NewContext(actx)
	t.Cleanup(cancel2)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

func run(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if err := chromedp.Do(tctx, steps...); err != nil {
		body, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + "\n" + (document.body ? document.body.innerText : "")`))
		t.Fatalf("%s: %v\nat %s", what, err, body)
	}
}

func eval[T any](t *testing.T, ctx context.Context, what, expr string) T {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(tctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// screenshot saves the page and checks its layout: no horizontal
// overflow, no element wider than the viewport, text on the page.
func screenshot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(tctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	layout := eval[string](t, ctx, "layout of "+name, `(() => {
		const w = document.documentElement.clientWidth;
		if (document.documentElement.scrollWidth > w + 1) return "page scrolls sideways: " + document.documentElement.scrollWidth + " > " + w;
		for (const e of document.querySelectorAll("body *")) {
			const r = e.getBoundingClientRect();
			if (r.width > w + 1) return "element " + e.tagName + (e.id ? "#" + e.id : "") + " is " + r.width + "px wide, viewport " + w;
		}
		if (document.body.innerText.trim().length < 20) return "page is blank";
		return "";
	})()`)
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
	if layout != "" {
		t.Fatalf("%s: layout broken: %s", name, layout)
	}
}

func signInBrowser(t *testing.T, ctx context.Context, base, key, secret string) {
	t.Helper()
	run(t, ctx, "sign in as "+key,
		chromedp.Navigate(base+"/console/signin"),
		chromedp.WaitVisible(chromedp.ID("accessKeyId")),
		chromedp.SendKeys(chromedp.ID("accessKeyId"), key),
		chromedp.SendKeys(chromedp.ID("secretAccessKey"), secret),
		chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.Search(`//h1[text()="Clusters"]`)),
	)
}

// TestBrowserRollout drives headless chromium against a server with two
// real agents: sign in, update a daemon after its preview and watch the
// cells turn to the new revision live until the rollout is SUCCESSFUL;
// an instance without one of its daemons is flagged; a read-only user
// finds the update greyed out.
func TestBrowserRollout(t *testing.T) {
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
	register := func(family, version string, cmd ...string) string {
		td, err := c.RegisterDaemonTaskDefinition(ctx, &ecs.RegisterDaemonTaskDefinitionInput{Family: aws.String(family),
			ContainerDefinitions: []types.DaemonContainerDefinition{{Name: aws.String(family), Image: aws.String(image), Memory: aws.Int32(32),
				Command: cmd, Environment: []types.KeyValuePair{{Name: aws.String("VERSION"), Value: aws.String(version)}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return aws.ToString(td.DaemonTaskDefinitionArn)
	}
	loop := []string{"sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"}
	rev1 := register("agentd", "1", loop...)
	register("agentd", "2", loop...)
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
	screenshot(t, b, dir, "clusters")
	page := srv.URL + "/console/daemon?arn=" + url.QueryEscape(daemonArn)
	run(t, b, "daemon page", chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS("#cells li")))
	revs := eval[[]string](t, b, "cells", `[...document.querySelectorAll("#cells li")].map(e => e.dataset.revision)`)
	if strings.Join(revs, ",") != "agentd:1,agentd:1" {
		t.Fatalf("cells before the update: %v", revs)
	}
	screenshot(t, b, dir, "daemon")

	run(t, b, "preview", chromedp.SendKeys(chromedp.ID("taskDefinition"), "agentd:2"), chromedp.Click(chromedp.ID("preview")),
		chromedp.WaitVisible(chromedp.ID("confirm")))
	diff := eval[string](t, b, "field diff", `document.getElementById("fielddiff").innerText`)
	if !strings.Contains(diff, "VERSION") {
		t.Fatalf("the preview's field diff does not name the changed variable:\n%s", diff)
	}
	screenshot(t, b, dir, "preview")
	// Back on the daemon page, the page is never reloaded: a marker set on
	// it survives while the cells change.
	run(t, b, "confirm", chromedp.Click(chromedp.ID("confirm")), chromedp.WaitVisible(chromedp.ID("cells")))
	eval[bool](t, b, "marker", `window.consoleMarker = "same page"; true`)
	var seen []string
	deadline := time.Now().Add(120 * time.Second)
	for {
		state := eval[struct {
			Status string   `json:"status"`
			Revs   []string `json:"revs"`
			Marker string   `json:"marker"`
		}](t, b, "live state", `({status: (document.getElementById("rollout-status") || {}).textContent || "",
			revs: [...document.querySelectorAll("#cells li")].map(e => e.dataset.revision + "/" + e.dataset.state),
			marker: window.consoleMarker || ""})`)
		if state.Marker != "same page" {
			t.Fatal("the daemon page was reloaded; the rollout must update in place")
		}
		snap := state.Status + " " + strings.Join(state.Revs, ",")
		if len(seen) == 0 || seen[len(seen)-1] != snap {
			seen = append(seen, snap)
		}
		if state.Status == "SUCCESSFUL" && strings.Join(state.Revs, ",") == "agentd:2/on-target,agentd:2/on-target" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rollout not seen SUCCESSFUL with both cells on agentd:2; states seen:\n%s", strings.Join(seen, "\n"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("states the page went through:\n%s", strings.Join(seen, "\n"))
	// The deployments list is part of the live view too.
	waitFor(t, 10*time.Second, "the deployment SUCCESSFUL in the list", func() bool {
		row := eval[string](t, b, "deployments", `document.querySelector("#deployments tbody tr").innerText`)
		return strings.Contains(row, "agentd:2") && strings.Contains(row, "SUCCESSFUL")
	})
	if len(seen) < 2 {
		t.Fatalf("the page showed no change on the way: %v", seen)
	}
	screenshot(t, b, dir, "rollout-successful")

	// A second, failing daemon: every instance lacks it and is flagged.
	fl := register("flaky", "1", "sh", "-c", "exit 1")
	if _, err := c.CreateDaemon(ctx, &ecs.CreateDaemonInput{DaemonName: aws.String("flaky"), ClusterArn: aws.String("apps"),
		DaemonTaskDefinitionArn: aws.String(fl), CapacityProviderArns: []string{cpArn}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "instances flagged as missing a daemon", func() bool {
		run(t, b, "instances tab", chromedp.Navigate(srv.URL+"/console/cluster?name=apps&tab=instances"), chromedp.WaitVisible(chromedp.ID("instances")))
		return eval[int](t, b, "flags", `document.querySelectorAll("#instances tr.missing .flag").length`) == 2
	})
	screenshot(t, b, dir, "instances")

	// A user who may only read sees the update greyed, with the reason.
	key, secret := readOnlyUser(t, srv)
	v := newChrome(t, chrome)
	signInBrowser(t, v, srv.URL, key, secret)
	run(t, v, "daemon page as viewer", chromedp.Navigate(page), chromedp.WaitVisible(chromedp.ID("update-denied")))
	disabled := eval[bool](t, v, "preview disabled", `document.getElementById("preview").disabled`)
	reason := eval[string](t, v, "reason", `document.getElementById("update-denied").innerText`)
	if !disabled || !strings.Contains(reason, "ecs:UpdateDaemon") {
		t.Fatalf("viewer: preview disabled %v, reason %q", disabled, reason)
	}
	screenshot(t, v, dir, "daemon-read-only")
}

func runningDaemonTasks(t *testing.T, c *ecs.Client, daemon string) int {
	list, err := c.ListTasks(context.Background(), &ecs.ListTasksInput{Cluster: aws.String("apps"), DaemonName: aws.String(daemon),
		DesiredStatus: types.DesiredStatusRunning})
	if err != nil || len(list.TaskArns) == 0 {
		return 0
	}
	out, err := c.DescribeTasks(context.Background(), &ecs.DescribeTasksInput{Cluster: aws.String("apps"), Tasks: list.TaskArns})
	if err != nil {
		return 0
	}
	n := 0
	for _, tk := range out.Tasks {
		if aws.ToString(tk.LastStatus) == "RUNNING" {
			n++
		}
	}
	return n
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
