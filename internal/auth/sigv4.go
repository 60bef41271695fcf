package auth

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

const (
	algorithm       = "AWS4-HMAC-SHA256"
	amzDateLayout   = "20060102T150405Z"
	scopeTerminator = "aws4_request"
	unsignedPayload = "UNSIGNED-PAYLOAD"
	maxPresignTTL   = 7 * 24 * time.Hour // AWS's own ceiling for X-Amz-Expires
)

// Verifier checks SigV4 signatures, in the Authorization header or in a
// presigned URL's query string. The zero values of Now, Service and MaxSkew
// mean time.Now, "ecs" and 15 minutes.
type Verifier struct {
	Lookup  Lookup
	Now     func() time.Time
	Service string
	MaxSkew time.Duration
}

// claim is what a request says about how it was signed; Verify checks it.
type claim struct {
	accessKeyID, date, region, service, terminator string // credential scope
	signedHeaders                                  []string
	signature                                      string
	amzDate                                        string // exactly as signed
	t                                              time.Time
	presigned                                      bool
	expires                                        time.Duration // presigned with X-Amz-Expires only
}

func (c *claim) scope() string {
	return c.date + "/" + c.region + "/" + c.service + "/" + c.terminator
}

// Verify authenticates r, whose body the caller has already read into body.
// A refusal is an *Error; any other error means the Lookup failed. A
// presigned URL is good for X-Amz-Expires seconds, or MaxSkew without it.
func (v *Verifier) Verify(ctx context.Context, r *http.Request, body []byte) (Principal, error) {
	c, aerr := parseClaim(r)
	if aerr == nil {
		aerr = v.checkScope(c)
	}
	if aerr == nil {
		aerr = v.checkTime(c)
	}
	if aerr != nil {
		return Principal{}, aerr
	}
	if v.Lookup == nil {
		return Principal{}, errors.New("auth: verifier has no credential lookup")
	}
	cred, ok, err := v.Lookup.Credential(ctx, c.accessKeyID)
	if err != nil {
		return Principal{}, fmt.Errorf("auth: look up access key: %w", err)
	}
	if !ok {
		return Principal{}, errUnrecognized()
	}
	payload, aerr := payloadHash(r, body, c.presigned)
	if aerr != nil {
		return Principal{}, aerr
	}
	creq := canonicalRequest(r, c.signedHeaders, payload, c.presigned)
	want := signature(cred.SecretAccessKey, c, creq)
	if !hmac.Equal([]byte(want), []byte(c.signature)) {
		return Principal{}, errMismatch()
	}
	return Principal{AccessKeyID: cred.AccessKeyID, Role: cred.Role, InstanceID: cred.InstanceID, UserName: cred.UserName, ARN: cred.ARN,
		Region: c.region}, nil
}

// ClaimedKeyID is the access key ID a request's signature names, verified
// or not ("" when it names none): what the audit trail records for a call
// that failed authentication.
func ClaimedKeyID(r *http.Request) string {
	c, err := parseClaim(r)
	if err != nil {
		return ""
	}
	return c.accessKeyID
}

func (v *Verifier) service() string {
	if v.Service == "" {
		return "ecs"
	}
	return v.Service
}

func (v *Verifier) maxSkew() time.Duration {
	if v.MaxSkew <= 0 {
		return 15 * time.Minute
	}
	return v.MaxSkew
}

func (v *Verifier) now() time.Time {
	if v.Now == nil {
		return time.Now()
	}
	return v.Now()
}

func (v *Verifier) checkScope(c *claim) *Error {
	switch {
	case c.terminator != scopeTerminator:
		return errInvalid("Credential should be scoped with a valid terminator: '%s'.", scopeTerminator)
	case c.service != v.service():
		return errInvalid("Credential should be scoped to correct service: '%s'.", v.service())
	case c.date != c.amzDate[:8]:
		return errInvalid("Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: '%s' != '%s', from '%s'.",
			c.date, c.amzDate[:8], c.amzDate)
	}
	return nil
}

// checkTime keeps the wording AWS uses: SDKs recognise "Signature expired"
// as clock skew and retry with a corrected clock.
func (v *Verifier) checkTime(c *claim) *Error {
	now := v.now().UTC()
	skew := v.maxSkew()
	if c.t.Sub(now) > skew {
		return errInvalid("Signature not yet current: %s is still later than %s (%s + %s.)",
			stamp(c.t), stamp(now.Add(skew)), stamp(now), span(skew))
	}
	window := skew
	if c.expires > 0 {
		window = c.expires
	}
	if now.Sub(c.t) > window {
		return errInvalid("Signature expired: %s is now earlier than %s (%s - %s.)",
			stamp(c.t), stamp(now.Add(-window)), stamp(now), span(window))
	}
	return nil
}

func stamp(t time.Time) string { return t.UTC().Format(amzDateLayout) }

func span(d time.Duration) string {
	if d%time.Minute == 0 {
		return strconv.FormatInt(int64(d/time.Minute), 10) + " min"
	}
	return strconv.FormatInt(int64(d/time.Second), 10) + " sec"
}

// parseClaim reads the signature from the Authorization header or, failing
// that, from presigned query parameters.
func parseClaim(r *http.Request) (*claim, *Error) {
	authz := r.Header.Get("Authorization")
	q := r.URL.Query()
	presigned := q.Has("X-Amz-Algorithm") || q.Has("X-Amz-Credential") || q.Has("X-Amz-Signature")
	switch {
	case authz != "" && presigned:
		return nil, errInvalid("Only one auth mechanism allowed; use either the Authorization header or X-Amz-* query parameters.")
	case authz != "":
		return parseHeaderClaim(r, authz)
	case presigned:
		return parseQueryClaim(q)
	}
	return nil, errMissingToken()
}

func parseHeaderClaim(r *http.Request, authz string) (*claim, *Error) {
	alg, rest, _ := strings.Cut(strings.TrimSpace(authz), " ")
	if alg != algorithm {
		return nil, errIncomplete("Unsupported Authorization algorithm; only %s is accepted.", algorithm)
	}
	params := map[string]string{}
	for part := range strings.SplitSeq(rest, ",") {
		if k, val, ok := strings.Cut(strings.TrimSpace(part), "="); ok {
			params[k] = val
		}
	}
	var missing []string
	for _, k := range []string{"Credential", "SignedHeaders", "Signature"} {
		if params[k] == "" {
			missing = append(missing, fmt.Sprintf("Authorization header requires '%s' parameter.", k))
		}
	}
	if len(missing) > 0 {
		return nil, errIncomplete("%s", strings.Join(missing, " "))
	}

	c := &claim{signature: params["Signature"]}
	var aerr *Error
	if aerr = c.setCredential(params["Credential"]); aerr == nil {
		aerr = c.setSignedHeaders(params["SignedHeaders"])
	}
	if aerr != nil {
		return nil, aerr
	}

	// X-Amz-Date wins; Date is the fallback older clients use.
	if d := r.Header.Get("X-Amz-Date"); d != "" {
		t, err := time.Parse(amzDateLayout, d)
		if err != nil {
			return nil, errIncomplete("X-Amz-Date must be an ISO-8601 basic format date such as 20260401T120000Z.")
		}
		c.t, c.amzDate = t, d
	} else if d := r.Header.Get("Date"); d != "" {
		t, err := http.ParseTime(d)
		if err != nil {
			return nil, errIncomplete("Date header must be an RFC 1123 date.")
		}
		c.t, c.amzDate = t.UTC(), stamp(t)
	} else {
		return nil, errIncomplete("Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header.")
	}
	return c, nil
}

func parseQueryClaim(q url.Values) (*claim, *Error) {
	var missing []string
	for _, k := range []string{"X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-SignedHeaders", "X-Amz-Signature", "X-Amz-Date"} {
		if q.Get(k) == "" {
			missing = append(missing, fmt.Sprintf("Query-string authentication requires the '%s' parameter.", k))
		}
	}
	if len(missing) > 0 {
		return nil, errIncomplete("%s", strings.Join(missing, " "))
	}
	if q.Get("X-Amz-Algorithm") != algorithm {
		return nil, errIncomplete("Unsupported X-Amz-Algorithm; only %s is accepted.", algorithm)
	}

	c := &claim{signature: q.Get("X-Amz-Signature"), presigned: true}
	var aerr *Error
	if aerr = c.setCredential(q.Get("X-Amz-Credential")); aerr == nil {
		aerr = c.setSignedHeaders(q.Get("X-Amz-SignedHeaders"))
	}
	if aerr != nil {
		return nil, aerr
	}
	t, err := time.Parse(amzDateLayout, q.Get("X-Amz-Date"))
	if err != nil {
		return nil, errIncomplete("X-Amz-Date must be an ISO-8601 basic format date such as 20260401T120000Z.")
	}
	c.t, c.amzDate = t, q.Get("X-Amz-Date")
	if e := q.Get("X-Amz-Expires"); e != "" {
		n, err := strconv.ParseInt(e, 10, 64)
		if err != nil || n < 1 || time.Duration(n)*time.Second > maxPresignTTL {
			return nil, errIncomplete("X-Amz-Expires must be a whole number of seconds from 1 to %d.", int64(maxPresignTTL/time.Second))
		}
		c.expires = time.Duration(n) * time.Second
	}
	return c, nil
}

func (c *claim) setCredential(s string) *Error {
	parts := strings.Split(s, "/")
	if len(parts) != 5 || slices.Contains(parts, "") {
		return errIncomplete("Credential must have exactly 5 non-empty slash-delimited elements: keyid/date/region/service/aws4_request.")
	}
	c.accessKeyID, c.date, c.region, c.service, c.terminator = parts[0], parts[1], parts[2], parts[3], parts[4]
	return nil
}

func (c *claim) setSignedHeaders(s string) *Error {
	c.signedHeaders = strings.Split(strings.ToLower(s), ";")
	if slices.Contains(c.signedHeaders, "") {
		return errIncomplete("SignedHeaders must be a ';'-separated list of header names.")
	}
	if !slices.Contains(c.signedHeaders, "host") {
		return errIncomplete("SignedHeaders must include 'host'.")
	}
	return nil
}

// payloadHash is the last line of the canonical request. A client-supplied
// x-amz-content-sha256 is used as sent, but a real hash must match the body.
func payloadHash(r *http.Request, body []byte, presigned bool) (string, *Error) {
	given := r.Header.Get("X-Amz-Content-Sha256")
	if given == "" && presigned {
		given = r.URL.Query().Get("X-Amz-Content-Sha256")
	}
	sum := sha256.Sum256(body)
	computed := hex.EncodeToString(sum[:])
	switch {
	case given == "" && presigned:
		return unsignedPayload, nil
	case given == "":
		return computed, nil
	case isHexSHA256(given) && !strings.EqualFold(given, computed):
		return "", errInvalid("The provided 'x-amz-content-sha256' header does not match what was computed.")
	}
	return given, nil
}

func isHexSHA256(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

func canonicalRequest(r *http.Request, signedHeaders []string, payloadHash string, presigned bool) string {
	var b strings.Builder
	b.WriteString(r.Method + "\n")
	b.WriteString(canonicalURI(r.URL) + "\n")
	b.WriteString(canonicalQuery(r.URL.RawQuery, presigned) + "\n")
	for _, h := range signedHeaders {
		b.WriteString(h + ":" + headerValue(r, h) + "\n")
	}
	b.WriteString("\n" + strings.Join(signedHeaders, ";") + "\n")
	b.WriteString(payloadHash)
	return b.String()
}

// canonicalURI encodes the path as sent on the wire once more, which is the
// rule for every service but S3.
func canonicalURI(u *url.URL) string {
	p := u.EscapedPath()
	if p == "" {
		return "/"
	}
	return uriEncode(p, true)
}

func canonicalQuery(raw string, presigned bool) string {
	var pairs [][2]string
	for part := range strings.SplitSeq(raw, "&") {
		if part == "" {
			continue
		}
		k, val, _ := strings.Cut(part, "=")
		k, val = queryUnescape(k), queryUnescape(val)
		if presigned && k == "X-Amz-Signature" {
			continue
		}
		pairs = append(pairs, [2]string{uriEncode(k, false), uriEncode(val, false)})
	}
	// Sort by encoded key, then value; sorting "k=v" strings would put
	// "a-b" before "a".
	slices.SortFunc(pairs, func(a, b [2]string) int {
		return cmp.Or(strings.Compare(a[0], b[0]), strings.Compare(a[1], b[1]))
	})
	var b strings.Builder
	for i, p := range pairs {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(p[0] + "=" + p[1])
	}
	return b.String()
}

func queryUnescape(s string) string {
	if u, err := url.QueryUnescape(s); err == nil {
		return u
	}
	return s
}

// headerValue joins repeated headers with "," after trimming each value and
// collapsing its inner whitespace.
func headerValue(r *http.Request, name string) string {
	if name == "host" {
		return r.Host // net/http moves Host out of r.Header
	}
	vals := r.Header.Values(name)
	if len(vals) == 0 && name == "content-length" && r.ContentLength > 0 {
		vals = []string{strconv.FormatInt(r.ContentLength, 10)}
	}
	out := make([]string, len(vals)) // vals aliases r.Header
	for i, val := range vals {
		out[i] = strings.Join(strings.Fields(val), " ")
	}
	return strings.Join(out, ",")
}

func uriEncode(s string, keepSlash bool) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if 'A' <= ch && ch <= 'Z' || 'a' <= ch && ch <= 'z' || '0' <= ch && ch <= '9' ||
			ch == '-' || ch == '_' || ch == '.' || ch == '~' || ch == '/' && keepSlash {
			b.WriteByte(ch)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[ch>>4])
		b.WriteByte(hexDigits[ch&15])
	}
	return b.String()
}

func signature(secret string, c *claim, canonicalRequest string) string {
	creqHash := sha256.Sum256([]byte(canonicalRequest))
	toSign := algorithm + "\n" + c.amzDate + "\n" + c.scope() + "\n" + hex.EncodeToString(creqHash[:])
	key := []byte("AWS4" + secret)
	for _, part := range []string{c.date, c.region, c.service, c.terminator} {
		key = hmacSHA256(key, part)
	}
	return hex.EncodeToString(hmacSHA256(key, toSign))
}

func hmacSHA256(key []byte, data string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(data))
	return h.Sum(nil)
}
