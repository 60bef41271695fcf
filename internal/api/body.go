package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/capstanhq/capstan/internal/auth"
)

// Body caps. Bodies are read only after the headers' part of the signature
// passed, and never past the cap of the operation named in X-Amz-Target.
const (
	// MaxBody is the most any operation takes.
	MaxBody = 1 << 20
	// DefaultBodyCap is for every operation not in bodyCaps; the largest
	// other inputs (RunTask's 8 KiB of overrides and 50 tags, say) stay
	// well below it.
	DefaultBodyCap = 64 << 10
	// TaskDefinitionCap is ECS's size limit for a task definition.
	TaskDefinitionCap = 64 << 10
)

// bodyCaps are the operations whose cap differs from the default or that
// ECS answers in its own words when too large.
var bodyCaps = map[string]int64{
	TargetPrefix + "RegisterTaskDefinition":       TaskDefinitionCap,
	TargetPrefix + "RegisterDaemonTaskDefinition": TaskDefinitionCap,
}

// BodyCap is the most a request for target may send.
func BodyCap(target string) int64 {
	if n, ok := bodyCaps[target]; ok {
		return min(n, MaxBody)
	}
	return DefaultBodyCap
}

// TooLargeError is a body over its cap. Size is its length, or -1 when the
// client declared none and it was not read to its end. Drained says the
// rest of it was read (and dropped), so the connection can carry on.
type TooLargeError struct {
	Size, Cap int64
	Drained   bool
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("request body exceeds the %d byte limit", e.Cap)
}

// ReadBody reads r's body up to limit bytes. A longer one is a
// *TooLargeError: what follows the limit is not kept, only dropped up to
// MaxBody in all, because clients (the SDKs, the CLI) send the whole body
// before they read the answer and would see a reset instead of the error.
// Longer bodies are left unread; the caller closes the connection.
func ReadBody(r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		e := &TooLargeError{Size: r.ContentLength, Cap: limit}
		if r.ContentLength <= MaxBody {
			_, err := io.Copy(io.Discard, r.Body)
			e.Drained = err == nil
		}
		return nil, e
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(body)) > limit {
		e := &TooLargeError{Size: -1, Cap: limit}
		n, err := io.CopyN(io.Discard, r.Body, MaxBody-int64(len(body))+1)
		if errors.Is(err, io.EOF) {
			e.Size, e.Drained = int64(len(body))+n, true
		}
		return nil, e
	}
	return body, nil
}

// stagedVerifier checks the headers before the body is read
// (auth.Verifier is one).
type stagedVerifier interface {
	Begin(ctx context.Context, r *http.Request) (*auth.Pending, error)
}

// BeginVerify starts authenticating r from its headers when v can, and
// returns what finishes it over the body. Verifiers that cannot (test
// fakes) do all of it in finish.
func BeginVerify(ctx context.Context, v Verifier, r *http.Request) (finish func(body []byte) (auth.Principal, error), err error) {
	if sv, ok := v.(stagedVerifier); ok {
		p, err := sv.Begin(ctx, r)
		if err != nil {
			return nil, err
		}
		return func(body []byte) (auth.Principal, error) {
			pr, err := p.Finish(body)
			if err == nil {
				markVerified(ctx)
			}
			return pr, err
		}, nil
	}
	return func(body []byte) (auth.Principal, error) { return Marking(v).Verify(ctx, r, body) }, nil
}

type verifiedKey struct{}

// OnVerified returns ctx carrying fn, which is called when the signature of
// the request under ctx has been verified: the server then stops counting
// it among the requests not yet authenticated (internal/server/limits.go).
func OnVerified(ctx context.Context, fn func()) context.Context {
	return context.WithValue(ctx, verifiedKey{}, fn)
}

func markVerified(ctx context.Context) {
	if fn, ok := ctx.Value(verifiedKey{}).(func()); ok {
		fn()
	}
}

// Marking returns v calling the OnVerified hook of the request's context
// when it verifies one, for endpoints that call Verify themselves (the
// agents' session endpoint).
func Marking(v Verifier) Verifier { return marking{v} }

type marking struct{ v Verifier }

func (m marking) Verify(ctx context.Context, r *http.Request, body []byte) (auth.Principal, error) {
	p, err := m.v.Verify(ctx, r, body)
	if err == nil {
		markVerified(ctx)
	}
	return p, err
}

// tooLarge is ECS's answer to a body over its cap: for task definitions
// ECS's own ClientException, else a SerializationException naming the cap.
func tooLarge(target, op string, e *TooLargeError) wireError {
	if bodyCaps[target] == TaskDefinitionCap {
		actual := fmt.Sprintf("'%d'", e.Size)
		if e.Size < 0 {
			actual = fmt.Sprintf("more than '%d'", e.Cap)
		}
		return wireError{400, "ClientException", fmt.Sprintf("Actual length: %s. Max allowed length is '%d' bytes.", actual, e.Cap)}
	}
	msg := e.Error()
	if op != "" {
		msg += " of " + op
	}
	return wireError{413, "SerializationException", msg}
}

// authFailure maps a failed authentication to the wire.
func (h *Handler) authFailure(err error) wireError {
	var ae *auth.Error
	if errors.As(err, &ae) {
		return wireError{ae.Status, ae.Code, ae.Message}
	}
	h.log.Error("authenticate", "err", err)
	return wireError{500, "ServerException", "could not authenticate the request"}
}
