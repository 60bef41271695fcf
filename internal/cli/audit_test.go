package cli

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/smithy-go"
)

// auditLine is what the test reads of a record.
type auditLine struct {
	EventName       string `json:"eventName"`
	EventSource     string `json:"eventSource"`
	EventType       string `json:"eventType"`
	EventID         string `json:"eventID"`
	RequestID       string `json:"requestID"`
	SourceIPAddress string `json:"sourceIPAddress"`
	UserAgent       string `json:"userAgent"`
	ErrorCode       string `json:"errorCode"`
	UserIdentity    struct {
		Type        string `json:"type"`
		ARN         string `json:"arn"`
		AccessKeyID string `json:"accessKeyId"`
	} `json:"userIdentity"`
	AdditionalEventData *struct {
		CallCount  int `json:"callCount"`
		ErrorCount int `json:"errorCount"`
	} `json:"additionalEventData"`
}

func auditLines(t *testing.T, out string) []auditLine {
	t.Helper()
	var recs []auditLine
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var r auditLine
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("not a JSON record: %q: %v", line, err)
		}
		recs = append(recs, r)
	}
	return recs
}

// find returns the records of op by a caller of identity type typ.
func find(recs []auditLine, op, typ string) []auditLine {
	var out []auditLine
	for _, r := range recs {
		if r.EventName == op && r.UserIdentity.Type == typ {
			out = append(out, r)
		}
	}
	return out
}

// hasRow reports whether a line of out holds each of parts, in order.
func hasRow(out string, parts ...string) bool {
	for _, line := range strings.Split(out, "\n") {
		rest, ok := line, true
		for _, p := range parts {
			i := strings.Index(rest, p)
			if i < 0 {
				ok = false
				break
			}
			rest = rest[i+len(p):]
		}
		if ok {
			return true
		}
	}
	return false
}

func errorCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// Calls through the real SDK, allowed, refused and badly signed, are in
// the trail with their caller and outcome; capstan audit filters and
// follows it; an agent's calls are summarised, and what the server held
// when it stopped is written.
func TestAudit(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	admin := h.srv.Config.AdminKeyID
	h.ok("cluster", "create", "au")
	var cred struct{ AccessKeyID, SecretAccessKey string }
	if err := json.Unmarshal([]byte(h.ok("agent-credential", "create", "--cluster", "au", "-o", "json")), &cred); err != nil {
		t.Fatal(err)
	}
	agent := h.srv.ECSWith(cred.AccessKeyID, cred.SecretAccessKey)
	_, err := agent.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("not-mine")})
	if errorCode(err) != "AccessDeniedException" {
		t.Fatalf("agent's CreateCluster: %v", err)
	}
	for range 3 {
		if _, err := agent.DiscoverPollEndpoint(ctx, &ecs.DiscoverPollEndpointInput{Cluster: aws.String("au")}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = h.srv.ECSWith(admin, "not-the-secret").ListClusters(ctx, &ecs.ListClustersInput{})
	if errorCode(err) != "InvalidSignatureException" {
		t.Fatalf("badly signed ListClusters: %v", err)
	}

	// Each call is handed to the trail once answered: wait for the last.
	var recs []auditLine
	waitFor(t, "the badly signed call's record", func() bool {
		recs = auditLines(t, h.ok("audit", "-o", "json"))
		return len(find(recs, "ListClusters", "Unknown")) == 1
	})
	created := find(recs, "CreateCluster", "Root")
	if len(created) != 1 || created[0].ErrorCode != "" || created[0].UserIdentity.ARN != "arn:aws:iam::123456789012:root" ||
		created[0].UserIdentity.AccessKeyID != admin || created[0].SourceIPAddress != "127.0.0.1" ||
		created[0].EventSource != "ecs.amazonaws.com" || created[0].EventType != "AwsApiCall" || created[0].RequestID == "" ||
		created[0].EventID == "" || !strings.Contains(created[0].UserAgent, "aws-sdk-go-v2") {
		t.Fatalf("root's CreateCluster: %+v", created)
	}
	if len(find(recs, "CreateAgentCredential", "Root")) != 1 {
		t.Fatalf("no CreateAgentCredential record in %+v", recs)
	}
	denied := find(recs, "CreateCluster", "Agent")
	if len(denied) != 1 || denied[0].ErrorCode != "AccessDeniedException" || denied[0].UserIdentity.AccessKeyID != cred.AccessKeyID {
		t.Fatalf("agent's CreateCluster: %+v", denied)
	}
	if bad := find(recs, "ListClusters", "Unknown")[0]; bad.ErrorCode != "InvalidSignatureException" || bad.UserIdentity.AccessKeyID != admin || bad.UserIdentity.ARN != "" {
		t.Fatalf("badly signed ListClusters: %+v", bad)
	}
	if len(find(recs, "DiscoverPollEndpoint", "Agent")) != 0 {
		t.Fatalf("an agent's successful calls listed one by one: %+v", recs)
	}
	if len(recs) != 4 {
		t.Fatalf("%d records, want 4 (the trail's own reads are left out): %+v", len(recs), recs)
	}

	// The table, and the filters.
	out := h.ok("audit")
	if !hasLine(out, "TIME", "PRINCIPAL", "SOURCE", "EVENT", "RESOURCES", "OUTCOME") || !hasRow(out, "root", "127.0.0.1", "CreateCluster", "OK") ||
		!hasRow(out, "agent/"+cred.AccessKeyID, "CreateCluster", "AccessDeniedException") ||
		!hasRow(out, "unknown/"+admin, "ListClusters", "InvalidSignatureException") {
		t.Fatalf("table:\n%s", out)
	}
	names := func(args ...string) string {
		var n []string
		for _, r := range auditLines(t, h.ok(append([]string{"audit", "--json"}, args...)...)) {
			n = append(n, r.EventName+"/"+r.UserIdentity.Type)
		}
		return strings.Join(n, " ")
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--errors"}, "CreateCluster/Agent ListClusters/Unknown"},
		{[]string{"--access-key", cred.AccessKeyID}, "CreateCluster/Agent"},
		{[]string{"--principal", "arn:aws:iam::123456789012:root", "--event", "CreateCluster"}, "CreateCluster/Root"},
		{[]string{"--since", "2000-01-01", "--until", "2000-01-02"}, ""},
	} {
		if got := names(c.args...); got != c.want {
			t.Errorf("%v: got %q, want %q", c.args, got, c.want)
		}
	}
	// Reading the trail is recorded, and shown when asked for.
	if got := names("--event", "ListAuditEvents", "--principal", "root"); !strings.HasPrefix(got, "ListAuditEvents/Root") {
		t.Errorf("the trail's reads: %q", got)
	}
	h.fails(2, `--since "yesterday"`, "audit", "--since", "yesterday")
	h.fails(1, "InvalidParameterException: eventName", "audit", "--event", "Not-An-Operation")
	if out := h.ok("audit", "-h"); !strings.Contains(out, "Usage: capstan audit [--principal P]") || !strings.Contains(out, "--follow") {
		t.Fatalf("help:\n%s", out)
	}

	// --follow prints a call made after it started.
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var stdout, stderr syncBuffer
	code := make(chan int, 1)
	go func() {
		code <- run(fctx, []string{"audit", "--follow", "--json"}, func(k string) string { return h.env[k] }, strings.NewReader(""), &stdout, &stderr)
	}()
	waitFor(t, "the records so far", func() bool { return len(auditLines(t, stdout.String())) == 4 })
	if _, err := h.srv.ECS().DescribeClusters(ctx, &ecs.DescribeClustersInput{Clusters: []string{"au"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the followed DescribeClusters", func() bool {
		return len(find(auditLines(t, stdout.String()), "DescribeClusters", "Root")) == 1
	})
	cancel()
	select {
	case c := <-code:
		if c != 0 || stderr.String() != "" {
			t.Fatalf("follow exited %d: %s", c, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("follow did not stop when cancelled")
	}

	// The agent's calls of this minute are summarised once it is over, or
	// when the server stops: a restart shows them.
	h.srv = h.srv.Restart(t)
	recs = auditLines(t, h.ok("audit", "--access-key", cred.AccessKeyID, "--json"))
	sums := find(recs, "DiscoverPollEndpoint", "Agent")
	if len(sums) != 1 || sums[0].AdditionalEventData == nil || sums[0].AdditionalEventData.CallCount != 3 || sums[0].AdditionalEventData.ErrorCount != 0 {
		t.Fatalf("the agent's records: %+v", recs)
	}
	if out := h.ok("audit", "--access-key", cred.AccessKeyID); !hasRow(out, "agent/"+cred.AccessKeyID, "DiscoverPollEndpoint", "OK (3 calls)") {
		t.Fatalf("summary row:\n%s", out)
	}
	if m := h.srv.Metrics(t); !strings.Contains(m, "capstan_audit_records_written_total") || !strings.Contains(m, `capstan_audit_records_dropped_total{reason="buffer_full"} 0`) {
		t.Fatalf("metrics lack the trail's")
	}
}
