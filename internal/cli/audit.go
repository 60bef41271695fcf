package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
)

func auditNoun() *noun {
	return &noun{
		name:    "audit",
		summary: "Show the audit trail of API calls (who, from where, what, outcome); --follow streams it.",
		run: &verb{
			args:    "[--principal P] [--access-key K] [--event NAME] [--since DURATION|TIME] [--until TIME] [--errors] [--follow] [--json]",
			summary: "Show recorded API calls, oldest first.",
			details: `
Every call to the server's API is recorded, allowed or refused, in
CloudTrail's record shape, and kept for the server's --audit-retention (24h
by default). --principal takes an identity's ARN, an IAM user name, or root.
--since takes a duration before now (90m) or a time (RFC 3339, or a date);
it defaults to 1h. An agent's successful calls show as one row per
credential, operation and minute with their count; its failed calls also
show one by one. Reading the trail is recorded too, and shown only with
--event ListAuditEvents. --json (or -o json) prints one record per line.`,
			bind: auditRun,
		},
	}
}

// listAuditInput is CapstanV1.ListAuditEvents's request.
type listAuditInput struct {
	Principal   string `json:"principal,omitempty"`
	AccessKeyID string `json:"accessKeyId,omitempty"`
	EventName   string `json:"eventName,omitempty"`
	StartTime   string `json:"startTime,omitempty"`
	EndTime     string `json:"endTime,omitempty"`
	ErrorsOnly  bool   `json:"errorsOnly,omitempty"`
	MaxResults  int    `json:"maxResults,omitempty"`
	NextToken   string `json:"nextToken,omitempty"`
	WaitSeconds int    `json:"waitSeconds,omitempty"`
}

type listAuditOutput struct {
	Events    []json.RawMessage `json:"events"`
	NextToken string            `json:"nextToken"`
}

// auditRecord is what a row shows of a record; -o json prints the record
// as the server sent it.
type auditRecord struct {
	EventTime       time.Time `json:"eventTime"`
	EventName       string    `json:"eventName"`
	SourceIPAddress string    `json:"sourceIPAddress"`
	UserIdentity    struct {
		Type        string `json:"type"`
		ARN         string `json:"arn"`
		AccessKeyID string `json:"accessKeyId"`
		UserName    string `json:"userName"`
	} `json:"userIdentity"`
	Resources []struct {
		ARN string `json:"ARN"`
	} `json:"resources"`
	ErrorCode           string `json:"errorCode"`
	AdditionalEventData *struct {
		CallCount  int `json:"callCount"`
		ErrorCount int `json:"errorCount"`
	} `json:"additionalEventData"`
}

// auditPage is how many records one call asks for: a page of long
// records stays well within what callExtension reads.
const auditPage = 200

func auditRun(fs *flag.FlagSet) action {
	var in listAuditInput
	var since, until string
	var follow, asJSON bool
	fs.StringVar(&in.Principal, "principal", "", "only calls by `ARN|USER` (an identity's ARN, an IAM user name, or root)")
	fs.StringVar(&in.AccessKeyID, "access-key", "", "only calls signed with access key `ID`")
	fs.StringVar(&in.EventName, "event", "", "only calls of operation `NAME` (CreateCluster, UpdateDaemon...)")
	fs.StringVar(&since, "since", "1h", "from `DURATION|TIME` (90m before now, or 2026-01-02T15:04:05Z)")
	fs.StringVar(&until, "until", "", "up to `TIME` (or a DURATION before now)")
	fs.BoolVar(&in.ErrorsOnly, "errors", false, "only calls that failed or were refused")
	fs.BoolVar(&follow, "follow", false, "keep printing new calls until interrupted")
	fs.BoolVar(&asJSON, "json", false, "print one JSON record per line (as -o json)")
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 0, 0, ""); err != nil {
			return err
		}
		now := time.Now()
		var err error
		if in.StartTime, err = auditFlagTime("since", since, now); err != nil {
			return err
		}
		if in.EndTime, err = auditFlagTime("until", until, now); err != nil {
			return err
		}
		if _, err := s.client(ctx); err != nil {
			return err
		}
		in.MaxResults = auditPage
		p := auditPrinter{s: s, json: asJSON || s.json()}
		p.header()
		return readPages(ctx, s, follow, in.MaxResults, func(wait int) (out listAuditOutput, err error) {
			in.WaitSeconds = wait
			err = s.callExtension(ctx, "ListAuditEvents", in, &out)
			return out, err
		}, func(out listAuditOutput) int {
			p.print(out.Events)
			in.NextToken = out.NextToken
			return len(out.Events)
		})
	}
}

// auditFlagTime reads --since or --until: a duration before now, an RFC 3339
// time, or a date (midnight UTC), as the RFC 3339 string the server takes.
func auditFlagTime(name, v string, now time.Time) (string, error) {
	if v == "" {
		return "", nil
	}
	if d, err := time.ParseDuration(v); err == nil {
		if d < 0 {
			return "", usageErrorf("--%s %q: a duration is how long before now, and must not be negative", name, v)
		}
		return now.Add(-d).UTC().Format(time.RFC3339Nano), nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02"} {
		if t, err := time.Parse(layout, v); err == nil {
			return t.UTC().Format(time.RFC3339Nano), nil
		}
	}
	return "", usageErrorf("--%s %q: want a duration (90m, 24h) or a time (2026-01-02T15:04:05Z, 2026-01-02)", name, v)
}

// auditPrinter writes records as table rows or JSON lines; rows have fixed
// widths so that followed rows line up.
type auditPrinter struct {
	s    *session
	json bool
}

const auditRow = "%-25s  %-32s  %-15s  %-30s  %-40s  %s\n"

func (p auditPrinter) header() {
	if !p.json {
		fmt.Fprintf(p.s.stdout, auditRow, "TIME", "PRINCIPAL", "SOURCE", "EVENT", "RESOURCES", "OUTCOME")
	}
}

func (p auditPrinter) print(recs []json.RawMessage) {
	for _, raw := range recs {
		if p.json {
			fmt.Fprintln(p.s.stdout, string(raw))
			continue
		}
		var r auditRecord
		if err := json.Unmarshal(raw, &r); err != nil {
			p.s.warn("unreadable audit record: %v", err)
			continue
		}
		fmt.Fprintf(p.s.stdout, auditRow, r.EventTime.Local().Format(time.RFC3339), auditPrincipal(r), orDash(r.SourceIPAddress),
			r.EventName, auditResources(r), auditOutcome(r))
	}
}

// auditPrincipal is who called, short: root, user/NAME, agent/KEY.
func auditPrincipal(r auditRecord) string {
	id := r.UserIdentity
	switch {
	case id.ARN != "":
		return shortArn(id.ARN)
	case id.UserName != "":
		return "user/" + id.UserName
	case id.Type == "Agent":
		return "agent/" + id.AccessKeyID
	case id.AccessKeyID != "":
		return strings.ToLower(id.Type) + "/" + id.AccessKeyID
	}
	return strings.ToLower(orDash(id.Type))
}

func auditResources(r auditRecord) string {
	var names []string
	for _, res := range r.Resources {
		names = append(names, shortArn(res.ARN))
	}
	return orDash(strings.Join(names, ","))
}

// auditOutcome is OK or the error code; for an agent's summary, how many
// calls it stands for.
func auditOutcome(r auditRecord) string {
	out := "OK"
	if r.ErrorCode != "" {
		out = r.ErrorCode
	}
	if s := r.AdditionalEventData; s != nil {
		out += " (" + strconv.Itoa(s.CallCount) + " calls"
		if s.ErrorCount > 0 {
			out += ", " + strconv.Itoa(s.ErrorCount) + " failed"
		}
		out += ")"
	}
	return out
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
