package protocol

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"strings"
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
	for _, typ := range []string{TypeHello, TypeManifest, TypeManifestAck, TypeStateChange, TypeStateAck, TypeHeartbeat, TypeError,
		TypeLogRequest, TypeLogCancel, TypeLogChunk, TypeLogEnd,
		TypeExecStart, TypeExecInput, TypeExecResize, TypeExecOutput, TypeExecAck, TypeExecExit, TypeExecCancel} {
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

func TestAwsvpcAttachment(t *testing.T) {
	const arn = "arn:aws:ecs:us-east-1:123456789012:task/prod/77aa66bb55cc"
	a := Attachment(arn, AttachmentAttached, "169.254.172.3", "02:42:a9:fe:ac:03")
	if a.Id != AttachmentID(arn) || len(a.Id) != 36 || strings.Count(a.Id, "-") != 4 {
		t.Errorf("id %q is not the task's UUID-shaped attachment ID", a.Id)
	}
	if AttachmentID(arn) == AttachmentID(arn+"x") || InterfaceID(arn) == InterfaceID(arn+"x") {
		t.Error("two tasks share an attachment or interface ID")
	}
	if a.Type != "ElasticNetworkInterface" || a.Status != "ATTACHED" {
		t.Errorf("type/status %s/%s", a.Type, a.Status)
	}
	for name, want := range map[string]string{
		DetailAddress: "169.254.172.3", DetailMAC: "02:42:a9:fe:ac:03", DetailDNSName: "ip-169-254-172-3",
		DetailInterfaceID: InterfaceID(arn),
	} {
		if got := Detail(a, name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if !strings.HasPrefix(InterfaceID(arn), "eni-") || len(InterfaceID(arn)) != 21 {
		t.Errorf("interface ID %q", InterfaceID(arn))
	}
	if p := Attachment(arn, AttachmentPrecreated, "", ""); Detail(p, DetailAddress) != "" || len(p.Details) != 1 {
		t.Errorf("precreated attachment has details %v", p.Details)
	}
}
