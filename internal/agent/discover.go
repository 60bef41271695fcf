package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/capstanhq/capstan/internal/agent/config"
)

// learnEndpoints adds to the configured servers those DiscoverPollEndpoint
// names, so that an agent told of one server fails over to all of them.
// The list is in the answer's capstanEndpoints; a server from before it
// answers the comma-separated list in endpoint. Best effort: without an
// answer the agent keeps what it was configured with.
func learnEndpoints(ctx context.Context, client *ecs.Client, cluster, instanceArn string, known []string, log *slog.Logger) []string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var raw []byte
	_, err := client.DiscoverPollEndpoint(ctx, &ecs.DiscoverPollEndpointInput{Cluster: aws.String(cluster), ContainerInstance: aws.String(instanceArn)},
		func(o *ecs.Options) { o.APIOptions = append(o.APIOptions, keepBody(&raw)) })
	if err != nil {
		log.Warn("could not ask the server for the other servers; using the configured ones", "err", err)
		return known
	}
	learned, err := polledEndpoints(raw)
	if err != nil {
		log.Warn("the server's list of servers is not usable; using the configured ones", "err", err)
		return known
	}
	out, added := mergeEndpoints(known, learned)
	if len(added) > 0 {
		log.Info("learned servers from DiscoverPollEndpoint", "added", strings.Join(added, ","), "endpoints", strings.Join(out, ","))
	}
	return out
}

// mergeEndpoints appends to known the learned URLs it lacks. A loopback
// URL is learned only by an agent given loopback URLs: a server without
// --advertise-url advertises 127.0.0.1, which from another host is the
// agent's own.
func mergeEndpoints(known, learned []string) (out, added []string) {
	out = slices.Clone(known)
	local := slices.ContainsFunc(known, isLoopback)
	for _, e := range learned {
		if !slices.Contains(out, e) && (local || !isLoopback(e)) {
			out = append(out, e)
			added = append(added, e)
		}
	}
	return out, added
}

func isLoopback(endpoint string) bool {
	u, err := url.Parse(endpoint)
	if err != nil {
		return false
	}
	if u.Hostname() == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(u.Hostname())
	return err == nil && ip.IsLoopback()
}

// polledEndpoints reads the servers' URLs from a DiscoverPollEndpoint
// answer's body.
func polledEndpoints(body []byte) ([]string, error) {
	var r struct {
		Endpoint         string   `json:"endpoint"`
		CapstanEndpoints []string `json:"capstanEndpoints"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, err
	}
	if len(r.CapstanEndpoints) > 0 {
		return config.ParseEndpoints(strings.Join(r.CapstanEndpoints, ","))
	}
	return config.ParseEndpoints(r.Endpoint)
}

// keepBody copies a successful answer's body into dst before the SDK
// decodes it, which drops the fields ECS does not define.
func keepBody(dst *[]byte) func(*middleware.Stack) error {
	return func(s *middleware.Stack) error {
		// After the operation's deserializer: nearer the wire, so it
		// sees the body first.
		return s.Deserialize.Add(middleware.DeserializeMiddlewareFunc("CapstanKeepBody",
			func(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (middleware.DeserializeOutput, middleware.Metadata, error) {
				out, md, err := next.HandleDeserialize(ctx, in)
				if resp, ok := out.RawResponse.(*smithyhttp.Response); ok && err == nil && resp.StatusCode == 200 {
					b, rerr := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
					resp.Body.Close()
					if rerr != nil {
						return out, md, rerr
					}
					*dst = b
					resp.Body = io.NopCloser(bytes.NewReader(b))
				}
				return out, md, err
			}), middleware.After)
	}
}
