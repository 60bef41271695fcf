package cli

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
)

// TestNotCapstanEndpoint: an endpoint that is not an ECS API (a web server,
// another service on the port) is named as such, whatever it answers,
// for SDK calls and Capstan's own operations alike.
func TestNotCapstanEndpoint(t *testing.T) {
	for _, c := range []struct {
		status int
		body   string
		args   []string
		want   string
	}{
		{405, "Method Not Allowed\n", []string{"cluster", "list"}, `it answered HTTP 405 with "Method Not Allowed"`},
		{200, "<html><body>hello</body></html>", []string{"cluster", "list"}, "it answered HTTP 200 with a body that is not ECS JSON"},
		{404, `{"error":"no route"}`, []string{"cluster", "list"}, "it answered HTTP 404 without an ECS error code"},
		{404, "not found", []string{"events"}, "it answered a response without an ECS error code"},
		{200, "<html></html>", []string{"events"}, "its answer is not JSON"},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(c.status)
			w.Write([]byte(c.body))
		}))
		env := map[string]string{"CAPSTAN_ENDPOINT": srv.URL, "AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b", "HOME": t.TempDir()}
		var out, errb bytes.Buffer
		code := run(context.Background(), c.args, func(k string) string { return env[k] }, strings.NewReader(""), &out, &errb)
		want := "capstan: " + srv.URL + " is not a Capstan/ECS API: " + c.want + "; check --endpoint"
		if code != exitError || !strings.Contains(errb.String(), want) || strings.Contains(errb.String(), "invalid character") {
			t.Errorf("%d %q, capstan %v: exit %d\n%s\nwant %q", c.status, c.body, c.args, code, errb.String(), want)
		}
		srv.Close()
	}
}

// TestMalformedFile: a request file with a syntax error is reported with
// its line and column.
func TestMalformedFile(t *testing.T) {
	h := newHarness(t)
	f := filepath.Join(t.TempDir(), "td.json")
	os.WriteFile(f, []byte("{\n  \"family\": \"web\",\n  \"containerDefinitions\": [\n    {\"name\": \"web\" \"image\": \"busybox\"}\n  ]\n}\n"), 0o600)
	h.fails(1, f+": not valid JSON at line 4, column 20: invalid character '\"' after object key:value pair", "task-definition", "register", "-f", f)
}

// TestInterruptedWait: Ctrl-C while following a deployment says that the
// deployment goes on and how to follow it again, not "context canceled",
// and the deployment does go on.
func TestInterruptedWait(t *testing.T) {
	h := newHarness(t)
	h.ok("cluster", "create", "c")
	h.ok("capacity-provider", "create", "busy", "--cluster", "c", "--vcpu", "2", "--memory-mib", "4096")
	h.ok("daemon-task-definition", "register", "-f", "testdata/cloudwatch-agent.json")
	// An instance without an agent never takes the daemon: the deployment
	// stays in progress.
	h.registerManaged("c", "busy", 1024, 2048)
	h.ok("daemon", "create", "slow", "--cluster", "c", "--task-definition", "cloudwatch-agent:1", "--capacity-provider", "busy")

	interrupt := func(args ...string) result {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(time.Second, cancel)
		var out, errb bytes.Buffer
		code := run(ctx, args, func(k string) string { return h.env[k] }, strings.NewReader(""), &out, &errb)
		return result{code, out.String(), errb.String()}
	}
	r := interrupt("daemon", "update", "slow", "--cluster", "c", "--keep-unspecified", "--wait")
	want := "capstan: stopped waiting; the deployment goes on in the server. Follow it again with: capstan daemon rollout status slow --cluster c\n"
	if r.code != exitInterrupted || r.stderr != want {
		t.Fatalf("interrupted update --wait: exit %d\nstderr:\n%s\nwant:\n%s", r.code, r.stderr, want)
	}
	if st := h.latestDeployment("slow")["status"]; st != "IN_PROGRESS" {
		t.Fatalf("the deployment is %v after the interrupted wait", st)
	}
	r = interrupt("daemon", "rollout", "status", "slow", "--cluster", "c")
	if r.code != exitInterrupted || r.stderr != want {
		t.Fatalf("interrupted rollout status: exit %d\n%s", r.code, r.stderr)
	}

	// A service whose task has nowhere to run: its deployment goes on too.
	h.ok("task-definition", "register", "-f", "testdata/web.json")
	r = interrupt("service", "create", "web", "--cluster", "c", "--task-definition", "web", "--wait")
	want = "capstan: stopped waiting; the deployment goes on in the server. Follow it again with: capstan service status web --cluster c --wait\n"
	if r.code != exitInterrupted || r.stderr != want {
		t.Fatalf("interrupted service create --wait: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
}

// TestEventsOncePerChange: writes of an instance that change nothing a
// row shows (its attributes, here) record events that read the same; the
// table prints a resource's row once per change, JSON keeps every event.
func TestEventsOncePerChange(t *testing.T) {
	h := newHarness(t)
	h.ok("cluster", "create", "ev")
	inst := h.registerInstance("ev")
	for i := range 3 {
		_, err := h.srv.ECS().PutAttributes(context.Background(), &ecs.PutAttributesInput{Cluster: aws.String("ev"),
			Attributes: []types.Attribute{{Name: aws.String("rack"), Value: aws.String(strconv.Itoa(i)), TargetId: aws.String(inst), TargetType: types.TargetTypeContainerInstance}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	h.setInstanceState("ev", inst, types.ContainerInstanceStatusDraining)
	h.setInstanceState("ev", inst, types.ContainerInstanceStatusActive)

	all := jsonLines(t, h.ok("events", "--cluster", "ev", "-o", "json"))
	active := 0
	for _, e := range all {
		if get(t, e, "detail", "status") == "ACTIVE" {
			active++
		}
	}
	if active < 3 {
		t.Fatalf("want repeated ACTIVE events to dedupe, got %d events:\n%v", len(all), all)
	}
	var rows []string
	for _, line := range strings.Split(strings.TrimSpace(h.ok("events", "--cluster", "ev")), "\n")[1:] {
		f := strings.Fields(line)
		rows = append(rows, f[len(f)-3])
	}
	if strings.Join(rows, " ") != "ACTIVE, DRAINING, ACTIVE," {
		t.Fatalf("table rows %v, want one per change", rows)
	}
}
