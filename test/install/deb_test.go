package install

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/agent/config"
	"github.com/capstanhq/capstan/internal/testenv"
)

// TestDebInstall builds the .deb with tools/mkdeb, installs it with dpkg in a
// Debian container, checks files, modes, the enabled unit and the state
// dir, then upgrades (the edited conffile stays), removes and purges it.
func TestDebInstall(t *testing.T) {
	needDockerCLI(t)
	testenv.RequireDocker(t)
	root := repoRoot(t)
	bin := agentBinary(t, testVersion)
	debs := t.TempDir()
	mkdeb := filepath.Join(t.TempDir(), "mkdeb")
	if _, err := run(t, root, nil, "go", "build", "-o", mkdeb, "./tools/mkdeb"); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, v := range []string{"0.9.1", "0.9.2"} {
		out, err := run(t, root, nil, mkdeb, "-version", v, "-binary", bin, "-o", debs)
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, "/debs/"+filepath.Base(strings.TrimSpace(out)))
	}
	if _, err := run(t, root, nil, mkdeb, "-version", "1.x", "-o", debs); err == nil || !strings.Contains(err.Error(), `-version "1.x": must be MAJOR.MINOR.PATCH`) {
		t.Fatalf("mkdeb -version 1.x: want an error naming the flag and the rule, got %v", err)
	}

	image := debianImage(t)
	id := docker(t, "run", "-d", "--label", testenv.TestLabel+"="+t.Name(), "-v", debs+":/debs:ro", image, "sleep", "infinity")
	t.Cleanup(func() { run(t, "", nil, "docker", "rm", "-f", id) })
	sh := func(script string) string {
		t.Helper()
		return docker(t, "exec", id, "sh", "-c", script)
	}
	stat := func(path string) string {
		t.Helper()
		return sh("stat -c '%a %U:%G %F' " + path)
	}

	sh("dpkg -i " + paths[0])
	for path, want := range map[string]string{
		"/usr/bin/capstan-agent":                    "755 root:root regular file",
		"/lib/systemd/system/capstan-agent.service": "644 root:root regular file",
		"/etc/capstan":                              "755 root:root directory",
		"/etc/capstan/agent.env":                    "600 root:root regular file",
		"/var/lib/capstan/agent":                    "700 root:root directory",
	} {
		if got := stat(path); got != want {
			t.Errorf("%s: %q, want %q", path, got, want)
		}
	}
	wants := "/etc/systemd/system/multi-user.target.wants/capstan-agent.service"
	if got := sh("readlink " + wants); got != "/lib/systemd/system/capstan-agent.service" {
		t.Errorf("postinst did not enable the unit: %s -> %q", wants, got)
	}
	if got := sh("capstan-agent version"); got != testVersion {
		t.Errorf("installed agent reports version %q, want %q", got, testVersion)
	}
	if got := sh("dpkg-query -W -f '${Version} ${Status}' capstan-agent"); got != "0.9.1 install ok installed" {
		t.Errorf("dpkg-query: %q", got)
	}
	if got := sh("dpkg-query -W -f '${Conffiles}' capstan-agent"); !strings.Contains(got, "/etc/capstan/agent.env ") {
		t.Errorf("agent.env is not a conffile: %q", got)
	}
	unit, err := os.ReadFile(filepath.Join(root, "packaging/capstan-agent.service"))
	if err != nil {
		t.Fatal(err)
	}
	if got := sh("cat /lib/systemd/system/capstan-agent.service"); got != strings.TrimSpace(string(unit)) {
		t.Errorf("installed unit differs from packaging/capstan-agent.service:\n%s", got)
	}
	for _, line := range []string{"EnvironmentFile=-/etc/capstan/agent.env", "ExecStart=/usr/bin/capstan-agent", "Restart=always", "KillMode=process", "WantedBy=multi-user.target"} {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(line) + `$`).Match(unit) {
			t.Errorf("unit lacks %q", line)
		}
	}
	// The shipped file has every setting commented out: the installed agent
	// reads it and asks for the endpoint, not a parse error.
	if _, err := run(t, "", nil, "docker", "exec", id, "capstan-agent"); err == nil || !strings.Contains(err.Error(), "CAPSTAN_ENDPOINT is required") {
		t.Errorf("agent with the shipped env file: want the missing endpoint reported, got %v", err)
	}

	// Upgrade: the operator's edit to the conffile survives.
	sh("echo ECS_LOGLEVEL=debug >> /etc/capstan/agent.env && touch /var/lib/capstan/agent/marker")
	sh("dpkg -i " + paths[1])
	if got := sh("dpkg-query -W -f '${Version}' capstan-agent"); got != "0.9.2" {
		t.Errorf("after upgrade: version %q", got)
	}
	if got := sh("tail -n 1 /etc/capstan/agent.env"); got != "ECS_LOGLEVEL=debug" {
		t.Errorf("upgrade replaced the edited conffile: last line %q", got)
	}
	if got := stat("/etc/capstan/agent.env"); got != "600 root:root regular file" {
		t.Errorf("after upgrade agent.env is %q", got)
	}
	sh("test -f /var/lib/capstan/agent/marker && test -L " + wants)

	// Remove keeps configuration and state; purge deletes both.
	sh("dpkg -r capstan-agent")
	sh("test ! -e /usr/bin/capstan-agent && test ! -e /lib/systemd/system/capstan-agent.service && test ! -L " + wants +
		" && test -f /etc/capstan/agent.env && test -d /var/lib/capstan/agent")
	sh("dpkg --purge capstan-agent")
	sh("test ! -e /etc/capstan/agent.env && test ! -e /var/lib/capstan/agent")
}

// TestEnvFileExamples checks that every example value in packaging/agent.env
// passes the agent's own parser once uncommented.
func TestEnvFileExamples(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "packaging/agent.env"))
	if err != nil {
		t.Fatal(err)
	}
	setting := regexp.MustCompile(`^#([A-Z][A-Z0-9_]*)=(.+)$`)
	var lines []string
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		m := setting.FindStringSubmatch(line)
		if m == nil || m[1] == "CAPSTAN_CA_BUNDLE" { // names a file this machine lacks
			continue
		}
		lines = append(lines, m[1]+"="+m[2])
		n++
	}
	lines = append(lines, "AWS_ACCESS_KEY_ID=AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY=example")
	if n < 20 {
		t.Fatalf("only %d example settings found in packaging/agent.env", n)
	}
	path := filepath.Join(t.TempDir(), "agent.env")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load([]string{"--config", path}, func(string) string { return "" }, "")
	if err != nil {
		t.Fatalf("example settings rejected by the agent:\n%v", err)
	}
	if len(cfg.Ignored) > 0 {
		t.Errorf("example settings the agent does not know: %v", cfg.Ignored)
	}
	if cfg.Endpoint != "https://capstan.example:8443" || cfg.InstanceAttributes["stack"] != "prod" {
		t.Errorf("examples not read as written: endpoint %q attributes %v", cfg.Endpoint, cfg.InstanceAttributes)
	}
}
