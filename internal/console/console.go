// Package console is the web console served by `capstan server` under
// /console/: server-rendered pages over the ECS API. Every page and action
// is an API call made in-process as the signed-in principal, signed with
// its own credential, so verification, validation, authorization and audit
// are the API's own.
package console

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/auth"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/store"
)

// Prefix is the path the console is served under.
const Prefix = "/console/"

// DefaultIdleTimeout ends a session nobody used for this long.
const DefaultIdleTimeout = 30 * time.Minute

//go:embed templates/*.html static/*
var assets embed.FS

// Config is what the console needs from the server.
type Config struct {
	// API is the ECS handler; the console calls it as the signed-in user.
	API http.Handler
	// Lookup finds credentials by access key ID (sign-in and signing).
	Lookup auth.Lookup
	// Authorize is the API's authorizer, asked beforehand to grey out
	// actions a user may not take; the call itself is authorized again.
	Authorize api.Authorizer
	// Store is followed to push rollout changes to open pages.
	Store *store.Store
	// Fleet, when set, gives the rollout grid from the fleet view the API
	// keeps (else it is read through the API).
	Fleet  *fleet.State
	Region string
	// Secure marks the cookies Secure (the server speaks TLS).
	Secure      bool
	IdleTimeout time.Duration
	Now         func() time.Time
	Log         *slog.Logger
}

// Console serves the pages.
type Console struct {
	ctx      context.Context // ends with the server: live streams end too
	cfg      Config
	sessions *sessions
	signins  *signinLimiter
	pages    *pageTemplates
	mux      *http.ServeMux
	live     *hub
	// views are the shared renders of the open live daemon pages, by
	// daemon ARN; renders counts renders of any of them.
	viewsMu sync.Mutex
	views   map[string]*liveView
	renders atomic.Int64
}

// New returns the console; it follows the store until ctx ends.
func New(ctx context.Context, cfg Config) *Console {
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	c := &Console{ctx: ctx, cfg: cfg, sessions: newSessions(cfg.IdleTimeout, cfg.Now), signins: newSigninLimiter(cfg.Now), pages: loadTemplates(), views: map[string]*liveView{}}
	c.live = newHub(ctx, cfg.Store)
	c.pages.extend()
	static, _ := fs.Sub(assets, "static")
	m := http.NewServeMux()
	m.Handle("GET /console/static/", http.StripPrefix("/console/static/", http.FileServerFS(static)))
	m.HandleFunc("GET /console/{$}", c.home)
	m.HandleFunc("GET /console/signin", c.signinPage)
	m.HandleFunc("POST /console/signin", c.signin)
	m.HandleFunc("POST /console/signout", c.authed(c.signout))
	m.HandleFunc("GET /console/clusters", c.authed(c.clustersPage))
	c.routesExtra(m) // the cluster page, its capacity and event tabs, tasks, daemon task definitions
	m.HandleFunc("GET /console/daemon", c.authed(c.daemonPage))
	m.HandleFunc("GET /console/daemon/live", c.authed(c.daemonLive))
	m.HandleFunc("POST /console/daemon/preview", c.authed(c.daemonPreview))
	m.HandleFunc("POST /console/daemon/update", c.authed(c.daemonUpdate))
	m.HandleFunc("POST /console/daemon/rollback", c.authed(c.daemonRollback))
	m.HandleFunc("POST /console/daemon/stop", c.authed(c.daemonStop))
	c.mux = m
	return c
}

func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	if r.Method == http.MethodPost {
		// Forms are small; nothing larger is read before a session is checked.
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		if !sameOrigin(r) {
			http.Error(w, "cross-origin request refused", http.StatusForbidden)
			return
		}
	}
	c.mux.ServeHTTP(w, r)
}

const maxForm = 64 << 10

// sameOrigin refuses a POST whose Origin (or Referer) names another host:
// the cookie is SameSite=Strict already, this covers the sign-in form.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		o = r.Header.Get("Referer")
	}
	if o == "" || o == "null" {
		return o == ""
	}
	for _, scheme := range []string{"http://", "https://"} {
		if len(o) >= len(scheme)+len(r.Host) && o[:len(scheme)] == scheme && o[len(scheme):len(scheme)+len(r.Host)] == r.Host {
			rest := o[len(scheme)+len(r.Host):]
			return rest == "" || rest[0] == '/'
		}
	}
	return false
}

// apiError is an ECS error as the API answered it.
type apiError struct {
	Status  int
	Type    string `json:"__type"`
	Message string `json:"message"`
}

func (e *apiError) Error() string { return e.Type + ": " + e.Message }

// denied reports whether err is the API refusing the caller.
func denied(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.Type == "AccessDeniedException"
}

// call makes the API call op (an ECS operation, or "CapstanV1.X") as the
// session's principal: a request signed with its credential, handed to the
// API handler in this process, from the browser's address.
func (c *Console) call(r *http.Request, s *session, op string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	cred, ok, err := c.cfg.Lookup.Credential(r.Context(), s.principal.AccessKeyID)
	if err != nil {
		return err
	}
	if !ok {
		return &apiError{Status: 400, Type: "UnrecognizedClientException", Message: "the signed-in access key no longer exists"}
	}
	target := api.TargetPrefix + op
	if len(op) > len("CapstanV1.") && op[:len("CapstanV1.")] == "CapstanV1." {
		target = op
	}
	req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, "http://console.internal/", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Host = "console.internal"
	req.RemoteAddr = r.RemoteAddr
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	req.Header.Set("X-Amz-Target", target)
	req.Header.Set("User-Agent", "capstan-console")
	sum := sha256.Sum256(body)
	if err := v4.NewSigner().SignHTTP(r.Context(), aws.Credentials{AccessKeyID: cred.AccessKeyID, SecretAccessKey: cred.SecretAccessKey},
		req, hex.EncodeToString(sum[:]), "ecs", c.cfg.Region, c.cfg.Now()); err != nil {
		return err
	}
	rec := &recorder{header: http.Header{}}
	c.cfg.API.ServeHTTP(rec, req)
	if rec.status != http.StatusOK {
		ae := &apiError{Status: rec.status}
		if json.Unmarshal(rec.body.Bytes(), ae) != nil || ae.Type == "" {
			ae.Type, ae.Message = "ServerException", fmt.Sprintf("HTTP %d", rec.status)
		}
		return ae
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(rec.body.Bytes(), out)
}

// recorder is the in-process call's response.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *recorder) Header() http.Header { return w.header }
func (w *recorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.body.Write(b)
}
func (w *recorder) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

// allowed asks the API's authorizer whether the session may call op with
// req, for greying out an action; "" when it may, else the reason.
func (c *Console) allowed(r *http.Request, s *session, op string, req any) string {
	if c.cfg.Authorize == nil {
		return ""
	}
	ctx := api.WithCaller(r.Context(), s.principal)
	if _, err := c.cfg.Authorize(ctx, s.principal, op, req); err != nil {
		return err.Error()
	}
	return ""
}
