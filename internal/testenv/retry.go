package testenv

import (
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
)

// Retryer is the test clients' retry policy: every answer the server gives,
// throttling and server errors included, reaches the test as it was sent,
// but a request whose connection the transport lost mid-response (a reset,
// or Go's transport closing the connection under the response it is
// reading) is sent again, as the SDK's default policy does. Tests that ran
// with no retry at all failed on such a loss about once in a few CI runs.
func Retryer() aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxAttempts = 3
		o.Retryables = []retry.IsErrorRetryable{retry.NoRetryCanceledError{}, retry.IsErrorRetryableFunc(lostConnection)}
		o.Timeouts = nil
		o.Throttles = nil
		o.RateLimiter = ratelimit.None
		o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return 20 * time.Millisecond, nil })
	})
}

// lostConnection matches the two forms a TCP reset takes in Go's transport;
// a refused connection (the server is down) is left to the test.
func lostConnection(err error) aws.Ternary {
	if err == nil {
		return aws.UnknownTernary
	}
	s := err.Error()
	if strings.Contains(s, "use of closed network connection") || strings.Contains(s, "connection reset by peer") {
		return aws.TrueTernary
	}
	return aws.FalseTernary
}
