package console_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/iam"

	"github.com/capstanhq/capstan/internal/testenv"
)

// sse is one server-sent event of a live page.
type sse struct{ event, id, data string }

// openLive opens the daemon's live stream as b and returns its events.
func openLive(t *testing.T, b *browser, arn string) <-chan sse {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.base+"/console/daemon/live?arn="+url.QueryEscape(arn), nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := (&http.Client{Jar: b.c.Jar}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("live stream: HTTP %d", resp.StatusCode)
	}
	out := make(chan sse, 64)
	go func() {
		defer resp.Body.Close()
		defer close(out)
		rd := bufio.NewReader(resp.Body)
		var ev sse
		var data []string
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimSuffix(line, "\n")
			switch {
			case line == "":
				if ev.event != "" {
					ev.data = strings.Join(data, "\n")
					out <- ev
				}
				ev, data = sse{}, nil
			case strings.HasPrefix(line, "event: "):
				ev.event = line[len("event: "):]
			case strings.HasPrefix(line, "id: "):
				ev.id = line[len("id: "):]
			case strings.HasPrefix(line, "data: "):
				data = append(data, line[len("data: "):])
			}
		}
	}()
	return out
}

func next(t *testing.T, who string, ch <-chan sse) sse {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatalf("%s: the live stream ended", who)
		}
		return ev
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: no live event within 20 s", who)
	}
	return sse{}
}

// userWith makes an IAM user allowed the actions on every resource.
func userWith(t *testing.T, srv *testenv.Server, name string, actions ...string) (key, secret string) {
	t.Helper()
	ctx := context.Background()
	c := iam.New(iam.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: credentials.NewStaticCredentialsProvider(adminKey, adminSecret, "")})
	if _, err := c.CreateUser(ctx, &iam.CreateUserInput{UserName: aws.String(name)}); err != nil {
		t.Fatal(err)
	}
	doc := `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["` + strings.Join(actions, `","`) + `"],"Resource":"*"}]}`
	if _, err := c.PutUserPolicy(ctx, &iam.PutUserPolicyInput{UserName: aws.String(name), PolicyName: aws.String("p"), PolicyDocument: aws.String(doc)}); err != nil {
		t.Fatal(err)
	}
	k, err := c.CreateAccessKey(ctx, &iam.CreateAccessKeyInput{UserName: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	return aws.ToString(k.AccessKey.AccessKeyId), aws.ToString(k.AccessKey.SecretAccessKey)
}

// TestLiveSharedRender: the open pages of one daemon get each update from
// one render (the event's id is the server's render count, so pages that
// rendered for themselves would see different ids), each with its own
// session's stop form, and a session without permission to read the
// daemon gets nothing of that render.
func TestLiveSharedRender(t *testing.T) {
	srv := testenv.StartServer(t, "")
	arn := daemonFixture(t, srv)
	a1, a2, viewer, outsider := newBrowser(t, srv), newBrowser(t, srv), newBrowser(t, srv), newBrowser(t, srv)
	a1.signIn(adminKey, adminSecret)
	a2.signIn(adminKey, adminSecret)
	viewer.signIn(readOnlyUser(t, srv))
	outsider.signIn(userWith(t, srv, "outsider", "ecs:ListClusters", "ecs:DescribeClusters"))
	tok := map[string]string{"a1": a1.csrf(), "a2": a2.csrf(), "viewer": viewer.csrf()}
	streams := map[string]<-chan sse{"a1": openLive(t, a1, arn), "a2": openLive(t, a2, arn), "viewer": openLive(t, viewer, arn)}
	out := openLive(t, outsider, arn)

	// check reads one event of each page: one render, each page's own
	// stop form and no other's token.
	check := func(step string) string {
		t.Helper()
		id, body := "", ""
		greyed := map[string]bool{}
		for _, who := range []string{"a1", "a2", "viewer"} {
			ev := next(t, step+" "+who, streams[who])
			if ev.event != "html" && ev.event != "patch" {
				t.Fatalf("%s: %s got a %q event", step, who, ev.event)
			}
			if ev.id == "" || id != "" && ev.id != id {
				t.Fatalf("%s: %s got render %q, another page render %q: not one shared render", step, who, ev.id, id)
			}
			id = ev.id
			for other, tk := range tok {
				if other != who && strings.Contains(ev.data, tk) {
					t.Fatalf("%s: %s's page holds %s's CSRF token", step, who, other)
				}
			}
			if strings.Contains(ev.data, `id="stop"`) {
				if !strings.Contains(ev.data, tok[who]) {
					t.Fatalf("%s: %s's stop form lacks its own CSRF token:\n%s", step, who, ev.data)
				}
				greyed[who] = strings.Contains(ev.data, `id="stop-denied"`)
			}
			// The same render: equal once each session's form is taken out.
			b := ev.data
			if ev.event == "patch" {
				var p struct {
					Head, Legend, Deps string
					Cells              [][2]string
				}
				if err := json.Unmarshal([]byte(ev.data), &p); err != nil {
					t.Fatalf("%s: %s's patch: %v", step, who, err)
				}
				b = p.Head + p.Legend + p.Deps + fmt.Sprint(p.Cells)
			}
			if i, j := strings.Index(b, `<form method="post" action="/console/daemon/stop"`), strings.Index(b, "</form>"); i >= 0 && j > i {
				b = b[:i] + b[j:]
			}
			if body != "" && b != body {
				t.Fatalf("%s: %s's update differs from the other pages':\n%s\n---\n%s", step, who, b, body)
			}
			body = b
		}
		if _, shown := greyed["a1"]; shown && !greyed["a1"] && !greyed["viewer"] {
			t.Fatalf("%s: the read-only viewer is offered the stop the admin is", step)
		}
		return id
	}
	first := check("open")
	ev := next(t, "outsider", out)
	if ev.id != "" || !strings.Contains(ev.data, "AccessDenied") || strings.Contains(ev.data, "live-head") {
		t.Fatalf("outsider's page: %+v, want the API's refusal and nothing of the daemon", ev)
	}

	// A change goes to every page from one render.
	if _, err := srv.ECS().UpdateDaemon(context.Background(), &ecs.UpdateDaemonInput{DaemonArn: aws.String(arn), DaemonTaskDefinitionArn: aws.String("agentd:2"),
		CapacityProviderArns: []string{"apps-mi"}}); err != nil {
		t.Fatal(err)
	}
	second := check("update")
	if second == first {
		t.Fatalf("the update came with the first render's id %s", first)
	}
	select {
	case ev, ok := <-out:
		if ok && (strings.Contains(ev.data, "agentd:2") || ev.id != "") {
			t.Fatalf("the outsider's page got the update: %+v", ev)
		}
	case <-time.After(time.Second):
	}
}
