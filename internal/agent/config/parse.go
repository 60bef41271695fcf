package config

import (
	"bufio"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/agent/daemonnet"
)

// parser reads variables through lookup and collects every error, so the
// operator fixes a bad file in one go rather than one restart per mistake.
type parser struct {
	// lookup returns a variable's value and where it came from ("" for the
	// environment), or ok false when nothing sets it.
	lookup func(name string) (value, source string, ok bool)
	errs   []error
}

func (p *parser) fail(name, rule string) {
	v, src, ok := p.lookup(name)
	switch {
	case !ok:
		p.errs = append(p.errs, fmt.Errorf("%s %s", name, rule))
	case secretVars[name]:
		p.errs = append(p.errs, fmt.Errorf("%s%s: %s", name, from(src), rule))
	default:
		p.errs = append(p.errs, fmt.Errorf("%s=%q%s: %s", name, v, from(src), rule))
	}
}

func from(src string) string {
	if src == "" {
		return ""
	}
	return " (" + src + ")"
}

func (p *parser) str(name, def string) string {
	if v, _, ok := p.lookup(name); ok {
		return v
	}
	return def
}

// caBundle is CAPSTAN_CA_BUNDLE, else AWS_CA_BUNDLE (the AWS SDKs' name),
// made absolute; the file must hold at least one PEM certificate.
func (p *parser) caBundle() string {
	name := envCABundle
	if _, _, ok := p.lookup(envCABundle); !ok {
		name = envAWSCABundle
	}
	v := p.str(name, "")
	if v == "" {
		return ""
	}
	abs, err := filepath.Abs(v)
	if err != nil {
		p.fail(name, "must be a file path")
		return ""
	}
	if _, err := LoadCABundle(abs); err != nil {
		p.fail(name, err.Error())
		return ""
	}
	return abs
}

// LoadCABundle reads a PEM file of CA certificates into a pool.
func LoadCABundle(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read the CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("the CA bundle %s holds no PEM certificate", path)
	}
	return pool, nil
}

func (p *parser) boolean(name string, def bool) bool {
	v, _, ok := p.lookup(name)
	if !ok {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		p.fail(name, "must be true or false")
		return def
	}
	return b
}

func (p *parser) integer(name string, def, min int64, what string) int64 {
	v, _, ok := p.lookup(name)
	if !ok {
		return def
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < min {
		p.fail(name, fmt.Sprintf("must be an integer of at least %d (%s)", min, what))
		return def
	}
	return n
}

func (p *parser) duration(name string, def, min time.Duration) time.Duration {
	v, _, ok := p.lookup(name)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil || d < min {
		p.fail(name, fmt.Sprintf("must be a duration of at least %s, written like %q", minText(min), def.String()))
		return def
	}
	return d
}

func minText(d time.Duration) string {
	if d == 0 {
		return "0s"
	}
	return d.String()
}

func (p *parser) ports(name string, def []int) []int {
	v, _, ok := p.lookup(name)
	if !ok {
		return def
	}
	var ports []int
	if err := json.Unmarshal([]byte(v), &ports); err != nil {
		p.fail(name, "must be a JSON list of port numbers, like [22, 2375]")
		return def
	}
	out := []int{}
	for _, port := range ports {
		if port < 1 || port > 65535 {
			p.fail(name, fmt.Sprintf("port %d is outside 1-65535", port))
			return def
		}
		if !slices.Contains(out, port) {
			out = append(out, port)
		}
	}
	return out
}

func (p *parser) addr(name, def string) string {
	v, _, ok := p.lookup(name)
	if !ok {
		return def
	}
	host, port, err := net.SplitHostPort(v)
	if err == nil {
		if n, perr := strconv.Atoi(port); perr != nil || n < 0 || n > 65535 {
			err = fmt.Errorf("bad port")
		}
	}
	if err == nil && host != "" && net.ParseIP(host) == nil {
		err = fmt.Errorf("bad host")
	}
	if err != nil {
		p.fail(name, "must be IP:PORT, like 127.0.0.1:9100 (port 0 picks a free one)")
		return def
	}
	return v
}

func (p *parser) rpsLimit(name string, defSteady, defBurst int) (int, int) {
	v, _, ok := p.lookup(name)
	if !ok {
		return defSteady, defBurst
	}
	steadyText, burstText, found := strings.Cut(v, ",")
	steady, err1 := strconv.Atoi(strings.TrimSpace(steadyText))
	burst, err2 := strconv.Atoi(strings.TrimSpace(burstText))
	if !found || err1 != nil || err2 != nil || steady < 1 || burst < 1 {
		p.fail(name, "must be STEADY,BURST: two positive integers (requests per second, bucket size), like 40,60")
		return defSteady, defBurst
	}
	return steady, burst
}

func (p *parser) attributes(name string) map[string]string {
	v, _, ok := p.lookup(name)
	if !ok {
		return map[string]string{}
	}
	var attrs map[string]string
	if err := json.Unmarshal([]byte(v), &attrs); err != nil || attrs == nil {
		p.fail(name, `must be a JSON object of string names to string values, like {"stack":"prod"}`)
		return map[string]string{}
	}
	for _, k := range slices.Sorted(maps.Keys(attrs)) {
		val := attrs[k]
		switch {
		case !attrName.MatchString(k):
			p.fail(name, fmt.Sprintf("attribute name %q must be 1-128 letters, digits, and - _ . / \\", k))
		case strings.HasPrefix(k, "ecs."):
			p.fail(name, fmt.Sprintf("attribute name %q: the ecs. prefix is reserved for attributes the agent sets", k))
		case !attrValue.MatchString(val) || strings.TrimSpace(val) != val:
			p.fail(name, fmt.Sprintf("attribute %q value must be 1-128 letters, digits, spaces and - _ . @ / \\ :, not starting or ending with a space", k))
		}
	}
	return attrs
}

// registryAuth decodes ECS_ENGINE_AUTH_DATA in the format ECS_ENGINE_AUTH_TYPE names.
func (p *parser) registryAuth() map[string]RegistryCredential {
	kind, _, hasKind := p.lookup(envAuthType)
	data, _, hasData := p.lookup(envAuthData)
	out := map[string]RegistryCredential{}
	switch {
	case !hasKind && !hasData:
		return out
	case !hasData:
		p.fail(envAuthData, "is required when "+envAuthType+" is set")
		return out
	case !hasKind:
		p.fail(envAuthType, "is required when "+envAuthData+" is set (docker or dockercfg)")
		return out
	}
	type entry struct {
		Username string `json:"username"`
		Password string `json:"password"`
		Email    string `json:"email"`
		Auth     string `json:"auth"`
	}
	var entries map[string]entry
	switch kind {
	case "docker":
		if err := json.Unmarshal([]byte(data), &entries); err != nil {
			p.fail(envAuthData, `must be a JSON object like {"REGISTRY":{"username":"...","password":"...","email":"..."}} for type docker`)
			return out
		}
	case "dockercfg":
		if err := json.Unmarshal([]byte(data), &entries); err != nil {
			p.fail(envAuthData, `must be a JSON object like {"REGISTRY":{"auth":"BASE64(user:password)","email":"..."}} for type dockercfg`)
			return out
		}
	default:
		p.fail(envAuthType, "must be docker or dockercfg")
		return out
	}
	for _, reg := range slices.Sorted(maps.Keys(entries)) {
		e := entries[reg]
		host := normalizeRegistry(reg)
		if host == "" {
			p.fail(envAuthData, fmt.Sprintf("registry %q is not a registry host or URL", reg))
			continue
		}
		cred := RegistryCredential{Username: e.Username, Password: Secret(e.Password), Email: e.Email}
		if kind == "dockercfg" {
			raw, err := base64.StdEncoding.DecodeString(e.Auth)
			user, pass, ok := strings.Cut(string(raw), ":")
			if err != nil || !ok || user == "" {
				p.fail(envAuthData, fmt.Sprintf("registry %q: auth must be base64 of username:password", reg))
				continue
			}
			cred.Username, cred.Password = user, Secret(pass)
		} else if e.Username == "" || e.Password == "" {
			p.fail(envAuthData, fmt.Sprintf("registry %q: username and password are required for type docker", reg))
			continue
		}
		out[host] = cred
	}
	return out
}

// dockerHubAliases are the names Docker Hub goes by in credentials files.
var dockerHubAliases = map[string]bool{
	"docker.io": true, "index.docker.io": true, "registry-1.docker.io": true, "registry.hub.docker.com": true,
}

// normalizeRegistry turns a registry key ("https://index.docker.io/v1/",
// "my.registry:5000") into the host form RegistryHost returns.
func normalizeRegistry(s string) string {
	s = strings.TrimSpace(strings.ToLower(s))
	s = strings.TrimPrefix(strings.TrimPrefix(s, "https://"), "http://")
	s, _, _ = strings.Cut(s, "/")
	if dockerHubAliases[s] {
		return "docker.io"
	}
	return s
}

// RegistryHost is the registry an image reference pulls from, normalised so
// it matches the keys of Config.RegistryAuth: "busybox" → "docker.io",
// "127.0.0.1:5000/app:1" → "127.0.0.1:5000".
func RegistryHost(image string) string {
	first, _, found := strings.Cut(image, "/")
	if !found || (!strings.ContainsAny(first, ".:") && first != "localhost") {
		return "docker.io"
	}
	return normalizeRegistry(first)
}

type fileValue struct {
	value string
	line  int
}

var envKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// readEnvFile parses KEY=VALUE lines. Blank lines and lines starting with #
// are skipped, "export " is allowed, a value may be wrapped in single or
// double quotes; there are no inline comments, since JSON values may hold #.
func readEnvFile(path string) (map[string]fileValue, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("env file: %w", err)
	}
	defer f.Close()
	vals := map[string]fileValue{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		key, val, ok := strings.Cut(line, "=")
		key = strings.TrimSpace(key)
		if !ok || !envKey.MatchString(key) {
			return nil, fmt.Errorf("env file %s line %d: want KEY=VALUE", path, n)
		}
		val, err := unquote(strings.TrimSpace(val))
		if err != nil {
			return nil, fmt.Errorf("env file %s line %d: %s: %w", path, n, key, err)
		}
		vals[key] = fileValue{value: val, line: n}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("env file %s: %w", path, err)
	}
	return vals, nil
}

func unquote(v string) (string, error) {
	if v == "" || (v[0] != '"' && v[0] != '\'') {
		return v, nil
	}
	q := v[0]
	if len(v) < 2 || v[len(v)-1] != q {
		return "", fmt.Errorf("unterminated %c quote", q)
	}
	inner := v[1 : len(v)-1]
	if q == '\'' {
		return inner, nil
	}
	// Double quotes allow \" and \\, as in shell and systemd.
	var b strings.Builder
	for i := 0; i < len(inner); i++ {
		if inner[i] == '\\' && i+1 < len(inner) && (inner[i+1] == '"' || inner[i+1] == '\\') {
			i++
		}
		b.WriteByte(inner[i])
	}
	return b.String(), nil
}

// daemonNet reads the daemon subnet and address. An address alone lives in
// the default subnet; a subnet alone gets its second address.
func (p *parser) daemonNet(subnetVar, addrVar string) (netip.Prefix, netip.Addr) {
	sv, _, hasSubnet := p.lookup(subnetVar)
	av, _, hasAddr := p.lookup(addrVar)
	if !hasSubnet && !hasAddr {
		return netip.Prefix{}, netip.Addr{}
	}
	subnet := daemonnet.DefaultSubnet
	if hasSubnet {
		s, err := netip.ParsePrefix(strings.TrimSpace(sv))
		if err != nil {
			p.fail(subnetVar, "must be an IPv4 subnet in CIDR form, like 169.254.173.0/24")
			return netip.Prefix{}, netip.Addr{}
		}
		if err := daemonnet.CheckSubnet(s); err != nil {
			p.fail(subnetVar, err.Error())
			return netip.Prefix{}, netip.Addr{}
		}
		subnet = s
	}
	if !hasAddr {
		return subnet, daemonnet.DefaultAddress(subnet)
	}
	a, err := netip.ParseAddr(strings.TrimSpace(av))
	if err != nil {
		p.fail(addrVar, "must be an IPv4 address, like 169.254.173.2")
		return netip.Prefix{}, netip.Addr{}
	}
	if err := daemonnet.CheckAddress(subnet, a); err != nil {
		rule := err.Error()
		if !hasSubnet {
			rule += " (the default subnet; set " + subnetVar + " for another)"
		}
		p.fail(addrVar, rule)
		return netip.Prefix{}, netip.Addr{}
	}
	return subnet, a
}
