package gateway_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/ops"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/testenv"
)

// getTaskLogs calls CapstanV1.GetTaskLogs as the admin.
func getTaskLogs(ctx context.Context, srv *testenv.Server, in ops.GetTaskLogsRequest) (ops.GetTaskLogsResponse, error) {
	var out ops.GetTaskLogsResponse
	body, _ := json.Marshal(in)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/", bytes.NewReader(body))
	if err != nil {
		return out, err
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	req.Header.Set("X-Amz-Target", "CapstanV1.GetTaskLogs")
	sum := sha256.Sum256(body)
	creds := aws.Credentials{AccessKeyID: srv.Config.AdminKeyID, SecretAccessKey: srv.Config.AdminSecret}
	if err := v4.NewSigner().SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), "ecs", "us-east-1", time.Now()); err != nil {
		return out, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return out, fmt.Errorf("%s: %s", resp.Status, b)
	}
	return out, json.Unmarshal(b, &out)
}

// TestLogRequestsOverTheSession speaks the agent's side by hand: the
// server asks for a container's logs with the caller's window and returns
// the chunks' lines in order; an agent that sends more than a window fails
// that request only (the session carries the next); a caller that goes
// away has the agent told to stop.
func TestLogRequestsOverTheSession(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartServer(t, "")
	admin := srv.ECS()
	a, _ := registerAgent(t, srv, "lg")
	m := a.must(protocol.TypeManifest, 10*time.Second)
	a.send(protocol.Message{Type: protocol.TypeManifestAck, ManifestAck: &protocol.ManifestAck{Seq: m.Manifest.Seq}})
	td, err := admin.RegisterTaskDefinition(ctx, &ecs.RegisterTaskDefinitionInput{Family: aws.String("lg"),
		ContainerDefinitions: []types.ContainerDefinition{{Name: aws.String("app"), Image: aws.String("busybox"), Memory: aws.Int32(128)}}})
	if err != nil {
		t.Fatal(err)
	}
	run, err := admin.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String("lg"), TaskDefinition: td.TaskDefinition.TaskDefinitionArn})
	if err != nil || len(run.Tasks) != 1 {
		t.Fatalf("run task: %+v %v", run, err)
	}
	task := aws.ToString(run.Tasks[0].TaskArn)

	type answer struct {
		out ops.GetTaskLogsResponse
		err error
	}
	ask := func(ctx context.Context, in ops.GetTaskLogsRequest) chan answer {
		ch := make(chan answer, 1)
		go func() {
			out, err := getTaskLogs(ctx, srv, in)
			ch <- answer{out, err}
		}()
		return ch
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	line := func(i int) protocol.LogLine {
		return protocol.LogLine{Time: t0.Add(time.Duration(i) * time.Millisecond), Stream: "stdout", Text: fmt.Sprintf("line-%d", i)}
	}

	// A request carries the caller's window; lines come back in order.
	got := ask(ctx, ops.GetTaskLogsRequest{Cluster: "lg", Task: task, MaxBytes: aws.Int32(4096), Tail: aws.Int32(5)})
	req := a.must(protocol.TypeLogRequest, 10*time.Second).LogRequest
	if req.TaskArn != task || req.Container != "app" || req.MaxBytes != 4096 || req.Tail != 5 || req.Wait != 0 {
		t.Fatalf("log request %+v", req)
	}
	a.send(protocol.Message{Type: protocol.TypeLogChunk, LogChunk: &protocol.LogChunk{ID: req.ID, Lines: []protocol.LogLine{line(1), line(2)}}})
	a.send(protocol.Message{Type: protocol.TypeLogChunk, LogChunk: &protocol.LogChunk{ID: req.ID, Lines: []protocol.LogLine{line(3)}}})
	a.send(protocol.Message{Type: protocol.TypeLogEnd, LogEnd: &protocol.LogEnd{ID: req.ID, Truncated: true}})
	ans := <-got
	if ans.err != nil {
		t.Fatal(ans.err)
	}
	var texts []string
	for _, e := range ans.out.Events {
		texts = append(texts, e.Message)
	}
	if strings.Join(texts, ",") != "line-1,line-2,line-3" || !ans.out.Truncated || ans.out.NextToken != "2026-01-02T03:04:05.003000001Z" {
		t.Fatalf("answer %+v", ans.out)
	}

	// The next page starts after the last line.
	got = ask(ctx, ops.GetTaskLogsRequest{Cluster: "lg", Task: task, NextToken: ans.out.NextToken})
	req = a.must(protocol.TypeLogRequest, 10*time.Second).LogRequest
	if !req.Since.Equal(t0.Add(3*time.Millisecond+time.Nanosecond)) || req.MaxBytes != protocol.LogMaxBytes {
		t.Fatalf("next page's request %+v", req)
	}
	// More chunks than a window can hold fail the request, not the session.
	for i := range protocol.LogMaxBytes/protocol.LogChunkBytes + 10 {
		a.send(protocol.Message{Type: protocol.TypeLogChunk, LogChunk: &protocol.LogChunk{ID: req.ID, Lines: []protocol.LogLine{line(i)}}})
	}
	if ans := <-got; ans.err == nil || !strings.Contains(ans.err.Error(), "ServerException") {
		t.Fatalf("overflowing agent: %+v", ans)
	}
	if c := a.must(protocol.TypeLogCancel, 10*time.Second).LogCancel; c.ID != req.ID {
		t.Fatalf("cancel %+v for request %d", c, req.ID)
	}
	got = ask(ctx, ops.GetTaskLogsRequest{Cluster: "lg", Task: task})
	req = a.must(protocol.TypeLogRequest, 10*time.Second).LogRequest
	a.send(protocol.Message{Type: protocol.TypeLogEnd, LogEnd: &protocol.LogEnd{ID: req.ID, Code: "ContainerNotFound", Message: "gone"}})
	if ans := <-got; ans.err == nil || !strings.Contains(ans.err.Error(), "ClientException") || !strings.Contains(ans.err.Error(), "ContainerNotFound: gone") {
		t.Fatalf("agent's refusal: %+v", ans)
	}

	// A caller that goes away: the agent is told to stop.
	cctx, cancel := context.WithCancel(ctx)
	got = ask(cctx, ops.GetTaskLogsRequest{Cluster: "lg", Task: task, WaitSeconds: aws.Int32(20)})
	req = a.must(protocol.TypeLogRequest, 10*time.Second).LogRequest
	if req.Wait != 20*time.Second {
		t.Fatalf("follow request %+v", req)
	}
	cancel()
	<-got
	if c := a.must(protocol.TypeLogCancel, 10*time.Second).LogCancel; c.ID != req.ID {
		t.Fatalf("cancel %+v for request %d", c, req.ID)
	}

	// A server holds a bounded number of requests: past it, callers are
	// told to retry.
	hold, release := context.WithCancel(ctx)
	var held []chan answer
	for range 64 {
		held = append(held, ask(hold, ops.GetTaskLogsRequest{Cluster: "lg", Task: task, WaitSeconds: aws.Int32(20)}))
	}
	for range 64 {
		a.must(protocol.TypeLogRequest, 10*time.Second)
	}
	if ans := <-ask(ctx, ops.GetTaskLogsRequest{Cluster: "lg", Task: task}); ans.err == nil || !strings.Contains(ans.err.Error(), "ThrottlingException") {
		t.Fatalf("request past the server's bound: %+v", ans)
	}
	release()
	for _, ch := range held {
		<-ch
	}
}
