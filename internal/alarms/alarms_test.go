package alarms_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/alarms"
	"github.com/capstanhq/capstan/internal/testenv"
)

// gauge is a scrape target in the test process exporting one gauge the
// test sets.
type gauge struct {
	addr string
	bits atomic.Uint64
}

func startGauge(t *testing.T) *gauge {
	g := &gauge{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "# TYPE capstan_test_value gauge\ncapstan_test_value %g\n", math.Float64frombits(g.bits.Load()))
	}))
	t.Cleanup(srv.Close)
	g.addr = strings.TrimPrefix(srv.URL, "http://")
	return g
}

func (g *gauge) set(v float64) { g.bits.Store(math.Float64bits(v)) }

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", timeout, why)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitFiring waits until name's firing state is want, asking src.
func waitFiring(t *testing.T, src *alarms.Client, names []string, name string, want bool) alarms.Status {
	t.Helper()
	var st alarms.Status
	start := time.Now()
	defer func() { t.Logf("%s firing=%v after %v", name, want, time.Since(start).Round(time.Millisecond)) }()
	eventually(t, 30*time.Second, func() (bool, string) {
		var err error
		st, err = src.Firing(t.Context(), names)
		if err != nil {
			t.Fatal(err)
		}
		return slices.Contains(st.Firing, name) == want, fmt.Sprintf("%s firing should be %v: %+v", name, want, st)
	})
	return st
}

func TestPrometheus(t *testing.T) {
	g := startGauge(t)
	prom := testenv.StartPrometheus(t, testenv.PrometheusOptions{Rules: []testenv.AlertRule{
		{Name: "ValueHigh", Expr: "capstan_test_value > 5"},
		// Same condition, but pending for an hour before it fires.
		{Name: "ValueHighForAnHour", Expr: "capstan_test_value > 5", For: time.Hour},
	}})
	prom.AddTarget(t, g.addr, nil)
	prom.WaitTargetUp(t, g.addr)

	// A plain http URL: the kind is detected on first use.
	src, err := alarms.New(prom.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"ValueHighForAnHour", "NoSuchAlarm", "ValueHigh", "ValueHigh"}
	st, err := src.Firing(t.Context(), names)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Firing) != 0 || !slices.Equal(st.Unknown, []string{"NoSuchAlarm"}) {
		t.Fatalf("at 0: %+v, want nothing firing and NoSuchAlarm unknown", st)
	}
	if src.Kind() != alarms.Prometheus {
		t.Errorf("detected kind %q", src.Kind())
	}

	g.set(10)
	st = waitFiring(t, src, names, "ValueHigh", true)
	if !slices.Equal(st.Firing, []string{"ValueHigh"}) || !slices.Equal(st.Unknown, []string{"NoSuchAlarm"}) {
		t.Errorf("at 10: %+v", st)
	}
	// Prometheus itself says the hour-long rule is pending, and pending
	// is not firing.
	if s := prom.RuleState(t, "ValueHighForAnHour"); s != "pending" {
		t.Errorf("ValueHighForAnHour is %q in Prometheus, want pending", s)
	}

	g.set(0)
	waitFiring(t, src, names, "ValueHigh", false)

	// Rules defined later are known at once.
	prom.SetRules(t, testenv.AlertRule{Name: "NoSuchAlarm", Expr: "vector(1)"})
	st = waitFiring(t, src, names, "NoSuchAlarm", true)
	if !slices.Equal(st.Unknown, []string{"ValueHigh", "ValueHighForAnHour"}) {
		t.Errorf("after SetRules: %+v", st)
	}
}

func TestAlertmanager(t *testing.T) {
	am := testenv.StartAlertmanager(t)
	g := startGauge(t)
	g.set(10)
	prom := testenv.StartPrometheus(t, testenv.PrometheusOptions{
		Rules:        []testenv.AlertRule{{Name: "ValueHigh", Expr: "capstan_test_value > 5"}},
		Alertmanager: am.URL,
	})

	hinted, err := alarms.New("alertmanager+"+am.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"ValueHigh", "NoSuchAlarm"}
	st, err := hinted.Firing(t.Context(), names)
	if err != nil || len(st.Firing) != 0 || len(st.Unknown) != 0 {
		t.Fatalf("before any alert: %+v, %v", st, err)
	}

	prom.AddTarget(t, g.addr, nil)
	waitFiring(t, hinted, names, "ValueHigh", true)

	detected, err := alarms.New(am.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err = detected.Firing(t.Context(), names)
	if err != nil || !slices.Equal(st.Firing, []string{"ValueHigh"}) || detected.Kind() != alarms.Alertmanager {
		t.Errorf("detected source: %+v, %v, kind %q", st, err, detected.Kind())
	}

	// A silenced alert is not firing.
	silence, _ := json.Marshal(map[string]any{
		"matchers":  []any{map[string]any{"name": "alertname", "value": "ValueHigh", "isRegex": false}},
		"startsAt":  time.Now().UTC().Format(time.RFC3339),
		"endsAt":    time.Now().Add(time.Hour).UTC().Format(time.RFC3339),
		"createdBy": "capstan test",
		"comment":   "silenced alarms do not roll back",
	})
	resp, err := http.Post(am.URL+"/api/v2/silences", "application/json", bytes.NewReader(silence))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("create silence: %s", resp.Status)
	}
	waitFiring(t, hinted, names, "ValueHigh", false)
}

func TestErrors(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()

	serve := func(status int, body string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(status)
			fmt.Fprint(w, body)
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	html := serve(200, "<html>a dashboard</html>")
	missing := serve(404, "404 page not found")
	broken := serve(500, "upstream exploded")
	promErr := serve(503, `{"status":"error","errorType":"unavailable","error":"rule manager not ready"}`)

	for _, c := range []struct {
		url      string
		want     error
		contains string
	}{
		{"http://user:hunter2@" + closed, alarms.ErrUnreachable, "connection refused"},
		{"prometheus+http://" + closed + "/prom", alarms.ErrUnreachable, closed + "/prom"},
		{html, alarms.ErrBadResponse, "a dashboard"},
		{missing, alarms.ErrBadResponse, "neither the Prometheus rules API"},
		{"prometheus+" + missing, alarms.ErrBadResponse, "/api/v1/rules: 404"},
		{"alertmanager+" + html, alarms.ErrBadResponse, "/api/v2/alerts"},
		{broken, alarms.ErrBadResponse, "500 Internal Server Error"},
		{promErr, alarms.ErrBadResponse, "rule manager not ready"},
	} {
		src, err := alarms.New(c.url, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = src.Firing(t.Context(), []string{"A"})
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.contains) {
			t.Errorf("%s: %v; want %v containing %q", c.url, err, c.want, c.contains)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: error shows the password: %v", c.url, err)
		}
		if src.Kind() != "" && !strings.Contains(c.url, "+") {
			t.Errorf("%s: kind %q detected from a failure", c.url, src.Kind())
		}
	}

	var none *alarms.Client
	if _, err := none.Firing(t.Context(), []string{"A"}); !errors.Is(err, alarms.ErrNotConfigured) {
		t.Errorf("nil client: %v", err)
	}
}

func TestNew(t *testing.T) {
	for _, c := range []struct {
		url  string
		kind alarms.Kind
		err  string // "" for success
	}{
		{"http://prom:9090", "", ""},
		{"https://example.com/prometheus/", "", ""},
		{"prometheus+http://prom:9090", alarms.Prometheus, ""},
		{"Alertmanager+HTTPS://am:9093", alarms.Alertmanager, ""},
		{"ftp://prom", "", "scheme must be http or https"},
		{"prom:9090", "", "scheme must be http or https"},
		{"grafana+http://g", "", `unknown kind "grafana"`},
		{"http://", "", "no host"},
		{"http://a b", "", "invalid character"},
	} {
		src, err := alarms.New(c.url, nil)
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("New(%q) = %v, want error containing %q", c.url, err, c.err)
			}
		case err != nil:
			t.Errorf("New(%q): %v", c.url, err)
		case src.Kind() != c.kind:
			t.Errorf("New(%q).Kind() = %q, want %q", c.url, src.Kind(), c.kind)
		}
	}
	if src, err := alarms.New("", nil); src != nil || err != nil {
		t.Errorf(`New("") = %v, %v; want no source`, src, err)
	}
}

// A user:password in the URL is sent as basic authentication, as a
// Prometheus behind an authenticating proxy needs.
func TestBasicAuth(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "capstan" || p != "s3cret" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		fmt.Fprint(w, `{"status":"success","data":{"groups":[{"rules":[{"type":"alerting","name":"A","state":"firing"}]}]}}`)
	}))
	defer srv.Close()
	src, err := alarms.New(strings.Replace(srv.URL, "http://", "http://capstan:s3cret@", 1), nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := src.Firing(t.Context(), []string{"A"})
	if err != nil || !slices.Equal(st.Firing, []string{"A"}) {
		t.Errorf("with credentials: %+v, %v", st, err)
	}
	if strings.Contains(src.String(), "s3cret") {
		t.Errorf("String() shows the password: %s", src)
	}
}
