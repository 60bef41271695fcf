// Package api is the ECS JSON 1.1 wire protocol: it authenticates a request,
// dispatches on X-Amz-Target to a typed operation, decodes and checks the
// input against the model, and writes the output or an ECS-shaped error.
// Operations never see HTTP; handlers never see etcd.
package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/auth"
	"github.com/capstanhq/capstan/internal/codec"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/store"
)

// TargetPrefix is the X-Amz-Target namespace of the ECS API.
const TargetPrefix = "AmazonEC2ContainerServiceV20141113."

// ExtensionPrefix is the namespace of Capstan's own operations (same
// protocol, same signing), e.g. minting agent credentials.
const ExtensionPrefix = "CapstanV1."

// Verifier authenticates a request.
type Verifier interface {
	Verify(ctx context.Context, r *http.Request, body []byte) (auth.Principal, error)
}

// Authorizer decides whether a caller may call an operation with the
// decoded request req (a pointer to the operation's input). It returns what
// it checked, for the audit trail, also when it refuses.
type Authorizer func(ctx context.Context, p auth.Principal, operation string, req any) (Checked, error)

// Checked is what an authorization looked at: the IAM action and the
// resources it was checked against.
type Checked struct {
	Action    string
	Resources []string
}

// Record is one call as the audit trail keeps it: who, from where, what,
// and how it ended. ErrorCode is empty for a call that succeeded.
type Record struct {
	Time        time.Time
	RequestID   string
	Principal   auth.Principal // zero when authentication failed
	AccessKeyID string         // as the signature claimed it
	SourceIP    string
	UserAgent   string
	Operation   string
	Checked
	ReadOnly     bool
	ErrorCode    string
	ErrorMessage string
}

type operation struct {
	decode func(body []byte) (any, error)
	call   func(ctx context.Context, req any) (any, error)
}

// Handler serves the ECS API on POST /.
type Handler struct {
	verifier  Verifier
	authorize Authorizer
	log       *slog.Logger
	ops       map[string]operation
	metrics   *Metrics
	// Scope, when set, gives each request its caller's consistency scope;
	// readOnly says the operation only reads (Describe*, List*, Get*,
	// Preview*).
	Scope func(ctx context.Context, p auth.Principal, readOnly bool) context.Context
	// Audit, when set, is given every call once it is answered; it must not
	// block.
	Audit func(Record)
}

// ReadOnly reports whether an operation name only reads.
func ReadOnly(op string) bool {
	for _, p := range []string{"Describe", "List", "Get", "Preview"} {
		if strings.HasPrefix(op, p) {
			return true
		}
	}
	return false
}

// NewHandler returns a handler with no operations registered.
func NewHandler(v Verifier, authorize Authorizer, log *slog.Logger) *Handler {
	if authorize == nil {
		authorize = AdminOnly
	}
	return &Handler{verifier: v, authorize: authorize, log: log, ops: map[string]operation{}, metrics: newMetrics()}
}

// AdminOnly lets the administrator do everything and nobody else anything.
func AdminOnly(_ context.Context, p auth.Principal, op string, _ any) (Checked, error) {
	c := Checked{Action: "ecs:" + op, Resources: []string{"*"}}
	if p.Role == auth.RoleAdmin {
		return c, nil
	}
	return c, fault.Denied("credential %s (role %s) is not allowed to call %s", p.AccessKeyID, p.Role, op)
}

type checker interface {
	Check(path string) *shapes.Violation
}

// Register adds an operation. The name must be an operation of the model.
func Register[Req, Resp any](h *Handler, name string, fn func(context.Context, *Req) (*Resp, error)) {
	if _, ok := shapes.Operations[name]; !ok {
		panic("api: " + name + " is not an ECS operation")
	}
	h.ops[TargetPrefix+name] = typed(fn)
}

// RegisterExtension adds a Capstan operation under ExtensionPrefix.
func RegisterExtension[Req, Resp any](h *Handler, name string, fn func(context.Context, *Req) (*Resp, error)) {
	h.ops[ExtensionPrefix+name] = typed(fn)
}

func typed[Req, Resp any](fn func(context.Context, *Req) (*Resp, error)) operation {
	return operation{
		decode: func(body []byte) (any, error) {
			req := new(Req)
			if err := decode(body, req); err != nil {
				return nil, err
			}
			if c, ok := any(req).(checker); ok {
				if v := c.Check(""); v != nil {
					return nil, fault.Invalid(v.Field, "%s", v.Rule)
				}
			}
			return req, nil
		},
		call: func(ctx context.Context, req any) (any, error) {
			resp, err := fn(ctx, req.(*Req))
			if err != nil {
				return nil, err
			}
			if resp == nil {
				return struct{}{}, nil
			}
			return resp, nil
		},
	}
}

// Operations lists the registered ECS operation names.
func (h *Handler) Operations() []string {
	names := make([]string, 0, len(h.ops))
	for n := range h.ops {
		if name, ok := strings.CutPrefix(n, TargetPrefix); ok {
			names = append(names, name)
		}
	}
	return names
}

type callerKey struct{}

type sourceIPKey struct{}

// SourceIP is the address the request in ctx came from, as policies see it
// in aws:SourceIp.
func SourceIP(ctx context.Context) string {
	ip, _ := ctx.Value(sourceIPKey{}).(string)
	return ip
}

// Caller returns the authenticated principal of the request in ctx.
func Caller(ctx context.Context) (auth.Principal, bool) {
	p, ok := ctx.Value(callerKey{}).(auth.Principal)
	return p, ok
}

// WithCaller returns ctx carrying p, for code that calls operations directly.
func WithCaller(ctx context.Context, p auth.Principal) context.Context {
	return context.WithValue(ctx, callerKey{}, p)
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	id := requestID()
	w.Header().Set("x-amzn-RequestId", id)
	target := r.Header.Get("X-Amz-Target")
	op := target[strings.LastIndexByte(target, '.')+1:]
	rec := Record{Time: start, RequestID: id, Operation: op, ReadOnly: ReadOnly(op), SourceIP: sourceIP(r), UserAgent: r.UserAgent(),
		AccessKeyID: auth.ClaimedKeyID(r)}
	status, e := h.serve(w, r, op, target, &rec)
	code := e.code
	label := op
	if _, ok := h.ops[target]; !ok {
		label = "unknown"
	}
	h.metrics.observe(label, code, time.Since(start))
	if status >= 500 {
		h.log.Error("api request failed", "op", op, "code", code, "request_id", id)
	} else {
		h.log.Debug("api request", "op", op, "status", status, "code", code, "request_id", id, "duration", time.Since(start))
	}
	if h.Audit != nil {
		rec.ErrorCode, rec.ErrorMessage = code, e.message
		h.Audit(rec)
	}
}

// sourceIP is the client's address without its port.
func sourceIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func (h *Handler) serve(w http.ResponseWriter, r *http.Request, op, target string, rec *Record) (int, wireError) {
	if r.Method != http.MethodPost {
		return h.fail(w, wireError{http.StatusMethodNotAllowed, "UnknownOperationException", "the ECS API accepts POST / only"})
	}
	// The headers are judged before the body is read, and the body is read
	// no further than its operation's cap.
	finish, err := BeginVerify(r.Context(), h.verifier, r)
	if err != nil {
		return h.fail(w, h.authFailure(err))
	}
	body, err := ReadBody(r, BodyCap(target))
	if tl := (*TooLargeError)(nil); errors.As(err, &tl) {
		if !tl.Drained {
			w.Header().Set("Connection", "close") // nothing more of it is read
		}
		return h.fail(w, tooLarge(target, op, tl))
	} else if err != nil {
		return h.fail(w, wireError{400, "SerializationException", "could not read the request body"})
	}
	p, err := finish(body)
	if err != nil {
		return h.fail(w, h.authFailure(err))
	}
	rec.Principal, rec.AccessKeyID = p, p.AccessKeyID
	o, ok := h.ops[target]
	if !ok {
		if target == "" {
			return h.fail(w, wireError{400, "UnknownOperationException", "the X-Amz-Target header is missing"})
		}
		return h.fail(w, wireError{400, "UnknownOperationException", fmt.Sprintf("operation %q is not supported", target)})
	}
	req, err := o.decode(body)
	if err != nil {
		return h.fail(w, toWire(err, h.log))
	}
	ctx := context.WithValue(WithCaller(r.Context(), p), sourceIPKey{}, rec.SourceIP)
	checked, err := h.authorize(ctx, p, op, req)
	rec.Checked = checked
	if err != nil {
		return h.fail(w, toWire(err, h.log))
	}
	if h.Scope != nil {
		ctx = h.Scope(ctx, p, ReadOnly(op))
	}
	resp, err := o.call(ctx, req)
	if err != nil {
		return h.fail(w, toWire(err, h.log))
	}
	out, err := codec.Encode(resp)
	if err != nil {
		h.log.Error("encode response", "op", op, "err", err)
		return h.fail(w, wireError{500, "ServerException", "could not encode the response"})
	}
	defer out.Release()
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.WriteHeader(http.StatusOK)
	w.Write(out.Bytes())
	return 200, wireError{}
}

// WriteUnavailable answers an ECS call the server refuses untried, in the
// ECS error format: ServerException, HTTP 503.
func WriteUnavailable(w http.ResponseWriter, msg string) {
	(&Handler{}).fail(w, wireError{http.StatusServiceUnavailable, "ServerException", msg})
}

type wireError struct {
	status  int
	code    string
	message string
}

func (h *Handler) fail(w http.ResponseWriter, e wireError) (int, wireError) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.Header().Set("X-Amzn-ErrorType", e.code)
	w.WriteHeader(e.status)
	b, _ := json.Marshal(map[string]string{"__type": e.code, "message": e.message})
	w.Write(b)
	return e.status, e
}

// toWire maps a classified error to its ECS name and status; this is the one
// place where kinds become wire names.
func toWire(err error, log *slog.Logger) wireError {
	if msg, ok := store.NoSpaceMessage(err); ok {
		return wireError{500, "ServerException", msg}
	}
	if msg, ok := store.UnavailableMessage(err); ok {
		return wireError{500, "ServerException", msg}
	}
	fe := fault.As(err)
	if fe == nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return wireError{500, "ServerException", "the request was cancelled or timed out"}
		}
		log.Error("unclassified error", "err", err)
		return wireError{500, "ServerException", "internal error"}
	}
	code := fe.Code
	status := 400
	if code == "" {
		switch fe.Kind {
		case fault.InvalidParameter:
			code = "InvalidParameterException"
		case fault.Client, fault.NotFound, fault.Conflict:
			code = "ClientException"
		case fault.NotAuthorized:
			code = "AccessDeniedException"
		case fault.Throttled:
			code = "ThrottlingException"
		case fault.Unsupported:
			code = "UnsupportedFeatureException"
		default:
			code = "ServerException"
		}
	}
	if fe.Kind == fault.Internal {
		status = 500
		log.Error("internal error", "err", err)
		return wireError{status, code, "internal error"}
	}
	return wireError{status, code, fe.Message}
}

// decode reads a JSON object into v, ignoring unknown members (newer
// clients send fields this server does not know) and naming the member on
// type errors.
func decode(body []byte, v any) error {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		body = []byte("{}")
	}
	if body[0] != '{' {
		return &fault.Error{Kind: fault.InvalidParameter, Code: "SerializationException", Message: "the request body must be a JSON object"}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		return &fault.Error{Kind: fault.InvalidParameter, Code: "SerializationException", Message: describeDecodeError(err)}
	}
	if dec.More() {
		return &fault.Error{Kind: fault.InvalidParameter, Code: "SerializationException", Message: "unexpected data after the JSON object"}
	}
	return nil
}

func describeDecodeError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		want := te.Type.Kind().String()
		switch te.Type.Kind() {
		case reflect.Slice:
			want = "list"
		case reflect.Struct, reflect.Map:
			want = "object"
		case reflect.Int32, reflect.Int64:
			want = "integer"
		case reflect.Float64:
			want = "number"
		}
		if te.Field != "" {
			return fmt.Sprintf("%s: expected %s, got JSON %s", te.Field, want, te.Value)
		}
		return fmt.Sprintf("expected %s, got JSON %s", want, te.Value)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("malformed JSON at byte %d: %v", se.Offset, se)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return "malformed JSON: unexpected end of input"
	}
	return "malformed request: " + err.Error()
}

func requestID() string {
	var b [16]byte
	rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
