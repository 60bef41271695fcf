package gateway_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/coder/websocket"

	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/testenv"
)

// TestExecOverTheSession speaks the agent's side by hand: the server
// starts the command with the client's terminal size, never has more than
// a window of input unacknowledged by the agent, relays output (opening
// the agent's window as the client takes it) and the exit code, and the
// session goes on.
func TestExecOverTheSession(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := testenv.StartServer(t, "")
	admin := srv.ECS()
	a, _ := registerAgent(t, srv, "ex")
	m := a.must(protocol.TypeManifest, 10*time.Second)
	a.send(protocol.Message{Type: protocol.TypeManifestAck, ManifestAck: &protocol.ManifestAck{Seq: m.Manifest.Seq}})
	td, err := admin.RegisterTaskDefinition(ctx, &ecs.RegisterTaskDefinitionInput{Family: aws.String("ex"),
		ContainerDefinitions: []types.ContainerDefinition{{Name: aws.String("app"), Image: aws.String("busybox"), Memory: aws.Int32(128)}}})
	if err != nil {
		t.Fatal(err)
	}
	run, err := admin.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String("ex"), TaskDefinition: td.TaskDefinition.TaskDefinitionArn, EnableExecuteCommand: true})
	if err != nil || len(run.Tasks) != 1 {
		t.Fatalf("run task: %+v %v", run, err)
	}
	task := aws.ToString(run.Tasks[0].TaskArn)
	a.send(protocol.Message{Type: protocol.TypeStateChange, StateChange: &protocol.StateChange{ID: 1, Tasks: []protocol.TaskState{
		{Arn: task, LastStatus: "RUNNING", Seq: 1, Containers: []protocol.ContainerState{{Name: "app", LastStatus: "RUNNING"}}}}}})
	a.must(protocol.TypeStateAck, 10*time.Second)
	// The ack follows the write; the API reads what the store's watch has
	// brought, a moment later under load.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		d, err := admin.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: aws.String("ex"), Tasks: []string{task}})
		if err == nil && len(d.Tasks) == 1 && aws.ToString(d.Tasks[0].LastStatus) == "RUNNING" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("task not RUNNING after its report: %+v, %v", d, err)
		}
	}

	sess, err := admin.ExecuteCommand(ctx, &ecs.ExecuteCommandInput{Cluster: aws.String("ex"), Task: aws.String(task), Command: aws.String("cat"), Interactive: true})
	if err != nil {
		t.Fatal(err)
	}
	c, _, err := websocket.Dial(ctx, aws.ToString(sess.Session.StreamUrl), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	send := func(f protocol.ExecFrame) {
		b, _ := json.Marshal(f)
		if err := c.Write(ctx, websocket.MessageText, b); err != nil {
			t.Fatal(err)
		}
	}
	send(protocol.ExecFrame{Type: protocol.FrameHello, Token: aws.ToString(sess.Session.TokenValue), TTY: true, Rows: 24, Cols: 80})
	st := a.must(protocol.TypeExecStart, 10*time.Second).ExecStart
	if st.TaskArn != task || st.Container != "app" || strings.Join(st.Cmd, " ") != "cat" || !st.TTY || st.Rows != 24 || st.Cols != 80 {
		t.Fatalf("exec start %+v", st)
	}

	// Two windows and more of input: the agent is sent one until it acknowledges.
	input := strings.Repeat("x", 2*protocol.ExecWindow+1000)
	b, _ := json.Marshal(protocol.ExecFrame{Type: protocol.FrameInput, Data: []byte(input)})
	go c.Write(ctx, websocket.MessageText, b)
	// window reads one window of input, then checks that none comes before
	// the answer to a state report sent after it.
	window := func(seq uint64) {
		t.Helper()
		n := 0
		for n < protocol.ExecWindow {
			m := a.must(protocol.TypeExecInput, 10*time.Second)
			if len(m.ExecInput.Data) > protocol.ExecChunk {
				t.Fatalf("an input message of %d bytes", len(m.ExecInput.Data))
			}
			n += len(m.ExecInput.Data)
		}
		if n != protocol.ExecWindow {
			t.Fatalf("the agent was sent %d bytes of input for a window of %d", n, protocol.ExecWindow)
		}
		time.Sleep(200 * time.Millisecond) // what the server would send past the window would be on its way
		a.send(protocol.Message{Type: protocol.TypeStateChange, StateChange: &protocol.StateChange{ID: seq, Tasks: []protocol.TaskState{
			{Arn: task, LastStatus: "RUNNING", Seq: seq, Containers: []protocol.ContainerState{{Name: "app", LastStatus: "RUNNING"}}}}}})
		for {
			m, err := a.nextAny(10 * time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if m.Type == protocol.TypeExecInput {
				t.Fatalf("input past the window: %d more bytes before the agent acknowledged", len(m.ExecInput.Data))
			}
			if m.Type == protocol.TypeStateAck {
				return
			}
		}
	}
	window(2)
	a.send(protocol.Message{Type: protocol.TypeExecAck, ExecAck: &protocol.ExecAck{ID: st.ID, Bytes: protocol.ExecWindow}})
	window(3)

	// Output is relayed and acknowledged as the client takes it; then the exit.
	a.send(protocol.Message{Type: protocol.TypeExecOutput, ExecOutput: &protocol.ExecOutput{ID: st.ID, Stream: "stdout", Data: []byte("hello")}})
	code := 7
	a.send(protocol.Message{Type: protocol.TypeExecExit, ExecExit: &protocol.ExecExit{ID: st.ID, Code: &code}})
	var frames []protocol.ExecFrame
	for len(frames) < 2 {
		_, b, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("read: %v after %+v", err, frames)
		}
		var f protocol.ExecFrame
		json.Unmarshal(b, &f)
		frames = append(frames, f)
	}
	if frames[0].Type != protocol.FrameOutput || string(frames[0].Data) != "hello" || frames[1].Type != protocol.FrameExit || *frames[1].Code != 7 {
		t.Fatalf("frames %+v", frames)
	}
	if ack := a.must(protocol.TypeExecAck, 10*time.Second).ExecAck; ack.ID != st.ID || ack.Bytes != 5 {
		t.Fatalf("output ack %+v", ack)
	}
	// The session goes on: a state report is still acknowledged.
	a.send(protocol.Message{Type: protocol.TypeStateChange, StateChange: &protocol.StateChange{ID: 4, Tasks: []protocol.TaskState{
		{Arn: task, LastStatus: "RUNNING", Seq: 4, Containers: []protocol.ContainerState{{Name: "app", LastStatus: "RUNNING"}}}}}})
	a.must(protocol.TypeStateAck, 10*time.Second)
}

// nextAny reads the next message of any type, within d.
func (a *agentConn) nextAny(d time.Duration) (protocol.Message, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var m protocol.Message
	_, b, err := a.conn.Read(ctx)
	if err != nil {
		return m, err
	}
	return m, json.Unmarshal(b, &m)
}
