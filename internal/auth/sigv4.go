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
)

// Verifier checks SigV4 signatures in the Authorization header, as AWS's
// JSON and Query services take them: the body is always hashed and signed,
// and presigned (query-string) requests are refused, since a URL would be a
// bearer token for whatever it names. The zero values of Now, Service and
// MaxSkew mean time.Now, "ecs" and 15 minutes.
//
// Region, when set, is the only region a request may be signed for, as an
// AWS regional endpoint answers: a server has one region's resources and
// ARNs, and serving another region's requests from them would mix the two.
// Agent credentials are exempt: the server mints them for its own fleet,
// whose agents sign with whatever region they were configured with.
type Verifier struct {
	Lookup  Lookup
	Now     func() time.Time
	Service string
	MaxSkew time.Duration
	Region  string
}

// claim is what a request says about how it was signed; Verify checks it.
type claim struct {
	accessKeyID, date, region, service, terminator string // credential scope
	signedHeaders                                  []string
	signature                                      string
	amzDate                                        string // exactly as signed
	t                                              time.Time
	payloadHash                                    string // X-Amz-Content-Sha256, when sent
}

func (c *claim) scope() string {
	return c.date + "/" + c.region + "/" + c.service + "/" + c.terminator
}

// Verify authenticates r, whose body the caller has already read into body.
// A refusal is an *Error; any other error means the Lookup failed.
func (v *Verifier) Verify(ctx context.Context, r *http.Request, body []byte) (Principal, error) {
	p, err := v.Begin(ctx, r)
	if err != nil {
		return Principal{}, err
	}
	return p.Finish(body)
}

// Pending is a request whose headers passed: its signature is well formed,
// scoped to this service, dated within the skew and names a known key.
// Finish checks the signature over the body.
type Pending struct {
	r    *http.Request
	c    *claim
	cred Credential
}

// Begin checks what the headers alone can tell, so a server refuses most
// bad requests before it reads a body. Errors are as Verify's.
func (v *Verifier) Begin(ctx context.Context, r *http.Request) (*Pending, error) {
	c, aerr := parseClaim(r)
	if aerr == nil {
		aerr = v.checkScope(c)
	}
	if aerr == nil {
		aerr = v.checkTime(c)
	}
	if aerr != nil {
		return nil, aerr
	}
	if v.Lookup == nil {
		return nil, errors.New("auth: verifier has no credential lookup")
	}
	cred, ok, err := v.Lookup.Credential(ctx, c.accessKeyID)
	if err != nil {
		return nil, fmt.Errorf("auth: look up access key: %w", err)
	}
	if !ok {
		return nil, errUnrecognized()
	}
	if v.Region != "" && c.region != v.Region && cred.Role != RoleAgent {
		return nil, errInvalid("Credential should be scoped to a valid region, not '%s'.", clipRegion(c.region))
	}
	return &Pending{r: r, c: c, cred: cred}, nil
}

// Finish checks the signature over the request and body, the body's hash
// computed here whatever the client claims.
func (p *Pending) Finish(body []byte) (Principal, error) {
	sum := sha256.Sum256(body)
	payload := hex.EncodeToString(sum[:])
	if p.c.payloadHash != "" && p.c.payloadHash != payload {
		return Principal{}, errInvalid("The provided 'x-amz-content-sha256' header does not match what was computed.")
	}
	creq := canonicalRequest(p.r, p.c.signedHeaders, payload)
	want := signature(p.cred.SecretAccessKey, p.c, creq)
	if !hmac.Equal([]byte(want), []byte(p.c.signature)) {
		return Principal{}, errMismatch()
	}
	cred := p.cred
	return Principal{AccessKeyID: cred.AccessKeyID, Role: cred.Role, InstanceID: cred.InstanceID, UserName: cred.UserName, ARN: cred.ARN,
		Region: p.c.region}, nil
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

// ClaimedService is the service a request's signature is scoped to,
// verified or not ("" when it names none): the Query API serves iam and
// sts on one path and picks the verifier by it.
func ClaimedService(r *http.Request) string {
	c, err := parseClaim(r)
	if err != nil {
		return ""
	}
	return c.service
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
	if now.Sub(c.t) > skew {
		return errInvalid("Signature expired: %s is now earlier than %s (%s - %s.)",
			stamp(c.t), stamp(now.Add(-skew)), stamp(now), span(skew))
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

// parseClaim reads the signature from the Authorization header. Presigning
// parameters in the query are refused, with or without the header.
func parseClaim(r *http.Request) (*claim, *Error) {
	q := r.URL.Query()
	for _, k := range []string{"X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-SignedHeaders", "X-Amz-Signature"} {
		if q.Has(k) {
			return nil, errInvalid("Presigned (query-string) authentication is not accepted here; " +
				"sign the request with the Authorization header and send no X-Amz-* signing parameters in the URL.")
		}
	}
	if authz := r.Header.Get("Authorization"); authz != "" {
		return parseHeaderClaim(r, authz)
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
	if c.payloadHash, aerr = claimedPayloadHash(r); aerr != nil {
		return nil, aerr
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

// claimedPayloadHash is X-Amz-Content-Sha256 when sent. Only a real hash is
// taken: UNSIGNED-PAYLOAD, the STREAMING-* modes or anything else would
// leave the body out of the signature, and with it what a call does.
func claimedPayloadHash(r *http.Request) (string, *Error) {
	vals := r.Header.Values("X-Amz-Content-Sha256")
	if len(vals) == 0 {
		return "", nil
	}
	if len(vals) > 1 || !isLowerHexSHA256(vals[0]) {
		got := strings.Join(vals, ",")
		if len(got) > 80 {
			got = got[:80] + "..."
		}
		return "", errInvalid("The 'x-amz-content-sha256' header must be the lowercase hex SHA-256 of the request body; "+
			"this endpoint takes no unsigned or streaming payloads (got %q).", got)
	}
	return vals[0], nil
}

func isLowerHexSHA256(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !('0' <= s[i] && s[i] <= '9' || 'a' <= s[i] && s[i] <= 'f') {
			return false
		}
	}
	return true
}

func canonicalRequest(r *http.Request, signedHeaders []string, payloadHash string) string {
	var b strings.Builder
	b.WriteString(r.Method + "\n")
	b.WriteString(canonicalURI(r.URL) + "\n")
	b.WriteString(canonicalQuery(r.URL.RawQuery) + "\n")
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

func canonicalQuery(raw string) string {
	var pairs [][2]string
	for part := range strings.SplitSeq(raw, "&") {
		if part == "" {
			continue
		}
		k, val, _ := strings.Cut(part, "=")
		k, val = queryUnescape(k), queryUnescape(val)
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

// clipRegion keeps a claimed region short enough to quote in an error.
func clipRegion(r string) string {
	if len(r) > 32 {
		return r[:32] + "..."
	}
	return r
}
