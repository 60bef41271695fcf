package main

import "testing"

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
