// Package iamapi serves the IAM Query API and STS's GetCallerIdentity on
// the server's endpoint, so that `aws iam ...` and `aws sts
// get-caller-identity` work unmodified: form-encoded POSTs
// (Action=...&Version=...), signed with SigV4 for service iam or sts, and
// XML answers and errors in the shapes those services use. Every IAM call
// is authorized by iam.Authorizer and reported to the audit hook.
package iamapi

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/auth"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/iam"
	"github.com/capstanhq/capstan/internal/store"
)

// API versions, the Version parameter of every request.
const (
	IAMVersion = "2010-05-08"
	STSVersion = "2011-06-15"
)

const (
	iamNamespace = "https://iam.amazonaws.com/doc/2010-05-08/"
	stsNamespace = "https://sts.amazonaws.com/doc/2011-06-15/"
)

// Accepts reports whether r is for this handler: a form-encoded request
// without the JSON protocol's X-Amz-Target.
func Accepts(r *http.Request) bool {
	if r.Header.Get("X-Amz-Target") != "" {
		return false
	}
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return mt == "application/x-www-form-urlencoded"
}

// Verifier authenticates a request.
type Verifier interface {
	Verify(ctx context.Context, r *http.Request, body []byte) (auth.Principal, error)
}

// Config is what the handler serves from.
type Config struct {
	Store      *iam.Store
	Authorizer *iam.Authorizer
	// IAM and STS verify signatures scoped to services iam and sts.
	IAM, STS Verifier
	Log      *slog.Logger
}

// Handler serves the IAM and STS Query APIs on POST /.
type Handler struct {
	store *iam.Store
	authz *iam.Authorizer
	iamV  Verifier
	stsV  Verifier
	log   *slog.Logger
	// started stands for the root's creation date, which GetUser shows.
	started time.Time
	// Audit, when set, is given every call once it is answered; it must not
	// block.
	Audit func(api.Record)
}

// New returns a handler.
func New(cfg Config) *Handler {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Handler{store: cfg.Store, authz: cfg.Authorizer, iamV: cfg.IAM, stsV: cfg.STS, log: log, started: time.Now()}
}

// NewVerifiers returns SigV4 verifiers for services iam and sts over lookup.
func NewVerifiers(lookup auth.Lookup) (iamV, stsV *auth.Verifier) {
	return &auth.Verifier{Lookup: lookup, Service: "iam"}, &auth.Verifier{Lookup: lookup, Service: "sts"}
}

// wireError is an error as the Query protocol sends it.
type wireError struct {
	status  int
	code    string
	message string
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	id := requestID()
	w.Header().Set("x-amzn-RequestId", id)
	rec := api.Record{Time: start, RequestID: id, SourceIP: sourceIP(r), UserAgent: r.UserAgent(), AccessKeyID: auth.ClaimedKeyID(r)}
	ns := iamNamespace
	c, e := h.serve(w, r, &rec, &ns)
	if e.code != "" {
		writeError(w, ns, id, e)
	} else {
		writeResult(w, ns, id, c.op, c.result)
	}
	if e.status >= 500 {
		h.log.Error("iam request failed", "op", rec.Operation, "code", e.code, "request_id", id)
	} else {
		h.log.Debug("iam request", "op", rec.Operation, "code", e.code, "request_id", id, "duration", time.Since(start))
	}
	if h.Audit != nil {
		rec.ErrorCode, rec.ErrorMessage = e.code, e.message
		h.Audit(rec)
	}
}

// serve authenticates and runs one call; the error's code is empty when
// it succeeded.
func (h *Handler) serve(w http.ResponseWriter, r *http.Request, rec *api.Record, ns *string) (*call, wireError) {
	if r.Method != http.MethodPost {
		return nil, wireError{http.StatusMethodNotAllowed, "InvalidAction", "the Query API accepts POST / only"}
	}
	// The headers are judged before the body is read, by the verifier of
	// the service the signature names; the action in the body must then
	// belong to it.
	signedSTS := auth.ClaimedService(r) == "sts"
	finish, werr := h.begin(r, signedSTS)
	if werr.code != "" {
		return nil, werr
	}
	body, err := api.ReadBody(r, maxBody)
	if tl := (*api.TooLargeError)(nil); errors.As(err, &tl) {
		if !tl.Drained {
			w.Header().Set("Connection", "close") // nothing more of it is read
		}
		return nil, wireError{413, "MalformedInput", tl.Error()}
	} else if err != nil {
		return nil, wireError{400, "MalformedInput", "could not read the request body"}
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, wireError{400, "MalformedInput", "the request body is not form-encoded: " + err.Error()}
	}
	action, version := form.Get("Action"), form.Get("Version")
	rec.Operation = action
	rec.ReadOnly = readOnly(action)
	isSTS := version == STSVersion || version == "" && action == "GetCallerIdentity"
	ops := iamOperations
	if isSTS {
		*ns, ops = stsNamespace, stsOperations
	}
	if isSTS != signedSTS {
		// Signed for the other service: its verifier's scope check says so.
		if finish, werr = h.begin(r, isSTS); werr.code != "" {
			return nil, werr
		}
	}
	p, err := finish(body)
	if err != nil {
		return nil, h.authFailure(err)
	}
	rec.Principal, rec.AccessKeyID = p, p.AccessKeyID
	switch {
	case action == "":
		return nil, wireError{400, "MissingAction", "the Action parameter is missing"}
	case version == "" && !isSTS:
		return nil, wireError{400, "MissingParameter", "the Version parameter is missing"}
	case version != IAMVersion && version != STSVersion:
		return nil, wireError{400, "InvalidParameterValue", fmt.Sprintf("Version %q is neither %s (IAM) nor %s (STS)", version, IAMVersion, STSVersion)}
	}
	fn, ok := ops[action]
	if !ok {
		return nil, wireError{400, "InvalidAction", fmt.Sprintf("Could not find operation %s for version %s", action, version)}
	}
	svc := "iam:"
	if isSTS {
		svc = "sts:"
	}
	rec.Checked.Action = svc + action // also when the call fails before it is authorized
	c := &call{h: h, ctx: api.WithCaller(r.Context(), p), p: p, form: form, op: action, rec: rec}
	res, err := fn(c)
	if err != nil {
		return nil, h.toWire(err)
	}
	c.result = res
	return c, wireError{}
}

// maxBody caps a Query API body. Policy documents are the largest input
// (up to 131,072 characters); percent-encoded they take about three bytes
// a character.
const maxBody = 512 << 10

// begin starts authenticating r with the IAM or the STS verifier.
func (h *Handler) begin(r *http.Request, sts bool) (func([]byte) (auth.Principal, error), wireError) {
	v := h.iamV
	if sts {
		v = h.stsV
	}
	finish, err := api.BeginVerify(r.Context(), v, r)
	if err != nil {
		return nil, h.authFailure(err)
	}
	return finish, wireError{}
}

func (h *Handler) authFailure(err error) wireError {
	var ae *auth.Error
	if errors.As(err, &ae) {
		return authError(ae)
	}
	h.log.Error("authenticate", "err", err)
	return wireError{500, "ServiceFailure", "could not authenticate the request"}
}

// readOnly says whether an action only reads, for the audit trail.
func readOnly(action string) bool {
	for _, p := range []string{"Get", "List", "Simulate"} {
		if strings.HasPrefix(action, p) {
			return true
		}
	}
	return false
}

// authError maps a refused signature to the Query protocol's names,
// which differ from the JSON protocol's.
func authError(ae *auth.Error) wireError {
	switch ae.Code {
	case auth.CodeMissingAuthenticationToken:
		return wireError{403, "MissingAuthenticationToken", ae.Message}
	case auth.CodeIncompleteSignature:
		return wireError{400, "IncompleteSignature", ae.Message}
	case auth.CodeUnrecognizedClient:
		return wireError{403, "InvalidClientTokenId", ae.Message}
	case auth.CodeInvalidSignature:
		return wireError{403, "SignatureDoesNotMatch", ae.Message}
	}
	return wireError{ae.Status, ae.Code, ae.Message}
}

// toWire maps a classified error to IAM's code and status.
func (h *Handler) toWire(err error) wireError {
	if msg, ok := store.NoSpaceMessage(err); ok {
		return wireError{500, "ServiceFailure", msg}
	}
	fe := fault.As(err)
	if fe == nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return wireError{500, "ServiceFailure", "the request was cancelled or timed out"}
		}
		h.log.Error("unclassified error", "err", err)
		return wireError{500, "ServiceFailure", "internal error"}
	}
	switch fe.Kind {
	case fault.NotAuthorized:
		return wireError{403, "AccessDenied", fe.Message}
	case fault.Internal:
		h.log.Error("internal error", "err", err)
		return wireError{500, "ServiceFailure", "internal error"}
	}
	code := fe.Code
	if code == "" {
		switch fe.Kind {
		case fault.NotFound:
			code = iam.CodeNoSuchEntity
		case fault.Conflict:
			code = iam.CodeEntityAlreadyExists
		default:
			code = iam.CodeInvalidInput
		}
	}
	status := 400
	switch code {
	case iam.CodeNoSuchEntity:
		status = 404
	case iam.CodeEntityAlreadyExists, iam.CodeLimitExceeded, iam.CodeDeleteConflict, iam.CodeConcurrentModification:
		status = 409
	}
	return wireError{status, code, fe.Message}
}

// WriteUnavailable answers an IAM or STS call the server refuses untried:
// ServiceFailure, HTTP 503.
func WriteUnavailable(w http.ResponseWriter, msg string) {
	id := requestID()
	w.Header().Set("x-amzn-RequestId", id)
	writeError(w, iamNamespace, id, wireError{http.StatusServiceUnavailable, "ServiceFailure", msg})
}

// errorResponse is the Query protocol's error envelope.
type errorResponse struct {
	XMLName   xml.Name `xml:"ErrorResponse"`
	Xmlns     string   `xml:"xmlns,attr"`
	Type      string   `xml:"Error>Type"`
	Code      string   `xml:"Error>Code"`
	Message   string   `xml:"Error>Message"`
	RequestID string   `xml:"RequestId"`
}

func writeError(w http.ResponseWriter, ns, id string, e wireError) {
	typ := "Sender"
	if e.status >= 500 {
		typ = "Receiver"
	}
	b, _ := xml.Marshal(errorResponse{Xmlns: ns, Type: typ, Code: e.code, Message: e.message, RequestID: id})
	w.Header().Set("Content-Type", "text/xml")
	w.WriteHeader(e.status)
	w.Write(b)
}

// writeResult writes <OpResponse><OpResult>...</OpResult><ResponseMetadata>;
// operations without output have no OpResult.
func writeResult(w http.ResponseWriter, ns, id, op string, result any) {
	var b bytes.Buffer
	fmt.Fprintf(&b, `<%sResponse xmlns="%s">`, op, ns)
	if result != nil {
		if err := xml.NewEncoder(&b).EncodeElement(result, xml.StartElement{Name: xml.Name{Local: op + "Result"}}); err != nil {
			writeError(w, ns, id, wireError{500, "ServiceFailure", "could not encode the response"})
			return
		}
	}
	fmt.Fprintf(&b, `<ResponseMetadata><RequestId>%s</RequestId></ResponseMetadata></%sResponse>`, id, op)
	w.Header().Set("Content-Type", "text/xml")
	w.WriteHeader(http.StatusOK)
	w.Write(b.Bytes())
}

func sourceIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func requestID() string {
	var b [16]byte
	rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
