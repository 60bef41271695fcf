package server

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Files of a generated certificate, under the data dir.
const (
	tlsDirName      = "tls"
	selfSignedCert  = "server.crt"
	selfSignedKey   = "server.key"
	selfSignedYears = 5
)

// tlsReloadEvery is how often a served --tls-cert/--tls-key pair is checked
// for replacement, so a renewed certificate is picked up without a restart.
const tlsReloadEvery = 10 * time.Second

// TLSInfo describes the certificate a TLS server presents.
type TLSInfo struct {
	// CertFile is the certificate served (its chain follows it).
	CertFile string
	// CABundle is what clients and agents are given to trust the server:
	// the generated certificate with --tls-self-signed, "" with --tls-cert
	// (clients trust the CA that issued it).
	CABundle string
	// Fingerprint is the SHA-256 of the served certificate, AB:CD:...
	Fingerprint string
	// Generated is true when --tls-self-signed created the certificate on
	// this start.
	Generated bool
	// Names are the certificate's DNS names and IP addresses.
	Names []string
	// localBundle is what agents the local provisioner starts trust: the
	// CA bundle, or the served certificate itself when no CA the system
	// knows issued it (Go accepts a pinned leaf); "" for the system roots.
	localBundle string
}

// validateTLS checks the TLS flags and that the given files are a usable
// pair, so a mistake stops the server before it opens the store.
func (c *Config) validateTLS() error {
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return errors.New("--tls-cert and --tls-key must be given together")
	}
	if c.TLSSelfSigned && c.TLSCert != "" {
		return errors.New("--tls-self-signed generates the certificate: give it or --tls-cert/--tls-key, not both")
	}
	if len(c.TLSSANs) > 0 && !c.TLSSelfSigned {
		return errors.New("--tls-san adds names to the generated certificate: it needs --tls-self-signed")
	}
	for _, n := range c.TLSSANs {
		if net.ParseIP(n) == nil && !validDNSName(n) {
			return fmt.Errorf("--tls-san %q is neither an IP address nor a DNS name", n)
		}
	}
	if c.tlsEnabled() && c.AdvertiseURL != "" {
		if u, err := url.Parse(c.AdvertiseURL); err != nil || u.Scheme != "https" {
			return fmt.Errorf("--advertise-url must be an https:// URL when the server serves TLS, got %q", c.AdvertiseURL)
		}
	}
	if c.TLSCert != "" {
		if _, err := loadKeyPair(c.TLSCert, c.TLSKey); err != nil {
			return err
		}
	}
	return nil
}

func (c *Config) tlsEnabled() bool { return c.TLSCert != "" || c.TLSSelfSigned }

func validDNSName(n string) bool {
	n = strings.TrimPrefix(n, "*.")
	if n == "" || len(n) > 253 {
		return false
	}
	for _, label := range strings.Split(n, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
				return false
			}
		}
	}
	return true
}

// loadKeyPair reads a PEM certificate chain and its key, naming the flag
// whose file is at fault.
func loadKeyPair(certFile, keyFile string) (tls.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("--tls-cert: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("--tls-key: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("--tls-cert %s and --tls-key %s: %w", certFile, keyFile, err)
	}
	if now := time.Now(); now.After(pair.Leaf.NotAfter) {
		return tls.Certificate{}, fmt.Errorf("--tls-cert %s expired on %s", certFile, pair.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return pair, nil
}

// serverTLS sets up the listener's TLS: the certificate (generated or
// given) and the settings every connection gets.
func serverTLS(cfg *Config, addr string) (*tls.Config, *TLSInfo, error) {
	certFile, keyFile := cfg.TLSCert, cfg.TLSKey
	info := &TLSInfo{}
	if cfg.TLSSelfSigned {
		dir := filepath.Join(cfg.DataDir, tlsDirName)
		names := certNames(cfg, addr)
		generated, err := ensureSelfSigned(dir, names, cfg.Log)
		if err != nil {
			return nil, nil, err
		}
		certFile, keyFile = filepath.Join(dir, selfSignedCert), filepath.Join(dir, selfSignedKey)
		info.CABundle, info.localBundle, info.Generated = certFile, certFile, generated
	}
	r := &certReloader{certFile: certFile, keyFile: keyFile, log: cfg.Log}
	if err := r.load(); err != nil {
		if cfg.TLSSelfSigned {
			return nil, nil, fmt.Errorf("%s: %w (remove %s to generate a new certificate)", certFile, err, filepath.Dir(certFile))
		}
		return nil, nil, err
	}
	leaf := r.cert.Leaf
	info.CertFile = certFile
	info.Fingerprint = Fingerprint(leaf)
	info.Names = append(append([]string{}, leaf.DNSNames...), ipStrings(leaf.IPAddresses)...)
	if !cfg.TLSSelfSigned && !systemTrusted(*r.cert) {
		info.localBundle = certFile
	}
	tc := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: r.get,
		// HTTP/1.1 only, as over plain HTTP: the agent session is a
		// websocket upgrade, which HTTP/2 does not carry.
		NextProtos: []string{"http/1.1"},
	}
	return tc, info, nil
}

// advertised is the URL agents are given: --advertise-url, else the
// listen address with the server's scheme. An unspecified listen address
// (0.0.0.0, ::) is no place to connect to, nor a name a certificate holds:
// loopback stands in for it, which the local provisioner's agents reach.
func advertised(cfg *Config, addr string) string {
	if cfg.AdvertiseURL != "" {
		return cfg.AdvertiseURL
	}
	return localURL(cfg.tlsEnabled(), addr)
}

// localURL is the server's URL as seen from this machine.
func localURL(tlsOn bool, addr string) string {
	scheme := "http"
	if tlsOn {
		scheme = "https"
	}
	host, port, err := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); err == nil && ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
		if ip.To4() == nil {
			host = "::1"
		}
		addr = net.JoinHostPort(host, port)
	}
	return scheme + "://" + addr
}

// certNames are the names a generated certificate holds: loopback, the
// listen host (this machine's hostname when listening on all addresses),
// the advertised host and the --tls-san names.
func certNames(cfg *Config, addr string) []string {
	names := []string{"localhost", "127.0.0.1", "::1"}
	if host, _, err := net.SplitHostPort(addr); err == nil && host != "" {
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			if h, err := os.Hostname(); err == nil && validDNSName(h) {
				names = append(names, h)
			}
		} else {
			names = append(names, host)
		}
	}
	if u, err := url.Parse(cfg.AdvertiseURL); err == nil && u.Hostname() != "" {
		names = append(names, u.Hostname())
	}
	names = append(names, cfg.TLSSANs...)
	out := []string{}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			n = ip.String()
		} else {
			n = strings.ToLower(n)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// ensureSelfSigned makes sure dir holds a self-signed certificate and its
// key, generating them for names when absent. A kept certificate that lacks
// some of names is still used (its fingerprint is pinned by clients), with
// a warning saying how to get a new one.
func ensureSelfSigned(dir string, names []string, log *slog.Logger) (generated bool, err error) {
	certFile, keyFile := filepath.Join(dir, selfSignedCert), filepath.Join(dir, selfSignedKey)
	_, certErr := os.Stat(certFile)
	_, keyErr := os.Stat(keyFile)
	switch {
	case certErr == nil && keyErr == nil:
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return false, fmt.Errorf("%s: %w (remove %s to generate a new certificate)", certFile, err, dir)
		}
		if time.Now().After(pair.Leaf.NotAfter) {
			return false, fmt.Errorf("the generated certificate %s expired on %s: remove %s to generate a new one (clients need the new CA bundle)",
				certFile, pair.Leaf.NotAfter.UTC().Format(time.RFC3339), dir)
		}
		if missing := missingNames(pair.Leaf, names); len(missing) > 0 && log != nil {
			log.Warn("the generated TLS certificate does not hold every name asked for; remove its directory to generate a new one (clients need the new CA bundle)",
				"cert", certFile, "missing", missing)
		}
		return false, nil
	case !errors.Is(certErr, os.ErrNotExist) && certErr != nil:
		return false, fmt.Errorf("TLS certificate: %w", certErr)
	case !errors.Is(keyErr, os.ErrNotExist) && keyErr != nil:
		return false, fmt.Errorf("TLS key: %w", keyErr)
	case certErr == nil || keyErr == nil:
		return false, fmt.Errorf("%s holds only one of %s and %s: remove it to generate a new certificate", dir, selfSignedCert, selfSignedKey)
	}
	certPEM, keyPEM, err := generateSelfSigned(names, time.Now())
	if err != nil {
		return false, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, fmt.Errorf("TLS directory: %w", err)
	}
	// The key first: a certificate without its key is never left behind.
	if err := writeFileAtomic(keyFile, keyPEM, 0o600); err != nil {
		return false, err
	}
	if err := writeFileAtomic(certFile, certPEM, 0o644); err != nil {
		return false, err
	}
	return true, nil
}

// generateSelfSigned makes an ECDSA P-256 key and a certificate for names
// signed by it. The certificate is its own CA, so that it can be a CA
// bundle for clients that only accept CA certificates as trust anchors.
func generateSelfSigned(names []string, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		// A name of its own: another server's certificate is another issuer.
		Subject:               pkix.Name{CommonName: fmt.Sprintf("capstan server %016x", serial.Uint64()), Organization: []string{"Capstan"}},
		NotBefore:             now.Add(-time.Hour), // some clock skew
		NotAfter:              now.AddDate(selfSignedYears, 0, 0),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Chmod(tmp, mode); err != nil { // an old .tmp kept its mode
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func missingNames(c *x509.Certificate, names []string) []string {
	var missing []string
	for _, n := range names {
		if c.VerifyHostname(n) != nil {
			missing = append(missing, n)
		}
	}
	return missing
}

// Fingerprint is a certificate's SHA-256 as openssl prints it.
func Fingerprint(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	h := strings.ToUpper(hex.EncodeToString(sum[:]))
	parts := make([]string, 0, len(sum))
	for i := 0; i < len(h); i += 2 {
		parts = append(parts, h[i:i+2])
	}
	return strings.Join(parts, ":")
}

func ipStrings(ips []net.IP) []string {
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		out = append(out, ip.String())
	}
	return out
}

// systemTrusted reports whether a CA this machine trusts issued the pair's
// certificate.
func systemTrusted(pair tls.Certificate) bool {
	inter := x509.NewCertPool()
	for _, der := range pair.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(c)
		}
	}
	_, err := pair.Leaf.Verify(x509.VerifyOptions{Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err == nil
}

// certReloader serves a certificate pair from files and reads them again
// when they change, keeping the last good pair when a new one is broken.
type certReloader struct {
	certFile, keyFile string
	log               *slog.Logger

	mu        sync.Mutex
	cert      *tls.Certificate
	certMod   time.Time
	keyMod    time.Time
	lastCheck time.Time
}

func (r *certReloader) load() error {
	cs, err := os.Stat(r.certFile)
	if err != nil {
		return fmt.Errorf("--tls-cert: %w", err)
	}
	ks, err := os.Stat(r.keyFile)
	if err != nil {
		return fmt.Errorf("--tls-key: %w", err)
	}
	pair, err := loadKeyPair(r.certFile, r.keyFile)
	if err != nil {
		return err
	}
	r.cert, r.certMod, r.keyMod, r.lastCheck = &pair, cs.ModTime(), ks.ModTime(), time.Now()
	return nil
}

func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.lastCheck) < tlsReloadEvery {
		return r.cert, nil
	}
	r.lastCheck = time.Now()
	cs, err1 := os.Stat(r.certFile)
	ks, err2 := os.Stat(r.keyFile)
	if err1 != nil || err2 != nil || (cs.ModTime().Equal(r.certMod) && ks.ModTime().Equal(r.keyMod)) {
		return r.cert, nil
	}
	if err := r.load(); err != nil {
		// Half of a renewal may be written: try again at the next check.
		r.log.Warn("TLS certificate changed but cannot be loaded; serving the previous one", "err", err)
		return r.cert, nil
	}
	r.log.Info("TLS certificate reloaded", "cert", r.certFile, "fingerprint", Fingerprint(r.cert.Leaf))
	return r.cert, nil
}
