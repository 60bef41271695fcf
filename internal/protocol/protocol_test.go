package protocol

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"testing"
)

// TestWireFormat pins the session's wire format: testdata/wire.jsonl is
// written by hand, one message of each type, and must decode with no
// member left over and encode back byte for byte. Agents and servers of
// different versions talk through it, so a renamed member, or a zero that
// stops being sent (an exit code 0) or starts being sent, must show here.
func TestWireFormat(t *testing.T) {
	f, err := os.Open("testdata/wire.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var m Message
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("decode %s: %v", line, err)
		}
		out, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out, line) {
			t.Errorf("%s message changes through the structs:\nwire:    %s\nencoded: %s", m.Type, line, out)
		}
		// Exactly the member named by Type is set.
		var members map[string]json.RawMessage
		if err := json.Unmarshal(out, &members); err != nil {
			t.Fatal(err)
		}
		if _, ok := members[m.Type]; !ok || len(members) != 2 {
			t.Errorf("%s message has members %v", m.Type, keys(members))
		}
		seen[m.Type] = true
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{TypeHello, TypeManifest, TypeManifestAck, TypeStateChange, TypeStateAck, TypeHeartbeat, TypeError} {
		if !seen[typ] {
			t.Errorf("no %s message in testdata/wire.jsonl", typ)
		}
	}
}

// TestZeroesOnTheWire: what is not known yet (a time, a stop code, the
// exit code of a container still running) is left out; an exit code of 0
// is known and sent.
func TestZeroesOnTheWire(t *testing.T) {
	zero := 0
	st := TaskState{Arn: "t", LastStatus: "RUNNING", Seq: 2, Containers: []ContainerState{
		{Name: "running", LastStatus: "RUNNING"},
		{Name: "done", LastStatus: "STOPPED", ExitCode: &zero},
	}}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Task       map[string]json.RawMessage
		Containers []map[string]json.RawMessage `json:"containers"`
	}
	if err := json.Unmarshal(b, &got.Task); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"healthStatus", "pullStartedAt", "pullStoppedAt", "startedAt", "stoppingAt", "stoppedAt", "stopCode", "stoppedReason"} {
		if v, ok := got.Task[k]; ok {
			t.Errorf("task state sends %s=%s before it is known", k, v)
		}
	}
	if v, ok := got.Containers[0]["exitCode"]; ok {
		t.Errorf("a running container sends exitCode=%s", v)
	}
	if v := got.Containers[1]["exitCode"]; string(v) != "0" {
		t.Errorf("a container that exited 0 sends exitCode=%s, want 0 (%s)", v, b)
	}
}

// A session outlives one lost heartbeat: the silence limit covers at
// least two intervals.
func TestTiming(t *testing.T) {
	if SilenceLimit < 2*HeartbeatInterval {
		t.Fatalf("silence limit %s is under two heartbeat intervals (%s)", SilenceLimit, HeartbeatInterval)
	}
}

func keys(m map[string]json.RawMessage) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
