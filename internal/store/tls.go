package store

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
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
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TLSFiles name the PEM files of a store's TLS to an external etcd: the
// CA that signed etcd's certificate (empty: the system's roots) and the
// certificate and key the store presents (empty: none).
type TLSFiles struct {
	CACert, Cert, Key string
}

// Empty says no file is named.
func (f TLSFiles) Empty() bool { return f == TLSFiles{} }

// LoadCAFile reads a PEM file of one or more CA certificates.
func LoadCAFile(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

// clientConfig is the TLS a store dials etcd with.
func (f TLSFiles) clientConfig() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.CACert != "" {
		pool, err := LoadCAFile(f.CACert)
		if err != nil {
			return nil, fmt.Errorf("etcd CA certificate: %w", err)
		}
		tc.RootCAs = pool
	}
	if (f.Cert == "") != (f.Key == "") {
		return nil, errors.New("store: an etcd client certificate and its key go together")
	}
	if f.Cert != "" {
		c, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("etcd client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{c}
	}
	return tc, nil
}

// dialExternal connects to an external cluster, over TLS (tc) when its
// endpoints are https:// or files are named.
func dialExternal(ctx context.Context, endpoints []string, files TLSFiles) (c *clientv3.Client, tc *tls.Config, err error) {
	cfg := clientv3.Config{Endpoints: endpoints, DialTimeout: 10 * time.Second, Context: ctx, Logger: nopZap()}
	secure := slices.ContainsFunc(endpoints, func(e string) bool {
		return strings.HasPrefix(e, "https://") || strings.HasPrefix(e, "unixs://")
	})
	if !files.Empty() {
		// etcd's client drops certificates for http:// endpoints without a
		// word: say so rather than send the state in clear.
		for _, e := range endpoints {
			if !strings.HasPrefix(e, "https://") && !strings.HasPrefix(e, "unixs://") {
				return nil, nil, fmt.Errorf("store: etcd endpoint %s is not https:// but TLS files are given", e)
			}
		}
	}
	if secure {
		if tc, err = files.clientConfig(); err != nil {
			return nil, nil, err
		}
		cfg.TLS = tc
	}
	if c, err = clientv3.New(cfg); err != nil {
		return nil, nil, fmt.Errorf("connect etcd %v: %w", endpoints, err)
	}
	return c, tc, nil
}

// MemberTLS are the files a member serving over TCP generates into its
// data dir on first start: its CA, the certificate it serves (also its
// peer certificate), and the client certificate servers present.
type MemberTLS struct {
	CA, CAKey, Server, ServerKey string
	Client                       TLSFiles
}

// MemberTLSFiles are where the member with data dir dir keeps them.
func MemberTLSFiles(dir string) MemberTLS {
	d := filepath.Join(dir, "tls")
	return MemberTLS{
		CA: filepath.Join(d, "ca.crt"), CAKey: filepath.Join(d, "ca.key"),
		Server: filepath.Join(d, "server.crt"), ServerKey: filepath.Join(d, "server.key"),
		Client: TLSFiles{CACert: filepath.Join(d, "ca.crt"), Cert: filepath.Join(d, "client.crt"), Key: filepath.Join(d, "client.key")},
	}
}

// leafLife is how long generated certificates last; one that expires
// within leafRenew is issued anew at start.
const (
	caLife    = 20 * 365 * 24 * time.Hour
	leafLife  = 5 * 365 * 24 * time.Hour
	leafRenew = 30 * 24 * time.Hour
)

// ensureMemberTLS generates the member's CA and certificates where they
// are missing, and issues its serving certificate anew when it does not
// name every IP in ips or nears its end. Keys are 0600 in a 0700 dir.
func ensureMemberTLS(dir string, ips []net.IP) (MemberTLS, error) {
	f := MemberTLSFiles(dir)
	if err := os.MkdirAll(filepath.Dir(f.CA), 0o700); err != nil {
		return f, fmt.Errorf("member TLS: %w", err)
	}
	if err := os.Chmod(filepath.Dir(f.CA), 0o700); err != nil {
		return f, fmt.Errorf("member TLS: %w", err)
	}
	ca, caKey, err := loadPair(f.CA, f.CAKey)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			return f, fmt.Errorf("member TLS: %w", err)
		}
		// A new CA voids whatever it signed before.
		for _, p := range []string{f.Server, f.ServerKey, f.Client.Cert, f.Client.Key} {
			os.Remove(p)
		}
		if ca, caKey, err = issue(nil, nil, caTemplate(), caLife, f.CA, f.CAKey); err != nil {
			return f, err
		}
	}
	srv, _, err := loadPair(f.Server, f.ServerKey)
	if err != nil || !coversIPs(srv, ips) || time.Until(srv.NotAfter) < leafRenew {
		tmpl := &x509.Certificate{
			Subject:     pkix.Name{CommonName: "capstan etcd"},
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
			DNSNames:    []string{"localhost"},
			IPAddresses: ips,
		}
		if _, _, err := issue(ca, caKey, tmpl, leafLife, f.Server, f.ServerKey); err != nil {
			return f, err
		}
	}
	cl, _, err := loadPair(f.Client.Cert, f.Client.Key)
	if err != nil || time.Until(cl.NotAfter) < leafRenew {
		tmpl := &x509.Certificate{
			Subject:     pkix.Name{CommonName: "capstan server"},
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}
		if _, _, err := issue(ca, caKey, tmpl, leafLife, f.Client.Cert, f.Client.Key); err != nil {
			return f, err
		}
	}
	return f, nil
}

func coversIPs(c *x509.Certificate, ips []net.IP) bool {
	for _, ip := range ips {
		if !slices.ContainsFunc(c.IPAddresses, ip.Equal) {
			return false
		}
	}
	return true
}

// loadPair reads a certificate and its ECDSA key.
func loadPair(certFile, keyFile string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		if _, serr := os.Stat(certFile); errors.Is(serr, os.ErrNotExist) {
			return nil, nil, serr
		}
		return nil, nil, err
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, nil, fmt.Errorf("%s: not an ECDSA key", keyFile)
	}
	c, err := x509.ParseCertificate(pair.Certificate[0])
	return c, key, err
}

// issue signs tmpl with the CA (self-signed when ca is nil) for a new
// key, and writes both as PEM.
func issue(ca *x509.Certificate, caKey *ecdsa.PrivateKey, tmpl *x509.Certificate, life time.Duration, certFile, keyFile string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(life)
	parent, signer := ca, caKey
	if ca == nil {
		parent, signer = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		return nil, nil, fmt.Errorf("member TLS: %w", err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	if err := writePEM(keyFile, "EC PRIVATE KEY", kb, 0o600); err != nil {
		return nil, nil, err
	}
	if err := writePEM(certFile, "CERTIFICATE", der, 0o644); err != nil {
		return nil, nil, err
	}
	c, err := x509.ParseCertificate(der)
	return c, key, err
}

// writePEM replaces path whole, so that a crash leaves the old file or
// the new one.
func writePEM(path, kind string, der []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	os.Remove(tmp) // a leftover keeps its mode
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), mode); err != nil {
		return fmt.Errorf("member TLS: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("member TLS: %w", err)
	}
	return nil
}

// memberIPs are the addresses the serving certificate names: the listen
// IPs, loopback, and every interface's when a listen IP is unspecified.
func memberIPs(listen ...string) []net.IP {
	ips := []net.IP{net.IPv4(127, 0, 0, 1).To4(), net.IPv6loopback}
	add := func(ip net.IP) {
		if v4 := ip.To4(); v4 != nil {
			ip = v4
		}
		if !slices.ContainsFunc(ips, ip.Equal) {
			ips = append(ips, ip)
		}
	}
	for _, l := range listen {
		host, _, _ := net.SplitHostPort(l)
		ip := net.ParseIP(host)
		if ip == nil {
			continue
		}
		if !ip.IsUnspecified() {
			add(ip)
			continue
		}
		addrs, _ := net.InterfaceAddrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				add(n.IP)
			}
		}
	}
	return ips
}

// awaitProbe is how long awaitEtcd waits for an answer before saying why
// there is none.
var awaitProbe = 10 * time.Second

// awaitEtcd waits for an external etcd to answer, as the first read would
// have waited, but says why it does not every 10 s: a refused client
// certificate or a wrong CA otherwise left a server silent for ever.
func awaitEtcd(ctx context.Context, c *clientv3.Client, key string, tc *tls.Config, log *slog.Logger) error {
	for {
		pctx, cancel := context.WithTimeout(ctx, awaitProbe)
		_, err := c.Get(pctx, key, clientv3.WithCountOnly())
		cancel()
		// Any answer will do, a refusal too: the first read reports it.
		code := status.Code(err)
		silent := errors.Is(err, context.DeadlineExceeded) || code == codes.DeadlineExceeded || code == codes.Unavailable
		if ctx.Err() != nil || !silent {
			return ctx.Err()
		}
		log.Warn("etcd does not answer; waiting for it", "endpoints", c.Endpoints(), "err", err, "cause", probeEtcd(c.Endpoints(), tc))
	}
}

// probeEtcd says what a plain connection to each endpoint meets, since
// etcd's client reports only that its deadline passed: a refused
// connection, or TLS's own words ("certificate required", "unknown
// authority").
func probeEtcd(endpoints []string, tc *tls.Config) string {
	var causes []string
	for _, e := range endpoints {
		secure := strings.HasPrefix(e, "https://")
		network, addr := "tcp", e
		if p, ok := strings.CutPrefix(e, "unix://"); ok {
			network, addr = "unix", p
		} else if u, err := url.Parse(e); err == nil && u.Host != "" {
			addr = u.Host
		}
		conn, err := net.DialTimeout(network, addr, 3*time.Second)
		if err != nil {
			causes = append(causes, err.Error())
			continue
		}
		if secure && tc != nil {
			host, _, _ := net.SplitHostPort(addr)
			cfg := tc.Clone()
			cfg.ServerName = host
			tlsConn := tls.Client(conn, cfg)
			tlsConn.SetDeadline(time.Now().Add(2 * time.Second))
			// TLS 1.3 servers refuse a client certificate after the
			// handshake: their alert comes with the first read.
			err = tlsConn.Handshake()
			if err == nil {
				_, err = tlsConn.Read(make([]byte, 1))
			}
			var ne net.Error
			if err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
				causes = append(causes, e+": "+err.Error())
			}
		}
		conn.Close()
	}
	return strings.Join(causes, "; ")
}

// WriteCA generates a CA for the members of a cluster into dir (ca.crt,
// and ca.key 0600), to be copied to each member's host and named by its
// CADir. It refuses to replace a CA already there.
func WriteCA(dir string) (cert, key string, err error) {
	cert, key = filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", fmt.Errorf("member CA: %w", err)
	}
	for _, p := range []string{cert, key} {
		if _, err := os.Stat(p); err == nil {
			return "", "", fmt.Errorf("member CA: %s exists; a new CA would void every certificate issued by it", p)
		}
	}
	if _, _, err := issue(nil, nil, caTemplate(), caLife, cert, key); err != nil {
		return "", "", err
	}
	return cert, key, nil
}

func caTemplate() *x509.Certificate {
	return &x509.Certificate{
		Subject:               pkix.Name{CommonName: "capstan etcd CA"},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
}

// adoptCA puts the cluster's CA in caDir into the member's TLS dir, on its
// first start; later starts check that it is still the same CA, since a
// member whose certificates another CA issued is refused by its peers.
func adoptCA(dir, caDir string) error {
	f := MemberTLSFiles(dir)
	src, srcKey := filepath.Join(caDir, "ca.crt"), filepath.Join(caDir, "ca.key")
	ca, _, err := loadPair(src, srcKey)
	if err != nil {
		return fmt.Errorf("the cluster's CA in %s (capstan etcd ca writes one): %w", caDir, err)
	}
	have, _, err := loadPair(f.CA, f.CAKey)
	if err == nil {
		if !have.Equal(ca) {
			return fmt.Errorf("member TLS: %s holds another CA than %s; a member keeps the CA it started with", f.CA, src)
		}
		return nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("member TLS: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(f.CA), 0o700); err != nil {
		return fmt.Errorf("member TLS: %w", err)
	}
	// ensureMemberTLS then issues the member's certificates under it.
	for _, p := range [][2]string{{srcKey, f.CAKey}, {src, f.CA}} {
		b, err := os.ReadFile(p[0])
		if err != nil {
			return fmt.Errorf("member TLS: %w", err)
		}
		tmp := p[1] + ".tmp"
		os.Remove(tmp)
		if err := os.WriteFile(tmp, b, 0o600); err != nil {
			return fmt.Errorf("member TLS: %w", err)
		}
		if err := os.Rename(tmp, p[1]); err != nil {
			return fmt.Errorf("member TLS: %w", err)
		}
	}
	return nil
}
