package console_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/chromedp/chromedp"

	"github.com/capstanhq/capstan/internal/testenv"
)

// TestBrowserConsolePages drives headless chromium against a server with
// a real agent: register a daemon task definition revision from the
// previous one through the form (one attempt refused, its error in place),
// watch a task's log lines arrive live, filter the events and see a new
// one appear, and look at the capacity providers tab.
func TestBrowserConsolePages(t *testing.T) {
	chrome := requireChromium(t)
	dir := artifacts(t)
	srv := testenv.StartServer(t, "")
	id := taskFixture(t, srv)
	b := newChrome(t, chrome)
	signInBrowser(t, b, srv.URL, adminKey, adminSecret)

	// Daemon task definitions: nav, family, revision, the form.
	run(t, b, "families", chromedp.Navigate(srv.URL+"/console/clusters"),
		chromedp.Click(chromedp.Search(`//nav//a[text()="Daemon task definitions"]`)),
		chromedp.WaitVisible(chromedp.ID("families")),
		chromedp.Click(chromedp.Search(`//table[@id="families"]//a[text()="ticker"]`)),
		chromedp.WaitVisible(chromedp.ID("revisions")),
		chromedp.Click(chromedp.Search(`//table[@id="revisions"]//a[text()="ticker:1"]`)),
		chromedp.WaitVisible(chromedp.ID("tdjson")))
	screenshot(t, b, dir, "taskdef")
	// A first attempt without the image: refused, the text kept, the line
	// with the container selected.
	broken := eval[string](t, b, "edit", `(() => {
		const ta = document.getElementById("tdjson");
		ta.value = ta.value.replace(/\s*"image": "[^"]*",/, "");
		return ta.value; })()`)
	run(t, b, "register refused", chromedp.Click(chromedp.ID("register")), chromedp.WaitVisible(chromedp.ID("register-error")))
	msg := eval[string](t, b, "error", `document.getElementById("register-error").innerText`)
	kept := eval[string](t, b, "kept", `document.getElementById("tdjson").value`)
	if !strings.Contains(msg, "containerDefinitions[0].image") || kept != broken {
		t.Fatalf("refused registration: error %q; text kept %v", msg, kept == broken)
	}
	selected := eval[string](t, b, "selection", `(() => { const ta = document.getElementById("tdjson");
		return document.activeElement === ta ? ta.value.slice(ta.selectionStart, ta.selectionEnd) : "(not focused)"; })()`)
	if strings.TrimSpace(selected) == "" || selected == "(not focused)" {
		t.Fatalf("the error's line is not selected: %q", selected)
	}
	screenshot(t, b, dir, "taskdef-error")
	eval[bool](t, b, "fix", `(() => { const ta = document.getElementById("tdjson");
		ta.value = ta.value.replace('"name": "ticker"', '"name": "ticker", "image": "busybox:fixed"'); return true; })()`)
	run(t, b, "register", chromedp.Click(chromedp.ID("register")), chromedp.WaitVisible(chromedp.Search(`//h1[contains(., "ticker:2")]`)))
	if view := eval[string](t, b, "json view", `document.getElementById("tdview").innerText`); !strings.Contains(view, "busybox:fixed") {
		t.Fatalf("new revision's JSON:\n%s", view)
	}

	// The task page: a line the task prints after the page opened appears.
	run(t, b, "tasks tab", chromedp.Navigate(srv.URL+"/console/cluster?name=apps&tab=tasks"),
		chromedp.Click(chromedp.Search(`//a[text()="`+id+`"]`)), chromedp.WaitVisible(chromedp.ID("logs")))
	last := eval[int](t, b, "last tick", `Math.max(0, ...[...document.getElementById("logs").innerText.matchAll(/tick-(\d+)/g)].map(m => Number(m[1])))`)
	eval[bool](t, b, "marker", `window.consoleMarker = "same page"; true`)
	waitFor(t, 30*time.Second, "a new log line on the page", func() bool {
		now := eval[int](t, b, "tick", `Math.max(0, ...[...document.getElementById("logs").innerText.matchAll(/tick-(\d+)/g)].map(m => Number(m[1])))`)
		return now > last+1
	})
	if eval[string](t, b, "marker", `window.consoleMarker || ""`) != "same page" {
		t.Fatal("the task page was reloaded; lines must arrive in place")
	}
	screenshot(t, b, dir, "task")

	// Events: filter by type through the form, then a new one arrives.
	const taskType = "ECS Task State Change"
	run(t, b, "events", chromedp.Navigate(srv.URL+"/console/cluster?name=apps&tab=events"), chromedp.WaitVisible(chromedp.ID("event-filter")),
		chromedp.SetValue(chromedp.ID("f-type"), taskType), chromedp.Click(chromedp.ID("f-apply")),
		chromedp.WaitReady(chromedp.Search(`//select[@id="f-type"]/option[@selected and text()="`+taskType+`"]`)))
	types := eval[[]string](t, b, "types", `[...document.querySelectorAll("#events tbody tr")].map(r => r.cells[1].innerText)`)
	if len(types) == 0 {
		t.Fatal("no task events")
	}
	for _, ty := range types {
		if ty != taskType {
			t.Fatalf("filtered events include %q", ty)
		}
	}
	screenshot(t, b, dir, "events")
	// Stopping the task makes a task event; the filtered page shows it.
	if _, err := srv.ECS().StopTask(context.Background(), &ecs.StopTaskInput{Cluster: aws.String("apps"), Task: aws.String(id), Reason: aws.String("console test")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "a live event row", func() bool {
		return eval[int](t, b, "new rows", `document.querySelectorAll("#events tbody tr.new").length`) > 0
	})
	if ty := eval[string](t, b, "new row", `document.querySelector("#events tbody tr.new").cells[1].innerText`); ty != taskType {
		t.Fatalf("live row of type %q through a %q filter", ty, taskType)
	}
	screenshot(t, b, dir, "events-live")

	run(t, b, "capacity", chromedp.Navigate(srv.URL+"/console/cluster?name=apps&tab=capacity"), chromedp.WaitVisible(chromedp.ID("capacity")))
	screenshot(t, b, dir, "capacity")
}
