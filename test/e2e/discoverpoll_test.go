package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"

	"github.com/capstanhq/capstan/internal/runtime/sim"
	"github.com/capstanhq/capstan/internal/server"
	"github.com/capstanhq/capstan/internal/testenv"
	"github.com/capstanhq/capstan/internal/testenv/agents"
)

// tcpRelay forwards connections to target until closed, then refuses
// them: a server that died, in front of one that lives.
type tcpRelay struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func startTCPRelay(t *testing.T, target string) *tcpRelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &tcpRelay{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			r.mu.Lock()
			r.conns = append(r.conns, c, up)
			r.mu.Unlock()
			go func() { io.Copy(up, c); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
	t.Cleanup(r.close)
	return r
}

func (r *tcpRelay) close() {
	r.ln.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		c.Close()
	}
}

// DiscoverPollEndpoint answers one URL in endpoint and telemetryEndpoint,
// which the SDKs parse; the whole --advertise-url list is in
// capstanEndpoints, from which an agent told of one server learns the
// others and fails over to them.
func TestDiscoverPollEndpointListsEveryServer(t *testing.T) {
	ctx := context.Background()
	own := freeAddr(t)
	dead := startTCPRelay(t, own) // the first server of the list, soon gone
	first, second := "http://"+dead.ln.Addr().String(), "http://"+own
	srv := testenv.StartServerWith(t, func(c *server.Config) { c.Listen, c.AdvertiseURL = own, first+","+second })
	c := srv.ECS()
	if _, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("dp")}); err != nil {
		t.Fatal(err)
	}

	out, err := c.DiscoverPollEndpoint(ctx, &ecs.DiscoverPollEndpointInput{Cluster: aws.String("dp")})
	if err != nil {
		t.Fatal(err)
	}
	if aws.ToString(out.Endpoint) != first || aws.ToString(out.TelemetryEndpoint) != first {
		t.Fatalf("AWS SDK: endpoint %q, telemetryEndpoint %q, want one URL, %s", aws.ToString(out.Endpoint), aws.ToString(out.TelemetryEndpoint), first)
	}

	// boto3 parses it too; the raw answer holds the list.
	if err := exec.Command("python3", "-c", "import boto3").Run(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("python3 with boto3 is required when CI is set: %v", err)
		}
		t.Logf("python3 with boto3 not available, boto3 not checked: %v", err)
	} else {
		script := `
import boto3, json, sys
c = boto3.client("ecs", endpoint_url=sys.argv[1], region_name="us-east-1")
raw = {}
c.meta.events.register("after-call.ecs.DiscoverPollEndpoint", lambda http_response, **kw: raw.update(body=http_response.content.decode()))
r = c.discover_poll_endpoint(cluster="dp")
r.pop("ResponseMetadata")
print(json.dumps({"parsed": r, "raw": json.loads(raw["body"])}))
`
		cmd := exec.Command("python3", "-c", script, srv.URL)
		cmd.Env = srv.Env()
		b, err := cmd.Output()
		if err != nil {
			var stderr string
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = string(ee.Stderr)
			}
			t.Fatalf("boto3: %v\n%s", err, stderr)
		}
		var got struct {
			Parsed map[string]any
			Raw    struct {
				CapstanEndpoints []string
			}
		}
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%v: %s", err, b)
		}
		if got.Parsed["endpoint"] != first || got.Parsed["telemetryEndpoint"] != first {
			t.Fatalf("boto3 parsed %v, want endpoint and telemetryEndpoint %s", got.Parsed, first)
		}
		if strings.Join(got.Raw.CapstanEndpoints, ",") != first+","+second {
			t.Fatalf("capstanEndpoints %v, want [%s %s]", got.Raw.CapstanEndpoints, first, second)
		}
	}

	// An agent told of the first server only.
	f := &fleet{t: t, srv: srv, c: c, rt: sim.New(sim.Config{}), image: "busybox", cluster: "dp"}
	env := agents.Env(t, srv, "dp", t.TempDir())
	env["CAPSTAN_ENDPOINT"] = first
	agents.StartEnv(t, env, f.rt)
	eventually(t, 30*time.Second, "the agent connected through the first server", func() bool { return f.connectedInstances() == 1 })
	dead.close()
	// Only a session with the second server places and starts the task:
	// until the agent has one, the instance is disconnected.
	td := f.register("after", f.container("main", "sleep", "300"))
	var arn, reason string
	eventually(t, 60*time.Second, "the agent back through the second server", func() bool {
		out, err := c.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String("dp"), TaskDefinition: aws.String(td)})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Tasks) == 1 {
			arn = aws.ToString(out.Tasks[0].TaskArn)
			return true
		}
		if len(out.Failures) > 0 {
			reason = aws.ToString(out.Failures[0].Reason)
		}
		return false
	})
	t.Logf("RunTask refused while the agent moved: %q", reason)
	f.waitStatus(arn, "RUNNING", 60*time.Second)
	c.StopTask(ctx, &ecs.StopTaskInput{Cluster: aws.String("dp"), Task: aws.String(arn)})
}
