package agent

import (
	"slices"
	"testing"
)

// The list comes from capstanEndpoints; a server from before that field
// answers its comma-separated --advertise-url in endpoint.
func TestPolledEndpoints(t *testing.T) {
	for _, c := range []struct {
		body string
		want []string
		bad  bool
	}{
		{body: `{"endpoint":"http://a:1","telemetryEndpoint":"http://a:1","capstanEndpoints":["http://a:1","http://b:1"]}`, want: []string{"http://a:1", "http://b:1"}},
		{body: `{"endpoint":"http://a:1,http://b:1","telemetryEndpoint":"http://a:1,http://b:1"}`, want: []string{"http://a:1", "http://b:1"}},
		{body: `{"endpoint":"https://a:1"}`, want: []string{"https://a:1"}},
		{body: `{"endpoint":"a:1"}`, bad: true},
		{body: `{"capstanEndpoints":["http://a:1","ftp://b"]}`, bad: true},
		{body: `not json`, bad: true},
	} {
		got, err := polledEndpoints([]byte(c.body))
		if c.bad != (err != nil) || !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, %v; want %v (error: %v)", c.body, got, err, c.want, c.bad)
		}
	}
}

// Learned URLs go after the configured ones, once each; a loopback URL
// only to an agent given loopback URLs itself.
func TestMergeEndpoints(t *testing.T) {
	for _, c := range []struct {
		known, learned, want []string
	}{
		{[]string{"http://s1:8080"}, []string{"http://s1:8080", "http://s2:8080"}, []string{"http://s1:8080", "http://s2:8080"}},
		{[]string{"http://s2:8080", "http://s1:8080"}, []string{"http://s1:8080", "http://s2:8080"}, []string{"http://s2:8080", "http://s1:8080"}},
		{[]string{"http://10.0.0.5:8080"}, []string{"http://127.0.0.1:8080", "http://localhost:8081", "http://[::1]:8082"}, []string{"http://10.0.0.5:8080"}},
		{[]string{"http://127.0.0.1:1"}, []string{"http://127.0.0.1:2"}, []string{"http://127.0.0.1:1", "http://127.0.0.1:2"}},
	} {
		got, added := mergeEndpoints(c.known, c.learned)
		if !slices.Equal(got, c.want) || len(added) != len(c.want)-len(c.known) {
			t.Errorf("%v + %v = %v (added %v), want %v", c.known, c.learned, got, added, c.want)
		}
	}
}
