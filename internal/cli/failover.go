package cli

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"

	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/capstanhq/capstan/internal/failover"
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

// newFailover sends each request to the endpoint that last answered and
// moves on to the next one when a server cannot be reached or cannot
// reach etcd. A read goes elsewhere after any connection error or server
// error; a write only when it cannot have been applied (the connection was
// never made, or the server refused it untried), so it is never applied
// twice.
func newFailover(eps []*url.URL) *failover.Middleware {
	return failover.New("CapstanFailover", eps, func(ctx context.Context, err error) bool {
		return unreached(err, readOnly(middleware.GetOperationName(ctx)))
	})
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
// read any failure to send it or to get an answer and any server error, for
// a write only a connection never made or a refusal marked untried.
func unreached(err error, read bool) bool {
	// The SDK wraps a send error in a ResponseError too, with no status.
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) && re.HTTPStatusCode() > 0 {
		untried := re.HTTPStatusCode() == http.StatusServiceUnavailable && re.Response.Header.Get(failover.StoreUnreachableHeader) != ""
		return untried || read && re.HTTPStatusCode() >= 500
	}
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
