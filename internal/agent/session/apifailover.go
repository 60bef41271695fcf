package session

import (
	"context"
	"errors"
	"net/url"
	"sync"

	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// APIFailover returns an SDK client option that sends the agent's API
// calls (registration) to the endpoint that last answered, and on to the
// next one when a server cannot be reached. The agent's calls are
// idempotent (registering again returns the same instance), so any failure
// to get an answer moves on. Nil for fewer than two endpoints.
func APIFailover(endpoints []string) func(*middleware.Stack) error {
	if len(endpoints) < 2 {
		return nil
	}
	f := &apiFailover{}
	for _, e := range endpoints {
		u, err := url.Parse(e)
		if err != nil {
			return nil // the agent's configuration checked them
		}
		f.eps = append(f.eps, u)
	}
	// After the SDK's endpoint resolution (done for each retry) and
	// before the signing, so each server's request is signed for its host.
	return func(s *middleware.Stack) error { return s.Finalize.Insert(f, "ResolveEndpointV2", middleware.After) }
}

type apiFailover struct {
	mu  sync.Mutex
	eps []*url.URL
	at  int
}

func (f *apiFailover) ID() string { return "CapstanAgentFailover" }

func (f *apiFailover) HandleFinalize(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (
	out middleware.FinalizeOutput, md middleware.Metadata, err error) {
	req, ok := in.Request.(*smithyhttp.Request)
	if !ok {
		return next.HandleFinalize(ctx, in)
	}
	f.mu.Lock()
	start := f.at
	f.mu.Unlock()
	for i := range f.eps {
		k := (start + i) % len(f.eps)
		r := req.Clone()
		if err := r.RewindStream(); err != nil {
			return out, md, err
		}
		r.URL.Scheme, r.URL.Host, r.Host = f.eps[k].Scheme, f.eps[k].Host, ""
		in.Request = r
		out, md, err = next.HandleFinalize(ctx, in)
		var se *smithyhttp.RequestSendError
		if err == nil || ctx.Err() != nil || !errors.As(err, &se) {
			if err == nil {
				f.mu.Lock()
				f.at = k
				f.mu.Unlock()
			}
			return out, md, err
		}
	}
	return out, md, err
}
