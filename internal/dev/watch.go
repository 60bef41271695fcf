package dev

import (
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
)

// Status is the running environment, as the summary shows it.
type Status struct {
	Endpoint        string // http://host:port of the ECS API
	Region          string
	AccessKeyID     string
	SecretAccessKey string
	Cluster         string
	DataDir         string
	Logs            []string // server and instance logs
	Instances       []Instance
	Daemon          []Task // the telemetry daemon's tasks
	Web             []Task // the web service's tasks, with URLs
	// TelemetryReached and Telemetry are what the web app said about
	// reaching the daemon when dev asked it.
	TelemetryReached bool
	Telemetry        string
}

// Instance is a registered instance of the dev cluster.
type Instance struct {
	Arn, ID, Status string
	Connected       bool
}

// Task is a running task; URL is set for web tasks.
type Task struct {
	Arn, ID, Status, Health, URL string
}

// waitRunning follows the sample until the daemon and every web task run,
// printing each change of state as it happens.
func (d *env) waitRunning(ctx context.Context) error {
	wctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	w := &watcher{d: d, said: map[string]string{}, since: d.began}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		done, err := w.poll(wctx)
		if done {
			return nil
		}
		if err != nil && wctx.Err() == nil {
			return err
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("the sample did not come up within %v; see %s and %s", d.cfg.Timeout, d.serverLog(), d.agentLogs())
		case err := <-d.srv.Wait():
			return fmt.Errorf("server stopped: %w", err)
		case <-tick.C:
		}
	}
}

// watcher prints what changed since its last look.
type watcher struct {
	d       *env
	said    map[string]string // subject → last line printed about it
	since   time.Time         // events and stops before this are old news
	stopped map[string]bool
}

func (w *watcher) say(subject, format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	if w.said[subject] != line {
		w.said[subject] = line
		w.d.out.step("%s", line)
	}
}

func (w *watcher) poll(ctx context.Context) (bool, error) {
	d := w.d
	cis, err := d.instances(ctx)
	if err != nil {
		return false, err
	}
	// Tasks count only on live instances: an earlier run's linger in the
	// records until the server notices their instance is gone.
	live := map[string]bool{}
	for _, ci := range cis {
		id := shortArn(aws.ToString(ci.ContainerInstanceArn))
		st := aws.ToString(ci.Status)
		note := ""
		switch {
		case st == "INACTIVE":
			note = " (deregistered)"
		case !ci.AgentConnected:
			note = " (agent not connected)"
		case st == "REGISTERING":
			note = " (until its critical daemons run)"
		}
		w.say("instance "+id, "instance %s %s%s", id, st, note)
		live[aws.ToString(ci.ContainerInstanceArn)] = st == "ACTIVE" && ci.AgentConnected
	}

	daemon, err := d.tasks(ctx, &ecs.ListTasksInput{DaemonName: aws.String(d.names.daemon)})
	if err != nil {
		return false, err
	}
	daemonUp := false
	for _, t := range daemon {
		health := ""
		if t.HealthStatus != "" && t.HealthStatus != types.HealthStatusUnknown {
			health = ", " + string(t.HealthStatus)
		}
		w.say("task "+taskID(t), "daemon %s: task %s %s%s", d.names.daemon, taskID(t), aws.ToString(t.LastStatus), health)
		daemonUp = daemonUp || aws.ToString(t.LastStatus) == "RUNNING" && live[aws.ToString(t.ContainerInstanceArn)]
	}

	web, err := d.tasks(ctx, &ecs.ListTasksInput{ServiceName: aws.String(d.names.service)})
	if err != nil {
		return false, err
	}
	running := 0
	for _, t := range web {
		url := taskURL(t)
		if aws.ToString(t.LastStatus) == "RUNNING" && url != "" && live[aws.ToString(t.ContainerInstanceArn)] {
			running++
		}
		w.say("task "+taskID(t), "service %s: task %s %s %s", d.names.service, taskID(t), aws.ToString(t.LastStatus), url)
	}
	desired, err := w.serviceEvents(ctx)
	if err != nil {
		return false, err
	}
	if err := w.stoppedTasks(ctx); err != nil {
		return false, err
	}
	// A user may have scaled the service to zero.
	return daemonUp && running >= desired, nil
}

// maxEvents is how many new service events one look prints.
const maxEvents = 3

// serviceEvents prints the service's new events, oldest first, and returns
// its desired count.
func (w *watcher) serviceEvents(ctx context.Context) (int, error) {
	d := w.d
	out, err := d.ecs.DescribeServices(ctx, &ecs.DescribeServicesInput{Cluster: aws.String(d.names.cluster), Services: []string{d.names.service}})
	if err != nil {
		return 0, err
	}
	if len(out.Services) != 1 {
		return 0, fmt.Errorf("service %s is missing", d.names.service)
	}
	s := out.Services[0]
	newest := w.since
	var fresh []string
	for _, e := range slices.Backward(s.Events) {
		if at := aws.ToTime(e.CreatedAt); at.After(w.since) {
			fresh = append(fresh, aws.ToString(e.Message))
			newest = at
		}
	}
	// A burst (a crash loop, say) shows as its latest few lines.
	if n := len(fresh) - maxEvents; n > 0 {
		d.out.step("(%d earlier service events; see aws ecs describe-services)", n)
		fresh = fresh[n:]
	}
	for _, m := range fresh {
		d.out.step("%s", m)
	}
	w.since = newest
	return int(s.DesiredCount), nil
}

// stoppedTasks explains tasks that stopped during this run: the reason is
// the quickest way to a fix (a port in use, an image that will not start).
func (w *watcher) stoppedTasks(ctx context.Context) error {
	d := w.d
	ts, err := d.tasks(ctx, &ecs.ListTasksInput{DesiredStatus: types.DesiredStatusStopped})
	if err != nil {
		return err
	}
	if w.stopped == nil {
		w.stopped = map[string]bool{}
	}
	type why struct{ group, reason string }
	var order []why
	byWhy := map[why][]string{}
	for _, t := range ts {
		id := taskID(t)
		// Tasks of an earlier run stop as their instances are found gone,
		// and one never placed did not fail: neither is news.
		if w.stopped[id] || aws.ToString(t.LastStatus) != "STOPPED" || aws.ToTime(t.CreatedAt).Before(d.began) || aws.ToString(t.ContainerInstanceArn) == "" {
			continue
		}
		w.stopped[id] = true
		k := why{aws.ToString(t.Group), aws.ToString(t.StoppedReason)}
		for _, c := range t.Containers {
			if r := aws.ToString(c.Reason); r != "" && !strings.Contains(k.reason, r) {
				k.reason += "; " + aws.ToString(c.Name) + ": " + r
			}
		}
		if byWhy[k] == nil {
			order = append(order, k)
		}
		byWhy[k] = append(byWhy[k], id)
	}
	for _, k := range order {
		if ids := byWhy[k]; len(ids) == 1 {
			d.out.warn("task %s (%s) stopped: %s", ids[0], k.group, k.reason)
		} else {
			d.out.warn("%d tasks (%s) stopped: %s", len(ids), k.group, k.reason)
		}
	}
	return nil
}

// tasks lists and describes the cluster's tasks matching in.
func (d *env) tasks(ctx context.Context, in *ecs.ListTasksInput) ([]types.Task, error) {
	in.Cluster = aws.String(d.names.cluster)
	var arns []string
	for {
		out, err := d.ecs.ListTasks(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("list tasks: %w", err)
		}
		arns = append(arns, out.TaskArns...)
		if out.NextToken == nil {
			break
		}
		in.NextToken = out.NextToken
	}
	var ts []types.Task
	for chunk := range slices.Chunk(arns, 100) {
		out, err := d.ecs.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: aws.String(d.names.cluster), Tasks: chunk})
		if err != nil {
			return nil, fmt.Errorf("describe tasks: %w", err)
		}
		ts = append(ts, out.Tasks...)
	}
	slices.SortFunc(ts, func(a, b types.Task) int { return aws.ToTime(a.CreatedAt).Compare(aws.ToTime(b.CreatedAt)) })
	return ts, nil
}

func taskID(t types.Task) string {
	arn := aws.ToString(t.TaskArn)
	return arn[strings.LastIndex(arn, "/")+1:]
}

// taskURL is where the host reaches a task's first published port.
func taskURL(t types.Task) string {
	for _, c := range t.Containers {
		for _, b := range c.NetworkBindings {
			if p := aws.ToInt32(b.HostPort); p > 0 {
				return "http://127.0.0.1:" + strconv.Itoa(int(p))
			}
		}
	}
	return ""
}

// status gathers the summary once everything runs; askApp also loads the
// web app's page to see whether it reaches the daemon.
func (d *env) status(ctx context.Context, askApp bool) (Status, error) {
	st := Status{
		Endpoint: d.endpoint, Region: serverRegion,
		AccessKeyID: d.keyID, SecretAccessKey: d.secret,
		Cluster: d.names.cluster, DataDir: d.cfg.DataDir,
		Logs: []string{d.serverLog(), d.agentLogs()},
	}
	cis, err := d.instances(ctx)
	if err != nil {
		return st, err
	}
	live := map[string]bool{}
	for _, ci := range cis {
		arn := aws.ToString(ci.ContainerInstanceArn)
		st.Instances = append(st.Instances, Instance{Arn: arn, ID: shortArn(arn), Status: aws.ToString(ci.Status), Connected: ci.AgentConnected})
		live[arn] = ci.AgentConnected
	}
	daemon, err := d.tasks(ctx, &ecs.ListTasksInput{DaemonName: aws.String(d.names.daemon)})
	if err != nil {
		return st, err
	}
	web, err := d.tasks(ctx, &ecs.ListTasksInput{ServiceName: aws.String(d.names.service)})
	if err != nil {
		return st, err
	}
	for _, t := range daemon {
		if !live[aws.ToString(t.ContainerInstanceArn)] {
			continue
		}
		st.Daemon = append(st.Daemon, Task{Arn: aws.ToString(t.TaskArn), ID: taskID(t), Status: aws.ToString(t.LastStatus), Health: string(t.HealthStatus)})
	}
	for _, t := range web {
		if !live[aws.ToString(t.ContainerInstanceArn)] {
			continue
		}
		st.Web = append(st.Web, Task{Arn: aws.ToString(t.TaskArn), ID: taskID(t), Status: aws.ToString(t.LastStatus), Health: string(t.HealthStatus), URL: taskURL(t)})
	}
	if askApp && len(st.Web) > 0 && st.Web[0].URL != "" {
		st.TelemetryReached, st.Telemetry = askWebApp(ctx, st.Web[0].URL)
	}
	return st, nil
}

var telemetryParagraph = regexp.MustCompile(`(?s)<p id="telemetry" data-reached="(true|false)"[^>]*>(.*?)</p>`)

// askWebApp loads the app's page, which makes it report to the daemon, and
// reads what it says about that. The task may be RUNNING a moment before
// it listens, so it is given a few seconds.
func askWebApp(ctx context.Context, url string) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c := http.Client{Timeout: 3 * time.Second}
	var last error
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := c.Do(req)
		if err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
			resp.Body.Close()
			m := telemetryParagraph.FindSubmatch(b)
			if m == nil {
				return false, fmt.Sprintf("the page at %s does not say (HTTP %d)", url, resp.StatusCode)
			}
			return string(m[1]) == "true", strings.Join(strings.Fields(html.UnescapeString(string(m[2]))), " ")
		}
		last = err
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
	return false, fmt.Sprintf("%s did not answer: %v", url, errors.Join(last, ctx.Err()))
}
