package ops

import (
	"fmt"
	"strings"

	"github.com/capstanhq/capstan/internal/api/shapes"
)

// DiscoverPollResponse is ECS's answer, one URL in each field as ECS
// clients expect, and every server's URL (--advertise-url may list
// several) in a field of Capstan's own, which the SDKs ignore and the
// capstan agent reads to learn the servers it was not told of.
type DiscoverPollResponse struct {
	shapes.DiscoverPollEndpointResponse
	CapstanEndpoints []string `json:"capstanEndpoints,omitempty"`
}

// discoverPoll answers DiscoverPollEndpoint from the advertised list: the
// ECS fields carry its first URL, the same from every server.
func discoverPoll(advertised string) (*DiscoverPollResponse, error) {
	var list []string
	for _, u := range strings.Split(advertised, ",") {
		if u = strings.TrimSpace(u); u != "" {
			list = append(list, u)
		}
	}
	if len(list) == 0 {
		return nil, fmt.Errorf("no advertised endpoint configured")
	}
	return &DiscoverPollResponse{
		DiscoverPollEndpointResponse: shapes.DiscoverPollEndpointResponse{Endpoint: list[0], TelemetryEndpoint: list[0]},
		CapstanEndpoints:             list,
	}, nil
}
