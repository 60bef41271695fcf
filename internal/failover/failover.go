// Package failover spreads an AWS SDK client's requests over several
// Capstan servers: each request goes to the server that last answered, and
// on to the next when the caller's policy says the failure leaves it to
// another. The agent and the CLI share it; they differ only in that policy.
package failover

import (
	"context"
	"net/url"
	"sync"

	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// StoreUnreachableHeader marks a server's refusal of a request it did not
// try: it cannot reach etcd, so nothing was read or written, and a client
// may send even a write to another server.
const StoreUnreachableHeader = "X-Capstan-Store-Unreachable"

// Middleware is the SDK finalize step that picks the endpoint.
type Middleware struct {
	id  string
	eps []*url.URL
	// Resend says whether a request that failed with err may go to the
	// next server (ctx carries the operation's name).
	resend func(ctx context.Context, err error) bool

	mu sync.Mutex
	at int
}

// New returns the middleware over eps under the step name id.
func New(id string, eps []*url.URL, resend func(ctx context.Context, err error) bool) *Middleware {
	return &Middleware{id: id, eps: eps, resend: resend}
}

func (f *Middleware) ID() string { return f.id }

// Add puts f after the SDK's endpoint resolution (which each retry does
// again) and before the signing, so each server's request is signed for
// its own host.
func (f *Middleware) Add(stack *middleware.Stack) error {
	return stack.Finalize.Insert(f, "ResolveEndpointV2", middleware.After)
}

func (f *Middleware) HandleFinalize(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (
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
		if err == nil || ctx.Err() != nil || !f.resend(ctx, err) {
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
