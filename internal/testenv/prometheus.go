package testenv

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Prometheus is a real Prometheus server (Debian's package) for one test,
// configured as users run it: a prometheus.yml, a rules file, and a file_sd
// targets file the test edits at runtime. It scrapes and evaluates rules
// every second and listens on a free loopback port until cleanup.
//
// Timing: a new target is scraped within ~10s (service discovery and the
// scrape manager each batch updates for up to 5s); after that a change in a
// scraped value reaches an alert's state within ~2s (one scrape, one
// evaluation), plus the rule's For.
type Prometheus struct {
	// URL is the base URL of the HTTP API, http://127.0.0.1:port.
	URL string
	// Dir holds prometheus.yml, rules.yml, targets.json, the TSDB and
	// prometheus.log.
	Dir string

	mu      sync.Mutex
	targets map[string]map[string]string // address → extra labels
}

// AlertRule is one Prometheus alerting rule. Name is the alert name, the
// name a deployment's alarms.alarmNames use.
type AlertRule struct {
	Name   string
	Expr   string // PromQL; the alert fires for each series it returns
	For    time.Duration
	Labels map[string]string
}

// PrometheusOptions configures StartPrometheus.
type PrometheusOptions struct {
	Rules []AlertRule
	// Alertmanager is the URL of an Alertmanager (Alertmanager.URL) to
	// send firing alerts to; "" for none.
	Alertmanager string
}

// Scrape and evaluation interval: short, so tests see changes quickly.
const promInterval = "1s"

// RequirePrometheus returns the path of the prometheus binary. Without it
// the test fails when CI is set (.ci/run installs it) and is skipped
// otherwise.
func RequirePrometheus(t testing.TB) string {
	t.Helper()
	return RequireBinary(t, "prometheus", "prometheus")
}

// RequireAlertmanager is RequirePrometheus for Alertmanager (Debian
// installs it as prometheus-alertmanager).
func RequireAlertmanager(t testing.TB) string {
	t.Helper()
	return RequireBinary(t, "prometheus-alertmanager", "prometheus-alertmanager", "alertmanager")
}

// RequireBinary returns the path of the first of names on PATH. Without any
// the test fails when CI is set (.ci/run installs pkg) and is skipped
// otherwise.
func RequireBinary(t testing.TB, pkg string, names ...string) string {
	t.Helper()
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is required in CI: install the Debian package %s (.ci/run does)", names[0], pkg)
	}
	t.Skipf("%s not installed, skipping (apt-get install %s)", names[0], pkg)
	return ""
}

// StartPrometheus starts Prometheus with opts' rules and no targets, and
// waits until it is ready; it stops at cleanup.
func StartPrometheus(t testing.TB, opts PrometheusOptions) *Prometheus {
	t.Helper()
	bin := RequirePrometheus(t)
	p := &Prometheus{Dir: t.TempDir(), targets: map[string]map[string]string{}}
	scrape := map[string]any{
		"job_name":        "test",
		"file_sd_configs": []any{map[string]any{"files": []string{p.path("targets.json")}, "refresh_interval": promInterval}},
	}
	// JSON is YAML: no YAML encoder needed.
	cfg := map[string]any{
		"global": map[string]any{
			"scrape_interval":     promInterval,
			"scrape_timeout":      promInterval,
			"evaluation_interval": promInterval,
		},
		"rule_files":     []string{p.path("rules.yml")},
		"scrape_configs": []any{scrape},
	}
	if opts.Alertmanager != "" {
		u, err := url.Parse(opts.Alertmanager)
		if err != nil {
			t.Fatalf("Alertmanager URL: %v", err)
		}
		cfg["alerting"] = map[string]any{"alertmanagers": []any{map[string]any{
			"api_version":    "v2",
			"scheme":         u.Scheme,
			"path_prefix":    u.Path,
			"static_configs": []any{map[string]any{"targets": []string{u.Host}}},
		}}}
	}
	writeJSON(t, p.path("prometheus.yml"), cfg)
	writeJSON(t, p.path("rules.yml"), ruleFile(opts.Rules))
	writeJSON(t, p.path("targets.json"), []any{})

	addr := runListening(t, "prometheus", p.Dir, bin,
		"--config.file="+p.path("prometheus.yml"),
		"--storage.tsdb.path="+p.path("data"),
		"--web.listen-address=127.0.0.1:0",
		"--web.enable-lifecycle", // for SetRules' reload
	)
	p.URL = "http://" + addr
	return p
}

func (p *Prometheus) path(name string) string { return filepath.Join(p.Dir, name) }

func ruleFile(rules []AlertRule) map[string]any {
	rs := []any{}
	for _, r := range rules {
		rule := map[string]any{"alert": r.Name, "expr": r.Expr}
		if r.For > 0 {
			// Prometheus durations take no fractions: whole milliseconds.
			rule["for"] = fmt.Sprintf("%dms", r.For.Milliseconds())
		}
		if len(r.Labels) > 0 {
			rule["labels"] = r.Labels
		}
		rs = append(rs, rule)
	}
	return map[string]any{"groups": []any{map[string]any{"name": "test", "interval": promInterval, "rules": rs}}}
}

// AddTarget makes Prometheus scrape http://addr/metrics (job "test",
// instance addr, plus labels), or changes the labels of a known target.
func (p *Prometheus) AddTarget(t testing.TB, addr string, labels map[string]string) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.targets[addr] = labels
	p.writeTargets(t)
}

// RemoveTarget stops scraping addr; its series go stale at once.
func (p *Prometheus) RemoveTarget(t testing.TB, addr string) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.targets, addr)
	p.writeTargets(t)
}

func (p *Prometheus) writeTargets(t testing.TB) {
	t.Helper()
	groups := []any{}
	for _, addr := range slices.Sorted(maps.Keys(p.targets)) {
		g := map[string]any{"targets": []string{addr}}
		if l := p.targets[addr]; len(l) > 0 {
			g["labels"] = l
		}
		groups = append(groups, g)
	}
	writeJSON(t, p.path("targets.json"), groups)
}

// SetRules replaces every alerting rule and reloads Prometheus; the new
// rules are in effect when it returns.
func (p *Prometheus) SetRules(t testing.TB, rules ...AlertRule) {
	t.Helper()
	writeJSON(t, p.path("rules.yml"), ruleFile(rules))
	resp, err := http.Post(p.URL+"/-/reload", "", nil)
	if err != nil {
		t.Fatalf("reload prometheus: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("reload prometheus: %s: %s", resp.Status, body)
	}
}

// WaitTargetUp waits (up to a minute) until Prometheus has scraped addr
// successfully.
func (p *Prometheus) WaitTargetUp(t testing.TB, addr string) {
	t.Helper()
	var last string
	waitFor(t, time.Minute, func() bool {
		var r struct {
			Data struct {
				ActiveTargets []struct {
					Labels    map[string]string `json:"labels"`
					Health    string            `json:"health"`
					LastError string            `json:"lastError"`
				} `json:"activeTargets"`
			} `json:"data"`
		}
		p.getJSON(t, "/api/v1/targets?state=active", &r)
		last = "not discovered yet"
		for _, tg := range r.Data.ActiveTargets {
			if tg.Labels["instance"] == addr {
				if tg.Health == "up" {
					return true
				}
				last = tg.Health + " " + tg.LastError
			}
		}
		return false
	}, func() string { return "prometheus target " + addr + ": " + last })
}

// RuleState is the state of the alerting rule name, as Prometheus reports
// it: "inactive", "pending" or "firing"; "" when there is no such rule.
func (p *Prometheus) RuleState(t testing.TB, name string) string {
	t.Helper()
	var r struct {
		Data struct {
			Groups []struct {
				Rules []struct {
					Name  string `json:"name"`
					State string `json:"state"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	p.getJSON(t, "/api/v1/rules?type=alert", &r)
	for _, g := range r.Data.Groups {
		for _, rule := range g.Rules {
			if rule.Name == name {
				return rule.State
			}
		}
	}
	return ""
}

// WaitRuleState waits (up to a minute) until the rule name is in state.
func (p *Prometheus) WaitRuleState(t testing.TB, name, state string) {
	t.Helper()
	var last string
	waitFor(t, time.Minute, func() bool {
		last = p.RuleState(t, name)
		return last == state
	}, func() string { return fmt.Sprintf("rule %s is %q, want %q", name, last, state) })
}

func (p *Prometheus) getJSON(t testing.TB, path string, v any) {
	t.Helper()
	resp, err := http.Get(p.URL + path)
	if err != nil {
		t.Fatalf("prometheus %s: %v", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("prometheus %s: %s: %s", path, resp.Status, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("prometheus %s: %v", path, err)
	}
}

// Alertmanager is a real Alertmanager for one test, without clustering,
// routing every alert to a receiver that sends nothing.
type Alertmanager struct {
	// URL is the base URL of its API, http://127.0.0.1:port.
	URL string
	Dir string
}

// StartAlertmanager starts an Alertmanager on a free loopback port and
// waits until it is ready; it stops at cleanup.
func StartAlertmanager(t testing.TB) *Alertmanager {
	t.Helper()
	bin := RequireAlertmanager(t)
	a := &Alertmanager{Dir: t.TempDir()}
	cfg := filepath.Join(a.Dir, "alertmanager.yml")
	writeJSON(t, cfg, map[string]any{
		"route":     map[string]any{"receiver": "none"},
		"receivers": []any{map[string]any{"name": "none"}},
	})
	addr := runListening(t, "alertmanager", a.Dir, bin,
		"--config.file="+cfg,
		"--storage.path="+filepath.Join(a.Dir, "data"),
		"--web.listen-address=127.0.0.1:0",
		// Clustering would bind 0.0.0.0:9094, shared by every test.
		"--cluster.listen-address=",
	)
	a.URL = "http://" + addr
	return a
}

// writeJSON replaces path atomically, so a watcher never reads half a file.
func writeJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// runListening runs a Prometheus-family server listening on port 0 and
// returns the address it reports in its "Listening on" log line (no
// pick-a-port race), once its /-/ready answers. Its log goes to
// dir/<name>.log and is shown if the test fails. It is stopped (SIGTERM,
// then SIGKILL) at cleanup.
func runListening(t testing.TB, name, dir, bin string, args ...string) string {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout = logf
	// Die with the test binary even if it is killed before cleanup.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	addrc := make(chan string, 1)
	exited := make(chan struct{})
	var waitErr error
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		found := false
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logf, line)
			if !found && strings.Contains(line, `msg="Listening on"`) {
				if a := logValue(line, "address"); a != "" {
					found = true
					addrc <- a
				}
			}
		}
		io.Copy(logf, stderr) // after a too-long line, keep the rest
		waitErr = cmd.Wait()
		logf.Close()
		close(exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("%s log (%s):\n%s", name, logPath, logTail(logPath, 40))
		}
	})

	var addr string
	select {
	case addr = <-addrc:
	case <-exited:
		t.Fatalf("%s exited at start: %v\n%s", name, waitErr, logTail(logPath, 40))
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not report its listen address in 30s", name)
	}
	var status string
	waitFor(t, 30*time.Second, func() bool {
		select {
		case <-exited:
			t.Fatalf("%s exited: %v", name, waitErr)
		default:
		}
		resp, err := http.Get("http://" + addr + "/-/ready")
		if err != nil {
			status = err.Error()
			return false
		}
		resp.Body.Close()
		status = resp.Status
		return resp.StatusCode == http.StatusOK
	}, func() string { return name + " not ready: " + status })
	return addr
}

// logValue reads key=value (value maybe quoted) from a logfmt line.
func logValue(line, key string) string {
	for f := range strings.FieldsSeq(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

func logTail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitFor polls cond every 100ms until it holds, failing the test with
// why() after timeout.
func waitFor(t testing.TB, timeout time.Duration, cond func() bool, why func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", timeout, why())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
