package cli

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"sync"
	"syscall"

	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// parseEndpoints splits a comma-separated list of API URLs, each http://
// or https:// with a host.
func parseEndpoints(raw string) ([]*url.URL, error) {
	var out []*url.URL
	for _, e := range strings.Split(raw, ",") {
		e = strings.TrimSpace(e)
		u, err := url.Parse(e)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, usageErrorf("endpoint %q: want an http:// or https:// URL (several are separated by commas)", e)
		}
		out = append(out, u)
	}
	return out, nil
}

// failover sends each request to the endpoint that last answered and moves
// on to the next one when a server cannot be reached. A read goes
// elsewhere after any connection error; a write only when it cannot have
// been received (the connection was never made), so it is never applied
// twice.
type failover struct {
	mu  sync.Mutex
	eps []*url.URL
	at  int
}

func (f *failover) ID() string { return "CapstanFailover" }

func (f *failover) HandleFinalize(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (
	middleware.FinalizeOutput, middleware.Metadata, error) {
	req, ok := in.Request.(*smithyhttp.Request)
	if !ok {
		return next.HandleFinalize(ctx, in)
	}
	read := readOnly(middleware.GetOperationName(ctx))
	f.mu.Lock()
	start := f.at
	f.mu.Unlock()
	var (
		out middleware.FinalizeOutput
		md  middleware.Metadata
		err error
	)
	for i := range f.eps {
		k := (start + i) % len(f.eps)
		r := req.Clone()
		if err := r.RewindStream(); err != nil {
			return out, md, err
		}
		r.URL.Scheme, r.URL.Host, r.Host = f.eps[k].Scheme, f.eps[k].Host, ""
		in.Request = r
		out, md, err = next.HandleFinalize(ctx, in)
		if err == nil || ctx.Err() != nil || !unreached(err, read) {
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

// readOnly is an operation that changes nothing, safe to send again.
func readOnly(op string) bool {
	for _, p := range []string{"Describe", "List", "Get", "Discover"} {
		if strings.HasPrefix(op, p) {
			return true
		}
	}
	return false
}

// unreached is an error that leaves the request to another server: for a
// read any failure to send it or to get an answer, for a write only a
// connection never made.
func unreached(err error, read bool) bool {
	var se *smithyhttp.RequestSendError
	if !errors.As(err, &se) {
		return false
	}
	if read {
		return true
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	var op *net.OpError
	var dns *net.DNSError
	return errors.As(err, &dns) || (errors.As(err, &op) && op.Op == "dial")
}

// add puts f after the SDK's endpoint resolution (which each retry does
// again) and before the signing, so each server's request is signed for
// its own host.
func (f *failover) add(stack *middleware.Stack) error {
	return stack.Finalize.Insert(f, "ResolveEndpointV2", middleware.After)
}
