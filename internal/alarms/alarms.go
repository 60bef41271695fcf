// Package alarms tells which of a deployment's alarms are firing, asking the
// Prometheus server or Alertmanager the server is configured with
// (--alarm-source). An alarm name is an alert name: the name of a Prometheus
// alerting rule, which is the alertname label of the alerts it raises.
//
// What counts as firing:
//   - Prometheus (GET /api/v1/rules): an alerting rule with at least one
//     alert in state "firing". A "pending" alert, whose condition holds but
//     not yet for the rule's "for" duration, does not count: the rule's own
//     author decided it is not an alarm yet.
//   - Alertmanager (GET /api/v2/alerts): an active alert, that is neither
//     silenced nor inhibited; an operator's silence means "ignore this".
//     Alertmanager knows alerts, not rules, so it cannot tell an undefined
//     alarm from a quiet one: Status.Unknown stays empty.
//
// The kind of source is taken from a scheme hint ("prometheus+http://...",
// "alertmanager+https://...") or, for plain http(s), detected on first use:
// the Prometheus rules API is tried first, then the Alertmanager alerts API.
// Anything that serves the Prometheus rules API (Thanos, Mimir, vmalert) works
// as a Prometheus source.
package alarms

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// Kind is the API a source speaks.
type Kind string

const (
	Prometheus   Kind = "prometheus"
	Alertmanager Kind = "alertmanager"
)

var (
	// ErrUnreachable: the source did not answer (connection refused,
	// timeout, DNS).
	ErrUnreachable = errors.New("unreachable")
	// ErrBadResponse: the source answered, but not with what its API
	// promises (error status, not JSON, an API error).
	ErrBadResponse = errors.New("bad response")
	// ErrNotConfigured is what a nil *Client answers: the server has no
	// --alarm-source, so alarms cannot be evaluated.
	ErrNotConfigured = errors.New("no alarm source configured (--alarm-source)")
)

// Status is the state of the asked alarms at one moment. Both lists are
// sorted and hold only asked names.
type Status struct {
	// Firing are the alarms with at least one firing alert.
	Firing []string
	// Unknown are the alarms the source has no alerting rule for.
	Unknown []string
}

// Source answers which alarms are firing. *Client implements it; consumers
// may declare their own narrower interface instead.
type Source interface {
	Firing(ctx context.Context, names []string) (Status, error)
}

// Client asks one source. It is safe for concurrent use.
type Client struct {
	base *url.URL // scheme http or https, hint removed
	hc   *http.Client

	mu   sync.Mutex
	kind Kind // from the hint, or once detected; "" until then
}

// maxBody bounds what is read from a source: a big Prometheus has a few MB
// of rules, anything far larger is not a rules answer.
const maxBody = 64 << 20

// New returns a client for the source at rawURL, which may carry a path
// prefix (http://host/prometheus). An empty rawURL means no source: New
// returns nil, nil. New does no I/O, so a source that is down at start is
// reported by Firing, not here. A nil hc means a client with a 10s timeout.
func New(rawURL string, hc *http.Client) (*Client, error) {
	if rawURL == "" {
		return nil, nil
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("alarm source URL: %w", err)
	}
	c := &Client{base: u, hc: hc}
	scheme := strings.ToLower(u.Scheme)
	if hint, rest, ok := strings.Cut(scheme, "+"); ok {
		switch Kind(hint) {
		case Prometheus, Alertmanager:
			c.kind, scheme = Kind(hint), rest
		default:
			return nil, fmt.Errorf("alarm source URL %q: unknown kind %q (want prometheus+ or alertmanager+)", u.Redacted(), hint)
		}
	}
	if scheme != "http" && scheme != "https" {
		return nil, fmt.Errorf("alarm source URL %q: scheme must be http or https, optionally prefixed by prometheus+ or alertmanager+", u.Redacted())
	}
	if u.Host == "" {
		return nil, fmt.Errorf("alarm source URL %q: no host", u.Redacted())
	}
	u.Scheme, u.RawQuery, u.Fragment = scheme, "", ""
	if c.hc == nil {
		c.hc = &http.Client{Timeout: 10 * time.Second}
	}
	return c, nil
}

// String is the source URL with any password hidden.
func (c *Client) String() string { return c.base.Redacted() }

// Kind is the source's kind: from the URL's hint, or detected by the first
// successful Firing; "" before that.
func (c *Client) Kind() Kind {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.kind
}

// Firing asks the source which of names are firing now, and which it does
// not define. Errors wrap ErrUnreachable or ErrBadResponse (or the
// context's error) and name the source.
func (c *Client) Firing(ctx context.Context, names []string) (Status, error) {
	if c == nil {
		return Status{}, ErrNotConfigured
	}
	asked := map[string]bool{}
	for _, n := range names {
		asked[n] = true
	}
	if len(asked) == 0 {
		return Status{}, nil
	}
	switch kind := c.Kind(); kind {
	case Prometheus:
		return c.prometheus(ctx, asked)
	case Alertmanager:
		return c.alertmanager(ctx, asked)
	}
	st, err := c.prometheus(ctx, asked)
	if errors.Is(err, errNoAPI) {
		st, err = c.alertmanager(ctx, asked)
		if errors.Is(err, errNoAPI) {
			return Status{}, fmt.Errorf("alarm source %s: %w: neither the Prometheus rules API (/api/v1/rules) nor the Alertmanager alerts API (/api/v2/alerts) is served there", c, ErrBadResponse)
		}
		if err == nil {
			c.setKind(Alertmanager)
		}
		return st, err
	}
	if err == nil {
		c.setKind(Prometheus)
	}
	return st, err
}

func (c *Client) setKind(k Kind) {
	c.mu.Lock()
	c.kind = k
	c.mu.Unlock()
}

// errNoAPI marks a 404: the source is up but does not serve that API, which
// is how detection tells Prometheus from Alertmanager.
var errNoAPI = errors.New("API not served")

type promRules struct {
	Status    string `json:"status"`
	ErrorType string `json:"errorType"`
	Error     string `json:"error"`
	Data      *struct {
		Groups []struct {
			Rules []struct {
				Type   string `json:"type"`
				Name   string `json:"name"`
				State  string `json:"state"`
				Alerts []struct {
					State string `json:"state"`
				} `json:"alerts"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"data"`
}

func (c *Client) prometheus(ctx context.Context, asked map[string]bool) (Status, error) {
	var r promRules
	if err := c.get(ctx, "api/v1/rules", url.Values{"type": {"alert"}}, &r); err != nil {
		// Prometheus answers its own errors (503 while starting) in the
		// envelope; say what it said.
		if r.Error != "" {
			return Status{}, fmt.Errorf("alarm source %s: %w: %s: %s", c, ErrBadResponse, r.ErrorType, r.Error)
		}
		return Status{}, err
	}
	if r.Status != "success" || r.Data == nil {
		return Status{}, fmt.Errorf("alarm source %s: %w: /api/v1/rules answered without a Prometheus success envelope", c, ErrBadResponse)
	}
	defined, firing := map[string]bool{}, map[string]bool{}
	for _, g := range r.Data.Groups {
		for _, rule := range g.Rules {
			if rule.Type != "alerting" || !asked[rule.Name] {
				continue
			}
			// Several rules may share a name (one per severity, say):
			// the alarm fires when any of them does.
			defined[rule.Name] = true
			if rule.State == "firing" {
				firing[rule.Name] = true
			}
			for _, a := range rule.Alerts {
				if a.State == "firing" {
					firing[rule.Name] = true
				}
			}
		}
	}
	var st Status
	for n := range asked {
		switch {
		case firing[n]:
			st.Firing = append(st.Firing, n)
		case !defined[n]:
			st.Unknown = append(st.Unknown, n)
		}
	}
	slices.Sort(st.Firing)
	slices.Sort(st.Unknown)
	return st, nil
}

type amAlert struct {
	Labels map[string]string `json:"labels"`
	Status struct {
		State string `json:"state"`
	} `json:"status"`
}

func (c *Client) alertmanager(ctx context.Context, asked map[string]bool) (Status, error) {
	var alerts []amAlert
	q := url.Values{"active": {"true"}, "silenced": {"false"}, "inhibited": {"false"}}
	if err := c.get(ctx, "api/v2/alerts", q, &alerts); err != nil {
		return Status{}, err
	}
	firing := map[string]bool{}
	for _, a := range alerts {
		// The query already leaves out muted alerts; the state check
		// guards against a server that ignores the filters.
		if n := a.Labels["alertname"]; asked[n] && a.Status.State != "suppressed" {
			firing[n] = true
		}
	}
	var st Status
	for n := range firing {
		st.Firing = append(st.Firing, n)
	}
	slices.Sort(st.Firing)
	return st, nil
}

// get decodes the JSON answer to GET base/path?q into v. On an error
// status it still decodes the body into v when it can, for the caller to
// find the API's own message.
func (c *Client) get(ctx context.Context, path string, q url.Values, v any) error {
	u := c.base.JoinPath(path)
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("alarm source %s: %w", c, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("alarm source %s: %w", c, ctx.Err())
		}
		// The url.Error repeats the full URL, password included; keep
		// only its cause.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("alarm source %s: %w: %w", c, ErrUnreachable, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return fmt.Errorf("alarm source %s: %w: reading /%s: %w", c, ErrUnreachable, path, err)
	}
	if resp.StatusCode == http.StatusNotFound {
		return fmt.Errorf("alarm source %s: %w: %w: /%s: %s", c, ErrBadResponse, errNoAPI, path, resp.Status)
	}
	if resp.StatusCode/100 != 2 {
		json.Unmarshal(body, v)
		return fmt.Errorf("alarm source %s: %w: /%s: %s: %s", c, ErrBadResponse, path, resp.Status, snippet(body))
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("alarm source %s: %w: /%s: not the expected JSON (%v): %s", c, ErrBadResponse, path, err, snippet(body))
	}
	return nil
}

// snippet is the start of a body, for an error message.
func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	if s == "" {
		return "(empty body)"
	}
	return fmt.Sprintf("%q", s)
}
