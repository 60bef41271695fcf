package console_test

import (
	"bufio"
	"bytes"
	"context"
	"html"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/aws/aws-sdk-go-v2/service/iam"

	"github.com/capstanhq/capstan/internal/testenv"
	"github.com/capstanhq/capstan/internal/testenv/agents"
)

// postMultipart sends form as the register form does (multipart).
func (b *browser) postMultipart(path string, form map[string]string) (*http.Response, string) {
	b.t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for k, v := range form {
		mw.WriteField(k, v)
	}
	mw.Close()
	req, _ := http.NewRequest(http.MethodPost, b.base+path, &buf)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("Origin", b.base)
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp, string(out)
}

func revisionCount(t *testing.T, srv *testenv.Server, family string) int {
	t.Helper()
	out, err := srv.ECS().ListDaemonTaskDefinitions(context.Background(), &ecs.ListDaemonTaskDefinitionsInput{Family: aws.String(family),
		Status: types.DaemonTaskDefinitionStatusFilterAll})
	if err != nil {
		t.Fatal(err)
	}
	return len(out.DaemonTaskDefinitions)
}

var textareaRe = regexp.MustCompile(`(?s)<textarea id="tdjson"[^>]*>(.*?)</textarea>`)

func TestDaemonTaskDefinitionPages(t *testing.T) {
	srv := testenv.StartServer(t, "")
	daemonFixture(t, srv)
	ctx := context.Background()
	// A value with markup in it is shown escaped.
	if _, err := srv.ECS().RegisterDaemonTaskDefinition(ctx, &ecs.RegisterDaemonTaskDefinitionInput{Family: aws.String("agentd"),
		ContainerDefinitions: []types.DaemonContainerDefinition{{Name: aws.String("agentd"), Image: aws.String("busybox:three"), Memory: aws.Int32(32),
			Environment: []types.KeyValuePair{{Name: aws.String("NOTE"), Value: aws.String("<script>alert(1)</script>")}}}}}); err != nil {
		t.Fatal(err)
	}
	a := newBrowser(t, srv)
	a.signIn(adminKey, adminSecret)
	resp, body := a.get("/console/daemon-task-definitions")
	wantStatus(t, "families", resp, body, 200, "Daemon task definitions", `href="/console/daemon-task-definitions/family?family=agentd"`, "agentd:3")
	resp, body = a.get("/console/daemon-task-definitions/family?family=agentd")
	wantStatus(t, "family", resp, body, 200, "agentd:3", "agentd:2", "agentd:1", "ACTIVE")
	if strings.Index(body, "agentd:3") > strings.Index(body, "agentd:1") {
		t.Fatal("revisions not newest first")
	}
	resp, body = a.get("/console/daemon-task-definition?arn=agentd:3")
	wantStatus(t, "revision", resp, body, 200, `id="tdview"`, "busybox:three", "&lt;script&gt;alert(1)&lt;/script&gt;", `id="tdjson"`)
	if strings.Contains(body, "<script>alert") || strings.Contains(body, `id="register-denied"`) {
		t.Fatalf("revision page: unescaped markup or register denied to the admin:\n%s", body)
	}
	m := textareaRe.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no textarea:\n%s", body)
	}
	prefilled := html.UnescapeString(m[1])
	if !strings.Contains(prefilled, `"family": "agentd"`) || strings.Contains(prefilled, "daemonTaskDefinitionArn") || strings.Contains(prefilled, "registeredAt") {
		t.Fatalf("the form is not the registerable JSON:\n%s", prefilled)
	}

	// Bad inputs of the pages.
	for _, c := range []struct{ path, want string }{
		{"/console/daemon-task-definitions/family?family=", "family: must be"},
		{"/console/daemon-task-definitions/family?family=a%20b", "family: must be"},
		{"/console/daemon-task-definitions/family?family=nosuch", "no daemon task definition family"},
		{"/console/daemon-task-definition", "arn: a daemon task definition"},
		{"/console/daemon-task-definition?arn=agentd:9", "agentd:9"},
	} {
		resp, body := a.get(c.path)
		wantStatus(t, c.path, resp, body, 400, c.want)
	}

	tok := a.csrf()
	form := func(text string) map[string]string {
		return map[string]string{"csrf": tok, "from": "agentd:3", "json": text}
	}
	// Refused forms register nothing.
	resp, body = a.postMultipart("/console/daemon-task-definition/register", map[string]string{"from": "agentd:3", "json": prefilled})
	wantStatus(t, "register without CSRF", resp, body, 403, "CSRF")
	resp, body = a.postMultipart("/console/daemon-task-definition/register", form(prefilled+strings.Repeat(" ", 70<<10)))
	wantStatus(t, "register over 64 KiB", resp, body, http.StatusRequestEntityTooLarge, "larger than 64 KiB")
	broken := strings.Replace(prefilled, `"image": "busybox:three",`, `"image": "busybox:three"`, 1)
	resp, body = a.postMultipart("/console/daemon-task-definition/register", form(broken))
	wantStatus(t, "register bad JSON", resp, body, 400, `id="register-error"`, "json: line ")
	if m := textareaRe.FindStringSubmatch(body); m == nil || html.UnescapeString(m[1]) != broken {
		t.Fatalf("the text typed is not kept after an error:\n%s", body)
	}
	resp, body = a.postMultipart("/console/daemon-task-definition/register", form(strings.Replace(prefilled, `"memory": 32`, `"memory": 32, "colour": "red"`, 1)))
	wantStatus(t, "register unknown field", resp, body, 400, "colour: not a field")
	resp, body = a.postMultipart("/console/daemon-task-definition/register", form(strings.Replace(prefilled, `"memory": 32`, `"memory": "lots"`, 1)))
	wantStatus(t, "register wrong type", resp, body, 400, "containerDefinitions.memory: must be int32")
	// The API's own validation: the error names the field and its line.
	noImage := strings.Replace(prefilled, `"image": "busybox:three",`, "", 1)
	resp, body = a.postMultipart("/console/daemon-task-definition/register", form(noImage))
	wantStatus(t, "register without an image", resp, body, 400, "containerDefinitions[0].image", `id="error-field"`, `data-error-line="`, `aria-invalid="true"`)
	if n := revisionCount(t, srv, "agentd"); n != 3 {
		t.Fatalf("refused forms registered revisions: %d, want 3", n)
	}
	resp, body = a.postMultipart("/console/daemon-task-definition/register", form(strings.Replace(prefilled, "busybox:three", "busybox:four", 1)))
	wantStatus(t, "register", resp, body, http.StatusSeeOther)
	if loc := resp.Header.Get("Location"); loc != "/console/daemon-task-definition?arn=agentd%3a4" && loc != "/console/daemon-task-definition?arn=agentd%3A4" {
		t.Fatalf("after registering: Location %q", loc)
	}
	resp, body = a.get("/console/daemon-task-definition?arn=agentd:4")
	wantStatus(t, "new revision", resp, body, 200, "busybox:four", "&lt;script&gt;")

	// A reader sees the form greyed with the reason; the API refuses a POST.
	key, secret := readOnlyUser(t, srv)
	v := newBrowser(t, srv)
	v.signIn(key, secret)
	resp, body = v.get("/console/daemon-task-definition?arn=agentd:4")
	wantStatus(t, "revision as viewer", resp, body, 200, `id="register-denied"`, "ecs:RegisterDaemonTaskDefinition", `id="register" disabled`)
	vt := v.csrf()
	resp, body = v.postMultipart("/console/daemon-task-definition/register", map[string]string{"csrf": vt, "from": "agentd:4", "json": prefilled})
	wantStatus(t, "register as viewer", resp, body, 403, "AccessDeniedException")
	if n := revisionCount(t, srv, "agentd"); n != 4 {
		t.Fatalf("revisions after the viewer's POST: %d, want 4", n)
	}
}

func TestCapacityProvidersTab(t *testing.T) {
	srv := testenv.StartServer(t, "")
	daemonFixture(t, srv)
	a := newBrowser(t, srv)
	a.signIn(adminKey, adminSecret)
	resp, body := a.get("/console/cluster?name=apps&tab=capacity")
	wantStatus(t, "capacity tab", resp, body, 200, `aria-current="page">capacity providers`, `data-provider="apps-mi"`, "MANAGED_INSTANCES",
		"infrastructure role: arn:aws:iam::123456789012:role/capstan", "subnets: local", ">agentd</a>")
	resp, body = a.get("/console/cluster?name=nosuch&tab=capacity")
	wantStatus(t, "capacity tab of no cluster", resp, body, 400, "ClusterNotFoundException")
	// A user who may not describe is refused with the API's reason.
	key, secret := noReadUser(t, srv)
	n := newBrowser(t, srv)
	n.signIn(key, secret)
	resp, body = n.get("/console/cluster?name=apps&tab=capacity")
	wantStatus(t, "capacity tab unauthorized", resp, body, 403, "AccessDeniedException")
}

// sse opens a console event stream; the reader yields its events.
func (b *browser) sse(path string) (*http.Response, func() (string, string)) {
	b.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, b.base+path, nil)
	req.Header.Set("Accept", "text/event-stream")
	ctx, cancel := context.WithCancel(context.Background())
	b.t.Cleanup(cancel)
	resp, err := (&http.Client{Jar: b.c.Jar}).Do(req.WithContext(ctx))
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { resp.Body.Close() })
	rd := bufio.NewReader(resp.Body)
	return resp, func() (string, string) {
		var event, data string
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				return "", ""
			}
			line = strings.TrimSuffix(line, "\n")
			switch {
			case line == "" && event != "":
				return event, data
			case strings.HasPrefix(line, "event: "):
				event = line[len("event: "):]
			case strings.HasPrefix(line, "data: "):
				data += line[len("data: "):]
			}
		}
	}
}

var liveSrcRe = regexp.MustCompile(`data-src="(/console/events/live[^"]+)"`)

func TestEventsTab(t *testing.T) {
	srv := testenv.StartServer(t, "")
	daemonArn := daemonFixture(t, srv)
	a := newBrowser(t, srv)
	a.signIn(adminKey, adminSecret)
	const deployType = "ECS Daemon Deployment State Change"
	filtered := "/console/cluster?name=apps&tab=events&type=" + url.QueryEscape(deployType) + "&daemon=agentd"
	// The daemon's first deployment is recorded as it goes.
	var resp *http.Response
	var body string
	waitFor(t, 30*time.Second, "a deployment event of agentd", func() bool {
		resp, body = a.get(filtered)
		return strings.Contains(body, "<td>"+deployType+"</td>")
	})
	wantStatus(t, "events filtered", resp, body, 200, `id="event-filter"`, `<option selected>`+deployType, `value="agentd"`)
	m := liveSrcRe.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no live source:\n%s", body)
	}
	// Filters that match nothing: another daemon, another type, a window
	// in the future.
	future := time.Now().UTC().Add(time.Hour).Format("2006-01-02T15:04")
	for _, q := range []string{"daemon=other", "type=" + url.QueryEscape("ECS Task State Change"), "since=" + future, "instance=abc&daemon=agentd", "source=aws.other"} {
		resp, body := a.get("/console/cluster?name=apps&tab=events&" + q)
		wantStatus(t, "events "+q, resp, body, 200, "No events.")
	}
	resp, body = a.get("/console/cluster?name=apps&tab=events&until=" + future)
	wantStatus(t, "events until", resp, body, 200, "A window with an end is not followed")
	if liveSrcRe.MatchString(body) {
		t.Fatal("a closed window is followed live")
	}
	for _, c := range []struct{ q, want string }{
		{"type=bogus", "type: must be one of"},
		{"since=yesterday", "since: must be a time"},
		{"since=2026-01-02T10:00&until=2026-01-01T10:00", "until: must not be before since"},
		{"daemon=a%20b", "daemon: must be a name"},
	} {
		resp, body := a.get("/console/cluster?name=apps&tab=events&" + c.q)
		wantStatus(t, "events "+c.q, resp, body, 400, c.want)
	}

	// Live: a new deployment's event arrives on the open stream.
	resp, next := a.sse(html.UnescapeString(m[1]))
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events live: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if _, err := srv.ECS().UpdateDaemon(context.Background(), &ecs.UpdateDaemonInput{DaemonArn: aws.String(daemonArn),
		DaemonTaskDefinitionArn: aws.String("agentd:2"), CapacityProviderArns: []string{"apps-mi"}}); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	go func() {
		for {
			ev, data := next()
			if ev == "" || ev == "event" {
				got <- data
				return
			}
		}
	}()
	select {
	case data := <-got:
		if !strings.Contains(data, deployType) {
			t.Fatalf("live event %s", data)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no live event after the update")
	}
	for _, c := range []struct {
		path   string
		status int
	}{
		{"/console/events/live?cluster=apps&type=bogus", 400},
		{"/console/events/live?cluster=nosuch", 400},
		{"/console/events/live?cluster=apps&after=notacursor", 400},
	} {
		resp, _ := a.sse(c.path)
		if resp.StatusCode != c.status {
			t.Fatalf("%s: %d, want %d", c.path, resp.StatusCode, c.status)
		}
	}
	resp, _ = newBrowser(t, srv).sse("/console/events/live?cluster=apps")
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("events live without a session: %d", resp.StatusCode)
	}
	// The viewer may not list events (capstan:ListEvents): the tab says so.
	key, secret := readOnlyUser(t, srv)
	v := newBrowser(t, srv)
	v.signIn(key, secret)
	resp, body = v.get("/console/cluster?name=apps&tab=events")
	wantStatus(t, "events as viewer", resp, body, 403, "AccessDeniedException")
	resp, _ = v.sse("/console/events/live?cluster=apps")
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("events live as viewer: %d, want 403", resp.StatusCode)
	}
}

// noReadUser makes an IAM user with no policy at all.
func noReadUser(t *testing.T, srv *testenv.Server) (key, secret string) {
	t.Helper()
	c := iam.New(iam.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: credentials.NewStaticCredentialsProvider(adminKey, adminSecret, "")})
	ctx := context.Background()
	if _, err := c.CreateUser(ctx, &iam.CreateUserInput{UserName: aws.String("nobody")}); err != nil {
		t.Fatal(err)
	}
	k, err := c.CreateAccessKey(ctx, &iam.CreateAccessKeyInput{UserName: aws.String("nobody")})
	if err != nil {
		t.Fatal(err)
	}
	return aws.ToString(k.AccessKey.AccessKeyId), aws.ToString(k.AccessKey.SecretAccessKey)
}

// taskFixture runs a daemon that prints a numbered line each second on
// one real agent, and returns its task's ID.
func taskFixture(t *testing.T, srv *testenv.Server) string {
	t.Helper()
	rt := testenv.RequireDocker(t)
	image := testenv.BusyboxImage(t)
	c := srv.ECS()
	ctx := context.Background()
	if _, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("apps")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("other")}); err != nil {
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
	td, err := c.RegisterDaemonTaskDefinition(ctx, &ecs.RegisterDaemonTaskDefinitionInput{Family: aws.String("ticker"),
		ContainerDefinitions: []types.DaemonContainerDefinition{{Name: aws.String("ticker"), Image: aws.String(image), Memory: aws.Int32(32),
			Command: []string{"sh", "-c", "trap 'exit 0' TERM; echo hello-from-ticker; i=0; while true; do i=$((i+1)); echo tick-$i; sleep 1; done"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateDaemon(ctx, &ecs.CreateDaemonInput{DaemonName: aws.String("ticker"), ClusterArn: aws.String("apps"),
		DaemonTaskDefinitionArn: td.DaemonTaskDefinitionArn, CapacityProviderArns: []string{aws.ToString(cp.CapacityProvider.CapacityProviderArn)}}); err != nil {
		t.Fatal(err)
	}
	agents.StartEnv(t, agents.EnvFor(t, srv, "apps", "apps-mi", t.TempDir()), rt)
	waitFor(t, 90*time.Second, "ticker running", func() bool { return runningDaemonTasks(t, c, "ticker") == 1 })
	list, err := c.ListTasks(ctx, &ecs.ListTasksInput{Cluster: aws.String("apps"), DaemonName: aws.String("ticker")})
	if err != nil || len(list.TaskArns) != 1 {
		t.Fatalf("ticker tasks %v %v", list, err)
	}
	arn := list.TaskArns[0]
	return arn[strings.LastIndexByte(arn, '/')+1:]
}

var tickRe = regexp.MustCompile(`tick-([0-9]+)`)

func TestTaskPageAndLogs(t *testing.T) {
	srv := testenv.StartServer(t, "")
	id := taskFixture(t, srv)
	a := newBrowser(t, srv)
	a.signIn(adminKey, adminSecret)
	resp, body := a.get("/console/cluster?name=apps&tab=tasks")
	wantStatus(t, "tasks tab", resp, body, 200, `href="/console/task?cluster=apps&amp;task=`+id+`"`)
	page := "/console/task?cluster=apps&task=" + id
	waitFor(t, 30*time.Second, "the ticker's first lines", func() bool {
		_, body = a.get(page)
		return strings.Contains(body, "tick-2")
	})
	resp, body = a.get(page)
	wantStatus(t, "task page", resp, body, 200, "Task "+id, `id="containers"`, "<td>ticker</td>", "RUNNING", "hello-from-ticker", "ticker:1", `data-src="/console/task/logs?`)
	if strings.Contains(body, `id="logs-error"`) {
		t.Fatalf("logs error on the task page:\n%s", body)
	}
	src := html.UnescapeString(regexp.MustCompile(`id="logs"[^>]*data-src="([^"]+)"`).FindStringSubmatch(body)[1])
	shown := 0
	for _, m := range tickRe.FindAllStringSubmatch(body, -1) {
		shown = max(shown, atoi(m[1]))
	}
	// The stream follows on after the lines the page shows.
	resp, next := a.sse(src)
	if resp.StatusCode != 200 {
		t.Fatalf("logs stream: %d", resp.StatusCode)
	}
	ev, data := next()
	if ev != "line" || !strings.Contains(data, "tick-") {
		t.Fatalf("first streamed event %q %q", ev, data)
	}
	if n := atoi(tickRe.FindStringSubmatch(data)[1]); n != shown+1 {
		t.Fatalf("stream starts at tick-%d, the page showed up to tick-%d", n, shown)
	}

	// Bad inputs: unknown task, another cluster, a bad container name.
	other := newBrowser(t, srv)
	other.signIn(adminKey, adminSecret)
	for _, c := range []struct{ q, want string }{
		{"cluster=apps", "task: a task ID or ARN is required"},
		{"task=" + id, "cluster: a cluster name is required"},
		{"cluster=apps&task=00000000000000000000000000000000", "task: no task"},
		{"cluster=other&task=" + id, "task: no task"},
		{"cluster=nosuch&task=" + id, "Exception"},
		{"cluster=apps&task=" + id + "&container=nosuch", `container: the task has no container &#34;nosuch&#34; (it has ticker)`},
	} {
		resp, body := other.get("/console/task?" + c.q)
		wantStatus(t, "task "+c.q, resp, body, 400, c.want)
		resp, _ = other.sse("/console/task/logs?" + c.q)
		if resp.StatusCode != 400 {
			t.Fatalf("task logs %s: %d, want 400", c.q, resp.StatusCode)
		}
	}
	resp, _ = newBrowser(t, srv).sse("/console/task/logs?cluster=apps&task=" + id)
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("logs without a session: %d", resp.StatusCode)
	}
	// A reader without capstan:GetTaskLogs sees the task, the logs refused.
	key, secret := readOnlyUser(t, srv)
	v := newBrowser(t, srv)
	v.signIn(key, secret)
	resp, body = v.get(page)
	wantStatus(t, "task as viewer", resp, body, 200, "Task "+id, `id="logs-error"`, "AccessDeniedException", "capstan:GetTaskLogs")
	if strings.Contains(body, "tick-") {
		t.Fatal("the viewer sees log lines")
	}
	resp, _ = v.sse("/console/task/logs?cluster=apps&task=" + id)
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("logs stream as viewer: %d, want 403", resp.StatusCode)
	}
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}
