package main

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestParseLine(t *testing.T) {
	for _, c := range []struct {
		line, source, name string
		value              float64
		ok                 bool
	}{
		{`{"source":"web","name":"http_requests","value":2}`, "web", "http_requests", 2, true},
		{`{"name":"logins"}`, "", "logins", 1, true},
		{"http_requests:3|c", "", "http_requests", 3, true},
		{"http_requests 4", "", "http_requests", 4, true},
		{"http_requests", "", "http_requests", 1, true},
		{"http_requests:many|c", "", "", 0, false},
		{`{"name":"bad name"}`, "", "", 0, false},
		{`{"source":"we\"b","name":"x"}`, "", "", 0, false},
		{"{not json", "", "", 0, false},
	} {
		ev, ok := parseLine(c.line)
		if ok != c.ok || ok && (ev.Source != c.source || ev.Name != c.name || *ev.Value != c.value) {
			t.Errorf("parseLine(%q) = %+v, %v", c.line, ev, ok)
		}
	}
}

func TestErrorRate(t *testing.T) {
	for _, c := range []struct {
		v    string
		want float64
		ok   bool
	}{
		{"", 0, true}, {"0", 0, true}, {"2", 2, true}, {"0.5", 0.5, true},
		{"-1", 0, false}, {"many", 0, false}, {"NaN", 0, false}, {"Inf", 0, false},
	} {
		got, err := errorRate(c.v)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("errorRate(%q) = %v, %v", c.v, got, err)
		}
	}
}

func TestErrorsMetric(t *testing.T) {
	scrape := func(s *stats) string {
		rec := httptest.NewRecorder()
		s.metrics(rec, httptest.NewRequest("GET", "/metrics", nil))
		return rec.Body.String()
	}
	healthy := newStats()
	if out := scrape(healthy); !strings.Contains(out, "\ntelemetry_errors_total 0\n") {
		t.Errorf("healthy daemon:\n%s", out)
	}
	// 2 errors a second for 10s (and less than half a second more).
	failing := newStats()
	failing.errorRate = 2
	failing.started = time.Now().Add(-10 * time.Second)
	if out := scrape(failing); !strings.Contains(out, "# TYPE telemetry_errors_total counter\ntelemetry_errors_total 20\n") {
		t.Errorf("failing daemon:\n%s", out)
	}
}
