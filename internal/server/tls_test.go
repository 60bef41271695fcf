package server

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The generated certificate is ECDSA P-256, holds every name asked for,
// is its own trust anchor, and its key is readable by the owner only.
func TestSelfSignedGenerated(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	names := []string{"localhost", "127.0.0.1", "::1", "capstan.example", "10.1.2.3"}
	generated, err := ensureSelfSigned(dir, names, slog.New(slog.DiscardHandler))
	if err != nil || !generated {
		t.Fatalf("first start: generated=%v err=%v", generated, err)
	}
	key, err := os.Stat(filepath.Join(dir, selfSignedKey))
	if err != nil {
		t.Fatal(err)
	}
	if key.Mode().Perm() != 0o600 {
		t.Errorf("key mode %v, want 0600", key.Mode().Perm())
	}
	if d, _ := os.Stat(dir); d.Mode().Perm() != 0o700 {
		t.Errorf("dir mode %v, want 0700", d.Mode().Perm())
	}
	c := readCert(t, filepath.Join(dir, selfSignedCert))
	pub, ok := c.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		t.Fatalf("public key %T, want ECDSA P-256", c.PublicKey)
	}
	if !slices.Equal(c.DNSNames, []string{"localhost", "capstan.example"}) {
		t.Errorf("DNS names %v", c.DNSNames)
	}
	if got := ipStrings(c.IPAddresses); !slices.Equal(got, []string{"127.0.0.1", "::1", "10.1.2.3"}) {
		t.Errorf("IPs %v", got)
	}
	if !slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageServerAuth) {
		t.Errorf("ext key usage %v", c.ExtKeyUsage)
	}
	if c.NotAfter.Before(time.Now().AddDate(4, 0, 0)) {
		t.Errorf("expires %s", c.NotAfter)
	}
	// The file is a CA bundle for every name.
	pool := x509.NewCertPool()
	pool.AddCert(c)
	for _, n := range names {
		if _, err := c.Verify(x509.VerifyOptions{Roots: pool, DNSName: n}); err != nil {
			t.Errorf("verify for %s: %v", n, err)
		}
	}
	if _, err := c.Verify(x509.VerifyOptions{Roots: pool, DNSName: "other.example"}); err == nil {
		t.Error("verified for a name it does not hold")
	}
	if _, err := tls.LoadX509KeyPair(filepath.Join(dir, selfSignedCert), filepath.Join(dir, selfSignedKey)); err != nil {
		t.Fatalf("pair: %v", err)
	}
}

// A restart keeps the certificate (clients pinned it), and says when it
// lacks a name asked for since.
func TestSelfSignedReused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	if _, err := ensureSelfSigned(dir, []string{"localhost", "127.0.0.1"}, nil); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(filepath.Join(dir, selfSignedCert))
	keyBefore, _ := os.ReadFile(filepath.Join(dir, selfSignedKey))
	var logs bytes.Buffer
	generated, err := ensureSelfSigned(dir, []string{"localhost", "127.0.0.1", "new.example"}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil || generated {
		t.Fatalf("restart: generated=%v err=%v", generated, err)
	}
	after, _ := os.ReadFile(filepath.Join(dir, selfSignedCert))
	keyAfter, _ := os.ReadFile(filepath.Join(dir, selfSignedKey))
	if !bytes.Equal(before, after) || !bytes.Equal(keyBefore, keyAfter) {
		t.Fatal("the certificate or key changed on restart")
	}
	if !strings.Contains(logs.String(), "new.example") {
		t.Errorf("no warning about the missing name:\n%s", logs.String())
	}

	// Half a pair is not silently replaced.
	os.Remove(filepath.Join(dir, selfSignedKey))
	if _, err := ensureSelfSigned(dir, []string{"localhost"}, nil); err == nil || !strings.Contains(err.Error(), "only one of") {
		t.Fatalf("certificate without key: %v", err)
	}
}

// Through Start's path: the info names the files, the fingerprint is the
// certificate's, and a second start serves the same certificate.
func TestServerTLSSelfSigned(t *testing.T) {
	cfg := Config{Listen: "0.0.0.0:0", DataDir: t.TempDir(), TLSSelfSigned: true, TLSSANs: []string{"Capstan.Example"},
		AdvertiseURL: "https://agents.example:8443", Log: slog.New(slog.DiscardHandler)}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	tc, info, err := serverTLS(&cfg, "0.0.0.0:8443")
	if err != nil {
		t.Fatal(err)
	}
	if tc.MinVersion != tls.VersionTLS12 || !slices.Equal(tc.NextProtos, []string{"http/1.1"}) {
		t.Errorf("tls config: min %x, protocols %v", tc.MinVersion, tc.NextProtos)
	}
	want := filepath.Join(cfg.DataDir, "tls", "server.crt")
	if info.CertFile != want || info.CABundle != want || info.localBundle != want || !info.Generated {
		t.Errorf("info %+v", info)
	}
	c := readCert(t, want)
	if info.Fingerprint != Fingerprint(c) || len(info.Fingerprint) != 32*3-1 {
		t.Errorf("fingerprint %q", info.Fingerprint)
	}
	host, _ := os.Hostname()
	for _, n := range []string{"localhost", "127.0.0.1", "capstan.example", "agents.example", host} {
		if !slices.Contains(info.Names, strings.ToLower(n)) {
			t.Errorf("names %v lack %s", info.Names, n)
		}
	}
	_, again, err := serverTLS(&cfg, "0.0.0.0:8443")
	if err != nil || again.Generated || again.Fingerprint != info.Fingerprint {
		t.Fatalf("restart: %+v %v", again, err)
	}
}

func TestAdvertisedURL(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		addr string
		want string
	}{
		{Config{}, "127.0.0.1:8080", "http://127.0.0.1:8080"},
		{Config{TLSSelfSigned: true}, "127.0.0.1:8443", "https://127.0.0.1:8443"},
		{Config{TLSCert: "c", TLSKey: "k"}, "0.0.0.0:8443", "https://127.0.0.1:8443"},
		{Config{TLSSelfSigned: true}, "[::]:8443", "https://[::1]:8443"},
		{Config{TLSSelfSigned: true, AdvertiseURL: "https://capstan.example"}, "0.0.0.0:8443", "https://capstan.example"},
	} {
		if got := advertised(&tc.cfg, tc.addr); got != tc.want {
			t.Errorf("%+v %s: %s, want %s", tc.cfg, tc.addr, got, tc.want)
		}
	}
}

// writePair writes a certificate for names valid until notAfter, and its key.
func writePair(t *testing.T, dir, prefix string, notAfter time.Time) (cert, key string) {
	t.Helper()
	certPEM, keyPEM, err := generateSelfSigned([]string{"localhost"}, notAfter.AddDate(-selfSignedYears, 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	cert, key = filepath.Join(dir, prefix+".crt"), filepath.Join(dir, prefix+".key")
	if err := os.WriteFile(cert, certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// Every mistake in the TLS flags stops the server with the flag named.
func TestTLSFlagErrors(t *testing.T) {
	dir := t.TempDir()
	cert, key := writePair(t, dir, "a", time.Now().AddDate(1, 0, 0))
	otherCert, _ := writePair(t, dir, "b", time.Now().AddDate(1, 0, 0))
	oldCert, oldKey := writePair(t, dir, "old", time.Now().Add(-time.Hour))
	garbage := filepath.Join(dir, "garbage.pem")
	os.WriteFile(garbage, []byte("not PEM"), 0o600)
	missing := filepath.Join(dir, "missing.pem")
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"cert without key", func(c *Config) { c.TLSCert = cert }, "--tls-cert and --tls-key must be given together"},
		{"key without cert", func(c *Config) { c.TLSKey = key }, "--tls-cert and --tls-key must be given together"},
		{"both ways", func(c *Config) { c.TLSCert, c.TLSKey, c.TLSSelfSigned = cert, key, true }, "not both"},
		{"san without self-signed", func(c *Config) { c.TLSSANs = []string{"x.example"} }, "--tls-san adds names to the generated certificate"},
		{"bad san", func(c *Config) { c.TLSSelfSigned, c.TLSSANs = true, []string{"not a name"} }, `--tls-san "not a name"`},
		{"missing cert", func(c *Config) { c.TLSCert, c.TLSKey = missing, key }, "--tls-cert: open " + missing},
		{"missing key", func(c *Config) { c.TLSCert, c.TLSKey = cert, missing }, "--tls-key: open " + missing},
		{"cert is a directory", func(c *Config) { c.TLSCert, c.TLSKey = dir, key }, "--tls-cert: read " + dir},
		{"not PEM", func(c *Config) { c.TLSCert, c.TLSKey = garbage, key }, "failed to find any PEM data"},
		{"pair mismatch", func(c *Config) { c.TLSCert, c.TLSKey = otherCert, key }, "private key does not match public key"},
		{"expired", func(c *Config) { c.TLSCert, c.TLSKey = oldCert, oldKey }, "expired on"},
		{"plain advertise url", func(c *Config) { c.TLSSelfSigned, c.AdvertiseURL = true, "http://x:8080" }, "--advertise-url must be an https:// URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Config{Listen: "127.0.0.1:0", DataDir: dir, Provisioner: "none"}
			tc.edit(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
	c := Config{Listen: "127.0.0.1:0", DataDir: dir, Provisioner: "none", TLSCert: cert, TLSKey: key}
	if err := c.Validate(); err != nil {
		t.Fatalf("good pair: %v", err)
	}
}

// A renewed --tls-cert/--tls-key pair is served without a restart; a
// broken one is not, and the last good one stays.
func TestCertReload(t *testing.T) {
	dir := t.TempDir()
	cert, key := writePair(t, dir, "live", time.Now().AddDate(1, 0, 0))
	r := &certReloader{certFile: cert, keyFile: key, log: slog.New(slog.DiscardHandler)}
	if err := r.load(); err != nil {
		t.Fatal(err)
	}
	first := Fingerprint(r.cert.Leaf)
	get := func() string {
		r.mu.Lock()
		r.lastCheck = time.Time{}
		r.mu.Unlock()
		c, err := r.get(nil)
		if err != nil {
			t.Fatal(err)
		}
		return Fingerprint(c.Leaf)
	}
	if got := get(); got != first {
		t.Fatal("changed without a new file")
	}
	// A half-written renewal: the new certificate, the old key.
	newCert, newKey := writePair(t, dir, "next", time.Now().AddDate(1, 0, 0))
	later := time.Now().Add(time.Minute)
	b, _ := os.ReadFile(newCert)
	os.WriteFile(cert, b, 0o644)
	os.Chtimes(cert, later, later)
	if got := get(); got != first {
		t.Fatal("served a certificate without its key")
	}
	b, _ = os.ReadFile(newKey)
	os.WriteFile(key, b, 0o600)
	os.Chtimes(key, later, later)
	if got := get(); got == first || got != Fingerprint(readCert(t, newCert)) {
		t.Fatalf("renewed pair not served: %s", got)
	}
}
