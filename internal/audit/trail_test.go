package audit

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/auth"
	"github.com/capstanhq/capstan/internal/store"
)

func openStore(t testing.TB) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), store.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

// newTrail is a trail on st, closed at cleanup (before the store).
func newTrail(t testing.TB, st *store.Store, edit func(*Config)) *Trail {
	t.Helper()
	cfg := Config{Store: st, Region: "us-east-1", AccountID: "123456789012"}
	if edit != nil {
		edit(&cfg)
	}
	tr := New(cfg)
	t.Cleanup(func() { tr.Close(context.Background()) })
	return tr
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var (
	admin = auth.Principal{AccessKeyID: "AKIDADMIN", Role: auth.RoleAdmin}
	alice = auth.Principal{AccessKeyID: "AKIDALICE", Role: auth.RoleUser, UserName: "alice", ARN: "arn:aws:iam::123456789012:user/alice"}
	agent = auth.Principal{AccessKeyID: "AKIDAGENT", Role: auth.RoleAgent, InstanceID: "i-0abc"}
)

func call(p auth.Principal, op string, at time.Time) api.Record {
	return api.Record{Time: at, RequestID: "req-" + op, Principal: p, AccessKeyID: p.AccessKeyID, SourceIP: "10.0.0.1",
		UserAgent: "test", Operation: op, ReadOnly: api.ReadOnly(op), Checked: api.Checked{Action: "ecs:" + op, Resources: []string{"*"}}}
}

func failed(r api.Record, code string) api.Record {
	r.ErrorCode, r.ErrorMessage = code, "refused"
	return r
}

// stored reads every page under the prefix: its keys and records.
func storedPages(t testing.TB, st *store.Store) (keys []string, recs []Event) {
	t.Helper()
	pages, _, err := store.List[page](context.Background(), st, prefix, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		keys = append(keys, p.Key)
		recs = append(recs, p.Value.Records...)
	}
	return keys, recs
}

// metric is the value of the trail's counter name (with the label value,
// if given) as Prometheus gathers it.
func metric(t testing.TB, tr *Trail, name, label string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(tr.Collectors()...)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if label == "" || len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == label {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no metric %s{%s}", name, label)
	return 0
}

func list(t testing.TB, tr *Trail, q Query) []Event {
	t.Helper()
	res, err := tr.List(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	return res.Events
}

// Records handed over together go to the store as few pages, each in
// eventID order and under its key, and a listing sees them all.
func TestRecordsAreWrittenInPages(t *testing.T) {
	st := openStore(t)
	tr := newTrail(t, st, nil)
	now := time.Now()
	for i := range 250 {
		tr.Record(call(admin, fmt.Sprintf("Op%03d", i), now))
	}
	if err := tr.Settle(context.Background()); err != nil {
		t.Fatal(err)
	}
	keys, recs := storedPages(t, st)
	if len(recs) != 250 {
		t.Fatalf("%d records stored, want 250", len(recs))
	}
	if len(keys) > 10 {
		t.Fatalf("250 records handed over at once took %d pages", len(keys))
	}
	for _, k := range keys {
		first, n := pageOf(k[len(prefix):])
		if n > maxBatch || !idPattern.MatchString(first) {
			t.Fatalf("page key %s", k)
		}
	}
	for i := 1; i < len(recs); i++ {
		if recs[i].EventID <= recs[i-1].EventID {
			t.Fatalf("eventIDs out of order: %s after %s", recs[i].EventID, recs[i-1].EventID)
		}
	}
	got := list(t, tr, Query{Limit: 1000})
	if len(got) != 250 || got[0].EventName != "Op000" || got[249].EventName != "Op249" {
		t.Fatalf("listed %d, first %q", len(got), got[0].EventName)
	}
	if n := metric(t, tr, "capstan_audit_records_written_total", ""); n != 250 {
		t.Fatalf("written counter %v", n)
	}
}

// logCount counts log records at warn level and above.
type logCount struct {
	mu    sync.Mutex
	warns []string
}

func (l *logCount) Enabled(context.Context, slog.Level) bool { return true }
func (l *logCount) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		l.mu.Lock()
		l.warns = append(l.warns, r.Message)
		l.mu.Unlock()
	}
	return nil
}
func (l *logCount) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logCount) WithGroup(string) slog.Handler      { return l }

// A full buffer drops records, counts them and logs once; Record never
// waits for the writer.
func TestFullBufferDropsCountsAndLogsOnce(t *testing.T) {
	st := openStore(t)
	logs := &logCount{}
	tr := newTrail(t, st, func(c *Config) { c.Buffer = 10; c.Log = slog.New(logs) })
	now := time.Now()
	for i := range 1000 {
		tr.Record(call(admin, fmt.Sprintf("Op%d", i), now))
	}
	if err := tr.Settle(context.Background()); err != nil {
		t.Fatal(err)
	}
	dropped := metric(t, tr, "capstan_audit_records_dropped_total", "buffer_full")
	written := metric(t, tr, "capstan_audit_records_written_total", "")
	if dropped == 0 || dropped+written != 1000 {
		t.Fatalf("dropped %v and written %v of 1000", dropped, written)
	}
	if _, recs := storedPages(t, st); len(recs) != int(written) {
		t.Fatalf("%d stored, %v counted as written", len(recs), written)
	}
	logs.mu.Lock()
	defer logs.mu.Unlock()
	if len(logs.warns) != 1 || !strings.Contains(logs.warns[0], "buffer full") {
		t.Fatalf("warnings: %q", logs.warns)
	}
}

// The record of each kind of caller: identity, source, resources, outcome.
func TestRecordShape(t *testing.T) {
	tr := &Trail{account: "123456789012", region: "eu-west-1"}
	at := time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)
	bad := api.Record{Time: at, AccessKeyID: "AKIDCLAIMED", Operation: "ListClusters", ReadOnly: true, SourceIP: "192.0.2.7",
		ErrorCode: "InvalidSignatureException", ErrorMessage: "signature does not match"}
	user := call(alice, "UpdateDaemon", at)
	user.Resources = []string{"arn:aws:ecs:us-east-1:123456789012:daemon/c/d", "*", "arn:aws:ecs:us-east-1:123456789012:daemon/c/d"}
	user.Principal.Region = "us-west-2"
	iamCall := call(admin, "CreateUser", at)
	iamCall.Action = "iam:CreateUser"
	cases := []struct {
		name string
		rec  api.Record
		want func(Event) bool
	}{
		{"root", call(admin, "CreateCluster", at), func(e Event) bool {
			id := e.UserIdentity
			return id.Type == Root && id.ARN == "arn:aws:iam::123456789012:root" && id.AccountID == "123456789012" &&
				id.PrincipalID == "123456789012" && id.AccessKeyID == "AKIDADMIN" && e.EventSource == SourceECS && !e.ReadOnly &&
				e.AwsRegion == "eu-west-1" && e.RequestID == "req-CreateCluster" && e.ErrorCode == "" && len(e.Resources) == 0
		}},
		{"user", user, func(e Event) bool {
			id := e.UserIdentity
			return id.Type == IAMUser && id.ARN == alice.ARN && id.UserName == "alice" && e.AwsRegion == "us-west-2" &&
				len(e.Resources) == 1 && e.Resources[0].ARN == user.Resources[0] && e.Resources[0].AccountID == "123456789012"
		}},
		{"agent", call(agent, "DiscoverPollEndpoint", at), func(e Event) bool {
			id := e.UserIdentity
			return id.Type == Agent && id.PrincipalID == "i-0abc" && id.AccessKeyID == "AKIDAGENT" && id.ARN == ""
		}},
		{"bad signature", bad, func(e Event) bool {
			id := e.UserIdentity
			return id == UserIdentity{Type: Unknown, AccessKeyID: "AKIDCLAIMED"} && e.ErrorCode == "InvalidSignatureException" &&
				e.ErrorMessage == "signature does not match" && e.ReadOnly && e.SourceIPAddress == "192.0.2.7"
		}},
		{"iam by action", iamCall, func(e Event) bool { return e.EventSource == SourceIAM }},
		{"sts by name", api.Record{Time: at, Operation: "GetCallerIdentity", ErrorCode: "InvalidClientTokenId"},
			func(e Event) bool { return e.EventSource == SourceSTS }},
	}
	for _, c := range cases {
		e := tr.event(c.rec)
		if e.EventType != EventType || e.RecipientAccountID != "123456789012" || !e.EventTime.Equal(at.Truncate(time.Millisecond)) ||
			e.EventName != c.rec.Operation || !c.want(e) {
			t.Errorf("%s: %+v", c.name, e)
		}
	}
}

// Each filter keeps what it names; a small limit pages through everything
// once; the trail's own reads show only when asked for.
func TestListFilters(t *testing.T) {
	st := openStore(t)
	tr := newTrail(t, st, nil)
	base := time.Now().Add(-10 * time.Minute).Truncate(time.Second)
	recs := []api.Record{
		call(admin, "CreateCluster", base),
		call(alice, "ListClusters", base.Add(time.Minute)),
		failed(call(alice, "UpdateDaemon", base.Add(2*time.Minute)), "AccessDeniedException"),
		{Time: base.Add(3 * time.Minute), AccessKeyID: "AKIDCLAIMED", Operation: "ListClusters", ErrorCode: "InvalidSignatureException"},
		call(admin, ListOperation, base.Add(4*time.Minute)),
		failed(call(agent, "CreateCluster", base.Add(5*time.Minute)), "AccessDeniedException"),
	}
	for _, r := range recs {
		tr.Record(r)
	}
	names := func(q Query) string {
		var out []string
		for _, e := range list(t, tr, q) {
			out = append(out, e.EventName+"/"+e.UserIdentity.AccessKeyID)
		}
		return strings.Join(out, " ")
	}
	cases := []struct {
		q    Query
		want string
	}{
		{Query{}, "CreateCluster/AKIDADMIN ListClusters/AKIDALICE UpdateDaemon/AKIDALICE ListClusters/AKIDCLAIMED CreateCluster/AKIDAGENT"},
		{Query{Principal: "alice"}, "ListClusters/AKIDALICE UpdateDaemon/AKIDALICE"},
		{Query{Principal: alice.ARN}, "ListClusters/AKIDALICE UpdateDaemon/AKIDALICE"},
		{Query{Principal: "root"}, "CreateCluster/AKIDADMIN"},
		{Query{Principal: "arn:aws:iam::123456789012:root", EventName: ListOperation}, ListOperation + "/AKIDADMIN"},
		{Query{AccessKeyID: "AKIDCLAIMED"}, "ListClusters/AKIDCLAIMED"},
		{Query{EventName: "CreateCluster"}, "CreateCluster/AKIDADMIN CreateCluster/AKIDAGENT"},
		{Query{ErrorsOnly: true}, "UpdateDaemon/AKIDALICE ListClusters/AKIDCLAIMED CreateCluster/AKIDAGENT"},
		{Query{Start: base.Add(2 * time.Minute), End: base.Add(3 * time.Minute)}, "UpdateDaemon/AKIDALICE ListClusters/AKIDCLAIMED"},
		{Query{End: base.Add(30 * time.Second)}, "CreateCluster/AKIDADMIN"},
		{Query{Start: time.Now().Add(time.Minute)}, ""},
		{Query{Principal: "bob"}, ""},
	}
	for _, c := range cases {
		if got := names(c.q); got != c.want {
			t.Errorf("%+v:\n got %s\nwant %s", c.q, got, c.want)
		}
	}

	// Two at a time, continuing from each answer's cursor.
	var paged []string
	cur := Cursor{}
	for range 10 {
		res, err := tr.List(context.Background(), Query{Limit: 2, Cursor: cur})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range res.Events {
			paged = append(paged, e.EventName)
		}
		cur = res.Cursor
		if len(res.Events) < 2 {
			break
		}
	}
	if strings.Join(paged, " ") != "CreateCluster ListClusters UpdateDaemon ListClusters CreateCluster" {
		t.Fatalf("paged: %v", paged)
	}
	if again, _ := ParseCursor(cur.String()); again != cur {
		t.Fatalf("cursor %q reads back as %+v", cur, again)
	}
	for _, bad := range []string{"x", "@", "@-1", "0190abcd@1", strings.Repeat("a", 36)} {
		if _, err := ParseCursor(bad); err == nil || !strings.HasPrefix(err.Error(), "nextToken: ") {
			t.Errorf("cursor %q: %v", bad, err)
		}
	}
}

// A record committed after a listing, with an eventID before its cursor
// (taken before a slower write ended), comes in the next listing.
func TestCursorFindsLateCommits(t *testing.T) {
	st := openStore(t)
	tr := newTrail(t, st, nil)
	now := time.Now()
	late := Event{EventName: "Late", EventID: tr.ids.next(now), EventType: EventType, EventTime: now}
	tr.Record(call(admin, "First", now))
	res, err := tr.List(context.Background(), Query{})
	if err != nil || len(res.Events) != 1 {
		t.Fatalf("%v %v", res.Events, err)
	}
	if late.EventID >= res.Events[0].EventID {
		t.Fatal("the late record's ID must sort first")
	}
	if _, err := st.Txn().Put(pageKey(late.EventID, 1), page{Records: []Event{late}}).Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	res, err = tr.List(context.Background(), Query{Cursor: res.Cursor})
	if err != nil || len(res.Events) != 1 || res.Events[0].EventName != "Late" {
		t.Fatalf("after the late commit: %v %v", res.Events, err)
	}
	if res, _ = tr.List(context.Background(), Query{Cursor: res.Cursor}); len(res.Events) != 0 {
		t.Fatalf("listed again: %v", res.Events)
	}
}

// A long poll returns as soon as a matching record is written, and not
// for one that does not match.
func TestListWaits(t *testing.T) {
	st := openStore(t)
	tr := newTrail(t, st, nil)
	res, err := tr.List(context.Background(), Query{})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []Event, 1)
	go func() {
		r, err := tr.List(context.Background(), Query{Cursor: res.Cursor, EventName: "Wanted", Wait: 20 * time.Second})
		if err != nil {
			t.Error(err)
		}
		got <- r.Events
	}()
	tr.Record(call(admin, "Other", time.Now()))
	tr.Record(call(admin, "Wanted", time.Now()))
	select {
	case evs := <-got:
		if len(evs) != 1 || evs[0].EventName != "Wanted" {
			t.Fatalf("long poll returned %v", evs)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the long poll did not return on a matching record")
	}
	// The server's shutdown ends waits at once.
	done := make(chan struct{})
	go func() {
		tr.List(context.Background(), Query{EventName: "Never", Wait: 20 * time.Second})
		close(done)
	}()
	tr.EndWaits()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("EndWaits left a long poll waiting")
	}
}

// fakeClock is the writer's clock, moved by the test.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// An agent's successful calls become one record per credential,
// operation and minute, written once the minute is over; its failures
// are also recorded one by one.
func TestAgentCallsAreSummarised(t *testing.T) {
	st := openStore(t)
	minute := time.Now().Add(-time.Hour).Truncate(time.Minute)
	clock := &fakeClock{now: minute.Add(30 * time.Second)}
	tr := newTrail(t, st, func(c *Config) { c.Now, c.tick = clock.Now, 10*time.Millisecond })
	other := agent
	other.AccessKeyID = "AKIDAGENT2"
	for i := range 5 {
		tr.Record(call(agent, "DiscoverPollEndpoint", minute.Add(time.Duration(i+1)*time.Second)))
	}
	tr.Record(failed(call(agent, "DiscoverPollEndpoint", minute.Add(10*time.Second)), "ServerException"))
	tr.Record(call(other, "DiscoverPollEndpoint", minute.Add(11*time.Second)))
	tr.Record(call(agent, "RegisterContainerInstance", minute.Add(12*time.Second)))
	tr.Record(call(agent, "DiscoverPollEndpoint", minute.Add(61*time.Second))) // the next minute
	if err := tr.Settle(context.Background()); err != nil {
		t.Fatal(err)
	}
	if evs := list(t, tr, Query{}); len(evs) != 1 || evs[0].ErrorCode != "ServerException" || evs[0].AdditionalEventData != nil {
		t.Fatalf("before the minute is over: %+v", evs)
	}

	clock.Set(minute.Add(time.Minute + summaryGrace))
	var summaries []Event
	waitFor(t, "the first minute's summaries", func() bool {
		summaries = nil
		for _, e := range list(t, tr, Query{}) {
			if e.AdditionalEventData != nil {
				summaries = append(summaries, e)
			}
		}
		return len(summaries) == 3
	})
	byKey := map[string]Summary{}
	for _, e := range summaries {
		byKey[e.UserIdentity.AccessKeyID+"/"+e.EventName] = *e.AdditionalEventData
		if e.UserIdentity.Type != Agent || e.RequestID != "" || e.ErrorCode != "" || e.EventID == "" || !e.EventTime.Equal(e.AdditionalEventData.FirstEventTime) {
			t.Errorf("summary %+v", e)
		}
	}
	want := map[string]Summary{
		"AKIDAGENT/DiscoverPollEndpoint":      {CallCount: 6, ErrorCount: 1, FirstEventTime: minute.Add(time.Second).UTC(), LastEventTime: minute.Add(10 * time.Second).UTC()},
		"AKIDAGENT2/DiscoverPollEndpoint":     {CallCount: 1, FirstEventTime: minute.Add(11 * time.Second).UTC(), LastEventTime: minute.Add(11 * time.Second).UTC()},
		"AKIDAGENT/RegisterContainerInstance": {CallCount: 1, FirstEventTime: minute.Add(12 * time.Second).UTC(), LastEventTime: minute.Add(12 * time.Second).UTC()},
	}
	for k, w := range want {
		if g := byKey[k]; g.CallCount != w.CallCount || g.ErrorCount != w.ErrorCount || !g.FirstEventTime.Equal(w.FirstEventTime) || !g.LastEventTime.Equal(w.LastEventTime) {
			t.Errorf("%s: got %+v, want %+v", k, g, w)
		}
	}

	// The open minute's summary is written when the trail closes.
	if err := tr.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, stored := storedPages(t, st)
	last := stored[len(stored)-1]
	if len(stored) != 5 || last.AdditionalEventData == nil || last.AdditionalEventData.CallCount != 1 || !last.EventTime.Equal(minute.Add(61*time.Second)) {
		t.Fatalf("after close: %d records, last %+v", len(stored), last)
	}
	if n := metric(t, tr, "capstan_audit_agent_calls_summarised_total", ""); n != 9 {
		t.Fatalf("summarised counter %v, want 9", n)
	}
	tr.Record(call(admin, "AfterClose", time.Now()))
	if n := metric(t, tr, "capstan_audit_records_dropped_total", "closed"); n != 1 {
		t.Fatalf("a record after close: dropped %v", n)
	}
}

// Records expire with their lease once the retention is over.
func TestRecordsExpire(t *testing.T) {
	st := openStore(t)
	tr := newTrail(t, st, func(c *Config) { c.Retention = time.Second })
	for _, op := range []string{"A", "B", "C"} {
		tr.Record(call(admin, op, time.Now()))
	}
	if err := tr.Settle(context.Background()); err != nil {
		t.Fatal(err)
	}
	if evs := list(t, tr, Query{}); len(evs) != 3 {
		t.Fatalf("listed %d before expiry", len(evs))
	}
	waitFor(t, "the records to expire", func() bool {
		keys, _, err := store.Keys(context.Background(), st, prefix, "", 0)
		return err == nil && len(keys) == 0
	})
	if evs := list(t, tr, Query{}); len(evs) != 0 {
		t.Fatalf("listed %d after expiry", len(evs))
	}
}

// Past the limit the oldest records go, counted.
func TestLimitTrimsOldest(t *testing.T) {
	st := openStore(t)
	tr := newTrail(t, st, func(c *Config) { c.Limit = 40 })
	for i := range 100 {
		tr.Record(call(admin, fmt.Sprintf("Op%03d", i), time.Now()))
	}
	if err := tr.Settle(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, recs := storedPages(t, st)
	if len(recs) < 40 || len(recs) > 42 {
		t.Fatalf("%d records kept with a limit of 40", len(recs))
	}
	var names []string
	for _, e := range recs {
		names = append(names, e.EventName)
	}
	if !slices.IsSorted(names) || names[len(names)-1] != "Op099" {
		t.Fatalf("kept %v", names)
	}
	if n := metric(t, tr, "capstan_audit_records_trimmed_total", ""); int(n) != 100-len(recs) {
		t.Fatalf("trimmed counter %v with %d of 100 kept", n, len(recs))
	}
}
