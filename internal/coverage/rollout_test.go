package coverage

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/events"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func sec(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// recorder stamps events as the server does: an ID each, in order.
type recorder struct {
	n   int
	evs []events.Event
}

func (r *recorder) add(ev events.Event) {
	r.n++
	ev.ID = fmt.Sprintf("0190a000-0000-7%03x-8000-000000000000", r.n)
	r.evs = append(r.evs, ev)
}

// task records a task of group on inst reaching each status at the given
// second.
func (r *recorder) task(arn, group, inst string, steps ...any) {
	for i := 0; i < len(steps); i += 2 {
		at := sec(steps[i].(float64))
		t := shapes.Task{TaskArn: arn, Group: group, StartedBy: "ecs-svc/1", ContainerInstanceArn: inst, LastStatus: steps[i+1].(string), DesiredStatus: "RUNNING"}
		if t.LastStatus == "RUNNING" {
			t.StartedAt = shapes.Timestamp{Time: at.Add(-100 * time.Millisecond)}
		}
		r.add(events.TaskStateChangeEvent(t, at))
	}
}

// inst records an instance of cp reaching each status at the given second.
func (r *recorder) inst(arn, cp string, steps ...any) {
	for i := 0; i < len(steps); i += 2 {
		ci := shapes.ContainerInstance{ContainerInstanceArn: arn, CapacityProviderName: cp, Status: steps[i+1].(string)}
		r.add(events.ContainerInstanceStateChangeEvent(ci, "arn:cluster/c", sec(steps[i].(float64))))
	}
}

func (r *recorder) history(t *testing.T) *History {
	t.Helper()
	h := NewHistory()
	if err := h.Add(r.evs); err != nil {
		t.Fatal(err)
	}
	// Listings overlap; a repeat must not count twice.
	if err := h.Add(r.evs); err != nil {
		t.Fatal(err)
	}
	return h
}

func TestMinRunning(t *testing.T) {
	var r recorder
	// A rolling replacement of three web tasks, one at a time, except that
	// old c stops before its replacement f runs: the dip is [20, 21).
	r.task("arn:task/a", "service:web", "i1", 0.0, "PENDING", 1.0, "RUNNING", 12.0, "STOPPING", 13.0, "STOPPED")
	r.task("arn:task/b", "service:web", "i2", 0.0, "PENDING", 1.0, "RUNNING", 16.0, "DEACTIVATING", 17.0, "STOPPED")
	r.task("arn:task/c", "service:web", "i3", 0.0, "PENDING", 1.5, "RUNNING", 20.0, "STOPPING", 22.0, "STOPPED")
	r.task("arn:task/d", "service:web", "i1", 10.0, "PENDING", 11.0, "RUNNING")
	r.task("arn:task/e", "service:web", "i2", 14.0, "PENDING", 16.0, "RUNNING")
	r.task("arn:task/f", "service:web", "i3", 19.0, "PENDING", 21.0, "RUNNING")
	// Other groups do not count.
	r.task("arn:task/g", "daemon:guard", "i1", 0.0, "RUNNING", 20.0, "STOPPED")
	r.task("arn:task/h", "service:api", "i1", 0.0, "RUNNING")
	h := r.history(t)
	if got := h.Task("arn:task/a"); got == nil || got.Group != "service:web" || got.StartedBy != "ecs-svc/1" || len(got.States) != 4 {
		t.Fatalf("task a read back as %+v", got)
	}
	cases := []struct {
		from, to float64
		group    string
		want     int
	}{
		{2, 60, "service:web", 2},    // [20, 21): c stopping, f not yet running
		{21, 60, "service:web", 3},   // after the dip
		{2, 20, "service:web", 3},    // up to it: to is excluded
		{20, 20.5, "service:web", 2}, // inside it
		{0, 60, "service:web", 0},    // before anything ran
		{12, 12.5, "service:web", 3}, // a STOPPING at 12, d RUNNING since 11
		{2, 60, "service:api", 1},
		{2, 60, "service:none", 0},
		{30, 30, "service:web", 0}, // empty interval
	}
	for _, c := range cases {
		if got := h.MinRunning(c.group, sec(c.from), sec(c.to)); got != c.want {
			t.Errorf("MinRunning(%q, %v, %v) = %d, want %d", c.group, c.from, c.to, got, c.want)
		}
	}
}

func TestMaxConcurrent(t *testing.T) {
	var r recorder
	drain := []string{"DRAINING", "DEREGISTERING"}
	r.inst("i1", "cp", 0.0, "REGISTERING", 10.0, "DRAINING", 15.0, "DEREGISTERING", 18.0, "INACTIVE")
	r.inst("i2", "cp", 0.0, "REGISTERING", 17.0, "DRAINING", 25.0, "INACTIVE")
	r.inst("i3", "cp", 0.0, "REGISTERING", 18.0, "DRAINING", 30.0, "INACTIVE")
	r.inst("i4", "other", 0.0, "REGISTERING", 17.0, "DRAINING", 30.0, "INACTIVE")
	h := r.history(t)
	if in := h.Instance("i1"); in == nil || in.CP != "cp" || len(in.States) != 4 {
		t.Fatalf("instance i1 read back as %+v", in)
	}
	cases := []struct {
		from, to float64
		statuses []string
		want     int
	}{
		{0, 60, drain, 2},                   // i1 and i2 over [17, 18); i2 and i3 over [18, 25)
		{0, 17, drain, 1},                   // to is excluded
		{0, 10, drain, 0},                   // nothing draining yet
		{26, 60, drain, 1},                  // i3 alone
		{0, 60, []string{"DRAINING"}, 2},    // i2 and i3
		{0, 18, []string{"DRAINING"}, 1},    // i1 had become DEREGISTERING
		{0, 60, []string{"REGISTERING"}, 3}, // all three at first
		{0, 60, nil, 0},
		{20, 20, drain, 0}, // empty interval
	}
	for _, c := range cases {
		if got := h.MaxConcurrent("cp", c.statuses, sec(c.from), sec(c.to)); got != c.want {
			t.Errorf("MaxConcurrent(cp, %q, %v, %v) = %d, want %d", c.statuses, c.from, c.to, got, c.want)
		}
	}
	if got := h.MaxConcurrent("none", drain, sec(0), sec(60)); got != 0 {
		t.Errorf("MaxConcurrent of an unknown provider = %d", got)
	}
}

// TestFetch reads a cluster's record through a signed, paged ListEvents and
// picks up where it left off.
func TestFetch(t *testing.T) {
	var r recorder
	for i := range eventsPage + 5 {
		r.task(fmt.Sprintf("arn:task/%d", i), "service:web", "i1", float64(i), "RUNNING")
	}
	served := eventsPage + 2 // the rest arrive later
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Header.Get("X-Amz-Target") != "CapstanV1.ListEvents" || !strings.Contains(req.Header.Get("Authorization"), "Credential=AK/") {
			http.Error(w, "unsigned or wrong target", http.StatusForbidden)
			return
		}
		var in listEventsInput
		if err := json.NewDecoder(req.Body).Decode(&in); err != nil || in.Cluster != "c" {
			http.Error(w, "bad input", http.StatusBadRequest)
			return
		}
		i := 0
		if in.After != "" {
			fmt.Sscan(in.After, &i)
		}
		j := min(i+in.MaxResults, served)
		json.NewEncoder(w).Encode(listEventsOutput{Events: r.evs[i:j], Cursor: fmt.Sprint(j)})
	}))
	defer srv.Close()
	c := NewClient(srv.URL+"/", aws.Credentials{AccessKeyID: "AK", SecretAccessKey: "SK"}, nil)
	h := NewHistory()
	if err := h.Fetch(context.Background(), c, "c"); err != nil {
		t.Fatal(err)
	}
	if n := len(h.Events()); n != served {
		t.Fatalf("first fetch read %d events, want %d", n, served)
	}
	served = len(r.evs)
	if err := h.Fetch(context.Background(), c, "c"); err != nil {
		t.Fatal(err)
	}
	if n, m := len(h.Events()), len(h.Tasks()); n != len(r.evs) || m != len(r.evs) {
		t.Fatalf("after the second fetch: %d events, %d tasks, want %d", n, m, len(r.evs))
	}
	if got := h.MinRunning("service:web", sec(eventsPage+4), sec(eventsPage+5)); got != eventsPage+5 {
		t.Fatalf("MinRunning = %d", got)
	}
	if err := h.Fetch(context.Background(), c, "other"); err == nil || !strings.Contains(err.Error(), "HTTP 400") {
		t.Fatalf("fetch of a bad request: %v", err)
	}
}
