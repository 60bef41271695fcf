package console

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/auth"
)

// CookieName is the session cookie's name.
const CookieName = "capstan_console"

// session is one signed-in browser. Only the access key ID is kept: each
// call looks the credential up again, so a deleted key ends the session.
type session struct {
	id        string
	csrf      string
	principal auth.Principal
	lastSeen  time.Time
}

type sessions struct {
	mu   sync.Mutex
	byID map[string]*session
	idle time.Duration
	now  func() time.Time
}

func newSessions(idle time.Duration, now func() time.Time) *sessions {
	return &sessions{byID: map[string]*session{}, idle: idle, now: now}
}

func randomToken() string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func (ss *sessions) create(p auth.Principal) *session {
	s := &session{id: randomToken(), csrf: randomToken(), principal: p, lastSeen: ss.now()}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	now := ss.now()
	for id, o := range ss.byID { // expired ones go as new ones come
		if now.Sub(o.lastSeen) > ss.idle {
			delete(ss.byID, id)
		}
	}
	ss.byID[s.id] = s
	return s
}

// get returns the live session with id, touching it; nil when there is
// none or it sat idle too long.
func (ss *sessions) get(id string) *session {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s := ss.byID[id]
	if s == nil {
		return nil
	}
	now := ss.now()
	if now.Sub(s.lastSeen) > ss.idle {
		delete(ss.byID, id)
		return nil
	}
	s.lastSeen = now
	return s
}

func (ss *sessions) remove(id string) {
	ss.mu.Lock()
	delete(ss.byID, id)
	ss.mu.Unlock()
}

func (c *Console) setCookie(w http.ResponseWriter, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: value, Path: Prefix, HttpOnly: true, Secure: c.cfg.Secure,
		SameSite: http.SameSiteStrictMode, MaxAge: maxAge})
}

type sessionKey struct{}

// sessionVerifier is the session check as an api.Verifier, so that
// api.Marking frees the request's unauthenticated slot once it passes.
type sessionVerifier struct{ c *Console }

func (v sessionVerifier) Verify(ctx context.Context, r *http.Request, _ []byte) (auth.Principal, error) {
	ck, err := r.Cookie(CookieName)
	if err != nil {
		return auth.Principal{}, errNoSession
	}
	s := v.c.sessions.get(ck.Value)
	if s == nil {
		return auth.Principal{}, errNoSession
	}
	*(ctx.Value(sessionKey{}).(**session)) = s
	return s.principal, nil
}

type consoleErr string

func (e consoleErr) Error() string { return string(e) }

const errNoSession = consoleErr("no session")

// authed serves h to a signed-in session only, checking the CSRF token of
// every POST; others are sent to sign in.
func (c *Console) authed(h func(w http.ResponseWriter, r *http.Request, s *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var s *session
		ctx := context.WithValue(r.Context(), sessionKey{}, &s)
		if _, err := api.Marking(sessionVerifier{c}).Verify(ctx, r, nil); err != nil {
			if r.Method == http.MethodGet && r.Header.Get("Accept") != "text/event-stream" {
				http.Redirect(w, r, Prefix+"signin", http.StatusSeeOther)
				return
			}
			http.Error(w, "not signed in (or the session expired)", http.StatusUnauthorized)
			return
		}
		if r.Method == http.MethodPost {
			tok := r.PostFormValue("csrf")
			if subtle.ConstantTimeCompare([]byte(tok), []byte(s.csrf)) != 1 {
				http.Error(w, "missing or wrong CSRF token: reload the page and try again", http.StatusForbidden)
				return
			}
		}
		h(w, r, s)
	}
}

// signinLimiter bounds failed sign-ins: per client address and overall,
// per minute.
type signinLimiter struct {
	mu     sync.Mutex
	window time.Time
	byIP   map[string]int
	total  int
	now    func() time.Time
}

const (
	maxFailuresPerIP = 10
	maxFailures      = 100
)

func newSigninLimiter(now func() time.Time) *signinLimiter {
	return &signinLimiter{byIP: map[string]int{}, now: now}
}

func (l *signinLimiter) roll() {
	if now := l.now(); now.Sub(l.window) > time.Minute {
		l.window, l.byIP, l.total = now, map[string]int{}, 0
	}
}

// blocked reports whether ip may not try now.
func (l *signinLimiter) blocked(ip string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.roll()
	return l.byIP[ip] >= maxFailuresPerIP || l.total >= maxFailures
}

func (l *signinLimiter) failed(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.roll()
	l.byIP[ip]++
	l.total++
}

func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

const signinFailed = "Sign-in failed: the access key ID or secret is wrong."

func (c *Console) signin(w http.ResponseWriter, r *http.Request) {
	ip := clientIP(r)
	if c.signins.blocked(ip) {
		w.Header().Set("Retry-After", "60")
		c.render(w, r, http.StatusTooManyRequests, "signin", nil, map[string]any{"Error": "Too many failed sign-ins; wait a minute and try again."})
		return
	}
	keyID, secret := r.PostFormValue("accessKeyId"), r.PostFormValue("secretAccessKey")
	p, ok := c.verifyKey(r.Context(), keyID, secret)
	if !ok {
		c.signins.failed(ip)
		c.cfg.Log.Info("console sign-in failed", "from", ip)
		c.render(w, r, http.StatusUnauthorized, "signin", nil, map[string]any{"Error": signinFailed, "KeyID": keyID})
		return
	}
	s := c.sessions.create(p)
	c.setCookie(w, s.id, 0)
	http.Redirect(w, r, Prefix+"clusters", http.StatusSeeOther)
}

// verifyKey checks a key ID and secret; only the root and IAM users sign in.
func (c *Console) verifyKey(ctx context.Context, keyID, secret string) (auth.Principal, bool) {
	if keyID == "" || secret == "" || len(keyID) > 128 || len(secret) > 256 {
		return auth.Principal{}, false
	}
	cred, ok, err := c.cfg.Lookup.Credential(ctx, keyID)
	if err != nil || !ok {
		return auth.Principal{}, false
	}
	if subtle.ConstantTimeCompare([]byte(secret), []byte(cred.SecretAccessKey)) != 1 {
		return auth.Principal{}, false
	}
	if cred.Role != auth.RoleAdmin && cred.Role != auth.RoleUser {
		return auth.Principal{}, false
	}
	return auth.Principal{AccessKeyID: cred.AccessKeyID, Role: cred.Role, UserName: cred.UserName, ARN: cred.ARN,
		InstanceID: cred.InstanceID, Region: c.cfg.Region}, true
}

func (c *Console) signout(w http.ResponseWriter, r *http.Request, s *session) {
	c.sessions.remove(s.id)
	c.setCookie(w, "", -1)
	http.Redirect(w, r, Prefix+"signin", http.StatusSeeOther)
}

func (c *Console) signinPage(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, http.StatusOK, "signin", nil, map[string]any{})
}

func (c *Console) home(w http.ResponseWriter, r *http.Request) {
	http.Redirect(w, r, Prefix+"clusters", http.StatusSeeOther)
}
