package session

import (
	"context"
	"errors"
	"net/url"

	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/capstanhq/capstan/internal/failover"
)

// APIFailover returns an SDK client option that sends the agent's API
// calls (registration) to the endpoint that last answered, and on to the
// next one when a server cannot be reached or answers with a server error
// (a server cut off from etcd answers ServerException: another may reach
// it). The agent's calls are idempotent (registering again returns the
// same instance), so any failure to get an answer moves on. Nil for fewer
// than two endpoints.
func APIFailover(endpoints []string) func(*middleware.Stack) error {
	if len(endpoints) < 2 {
		return nil
	}
	var eps []*url.URL
	for _, e := range endpoints {
		u, err := url.Parse(e)
		if err != nil {
			return nil // the agent's configuration checked them
		}
		eps = append(eps, u)
	}
	return failover.New("CapstanAgentFailover", eps, func(_ context.Context, err error) bool {
		var se *smithyhttp.RequestSendError
		var re *smithyhttp.ResponseError
		return errors.As(err, &se) || errors.As(err, &re) && re.HTTPStatusCode() >= 500
	}).Add
}
