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
