package ops

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/audit"
	"github.com/capstanhq/capstan/internal/auth"
	"github.com/capstanhq/capstan/internal/fault"
)

func auditFixture(t *testing.T) (auditLister, *audit.Trail) {
	t.Helper()
	tr := audit.New(audit.Config{Store: openStore(t), Region: "us-east-1", AccountID: "123456789012"})
	t.Cleanup(func() { tr.Close(context.Background()) })
	return auditLister{tr}, tr
}

// Each bad filter is refused naming its member.
func TestListAuditEventsRefusesBadFilters(t *testing.T) {
	l, _ := auditFixture(t)
	raw := func(s string) json.RawMessage { return json.RawMessage(s) }
	cases := map[string]ListAuditEventsRequest{
		"principal":   {Principal: strings.Repeat("p", 2049)},
		"accessKeyId": {AccessKeyID: "AKID WITH SPACE"},
		"eventName":   {EventName: "Create-Cluster"},
		"startTime":   {StartTime: raw(`"yesterday"`)},
		"endTime":     {EndTime: raw(`true`)},
		"maxResults":  {MaxResults: ptr(int32(1001))},
		"waitSeconds": {WaitSeconds: ptr(int32(21))},
		"nextToken":   {NextToken: "not-a-token"},
	}
	cases["endTime "] = ListAuditEventsRequest{StartTime: raw(`1767000000`), EndTime: raw(`"2025-01-01T00:00:00Z"`)}
	for field, req := range cases {
		_, err := l.ListAuditEvents(context.Background(), &req)
		fe := fault.As(err)
		if fe == nil || fe.Kind != fault.InvalidParameter || !strings.HasPrefix(fe.Message, strings.TrimSpace(field)+": ") {
			t.Errorf("%s: %v", field, err)
		}
	}
}

// Times are taken as epoch seconds or RFC 3339; the answer carries the
// records in range and a nextToken that goes on from them.
func TestListAuditEvents(t *testing.T) {
	l, tr := auditFixture(t)
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	root := auth.Principal{AccessKeyID: "AKIDROOT", Role: auth.RoleAdmin}
	for i, op := range []string{"CreateCluster", "ListClusters", "DeleteCluster"} {
		tr.Record(api.Record{Time: base.Add(time.Duration(i) * time.Minute), Principal: root, AccessKeyID: "AKIDROOT", Operation: op})
	}
	start, _ := json.Marshal(base.Add(time.Minute).Unix())
	end, _ := json.Marshal(base.Add(2 * time.Minute).Format(time.RFC3339))
	out, err := l.ListAuditEvents(context.Background(), &ListAuditEventsRequest{StartTime: start, EndTime: end, Principal: "root"})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Events) != 2 || out.Events[0].EventName != "ListClusters" || out.Events[1].EventName != "DeleteCluster" || out.NextToken == "" {
		t.Fatalf("%+v", out)
	}
	next, err := l.ListAuditEvents(context.Background(), &ListAuditEventsRequest{NextToken: out.NextToken})
	if err != nil || len(next.Events) != 0 || next.NextToken == "" {
		t.Fatalf("after the nextToken: %+v %v", next, err)
	}
}
