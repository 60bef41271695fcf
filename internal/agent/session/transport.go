package session

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/capstanhq/capstan/internal/agent/config"
)

// NewHTTPClient returns the client the agent's API calls and session go
// through, trusting only the certificates in the PEM file caBundle; TLS 1.2
// at least. The caller uses the defaults when there is no bundle.
func NewHTTPClient(caBundle string) (*http.Client, error) {
	pool, err := config.LoadCABundle(caBundle)
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return &http.Client{Transport: tr}, nil
}

// CertError is a connection to the server refused for its certificate (or
// for not speaking TLS): the operator's fix is in the agent's settings or
// the server's certificate, not in waiting, so it says which.
type CertError struct {
	Endpoint string
	CABundle string // "" for the system's roots
	Err      error  // the whole error, for errors.Is/As
	problem  string
}

func (e *CertError) Error() string {
	if e.problem == "" {
		return fmt.Sprintf("server %s does not speak TLS: is its URL http://?", e.Endpoint)
	}
	trust := "the system's roots (set CAPSTAN_CA_BUNDLE to the server's CA bundle)"
	if e.CABundle != "" {
		trust = "the CA bundle " + e.CABundle
	}
	return fmt.Sprintf("server %s: its certificate is not trusted: %s; checked against %s", e.Endpoint, e.problem, trust)
}

func (e *CertError) Unwrap() error { return e.Err }

// ExplainTLS turns err into a CertError when a certificate check or a
// non-TLS answer caused it, and returns it unchanged otherwise.
func ExplainTLS(err error, endpoint, caBundle string) error {
	if err == nil {
		return nil
	}
	var already *CertError
	if errors.As(err, &already) {
		return err
	}
	ce := &CertError{Endpoint: endpoint, CABundle: caBundle, Err: err}
	var verr *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	var record tls.RecordHeaderError
	switch {
	case errors.As(err, &verr):
		ce.problem = verr.Err.Error()
	case errors.As(err, &unknown):
		ce.problem = unknown.Error()
	case errors.As(err, &host):
		ce.problem = host.Error()
	case errors.As(err, &invalid):
		ce.problem = invalid.Error()
	case errors.As(err, &record) && strings.HasPrefix(endpoint, "https://"):
	case strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"): // net/http's, untyped
	default:
		return err
	}
	return ce
}
