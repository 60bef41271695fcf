package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// base is the minimum a valid configuration needs.
var base = map[string]string{
	"CAPSTAN_ENDPOINT":      "https://capstan.test:8443",
	"AWS_ACCESS_KEY_ID":     "AKIDAGENT",
	"AWS_SECRET_ACCESS_KEY": "agent-secret-value",
}

func envFunc(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func withBase(extra map[string]string) map[string]string {
	m := map[string]string{}
	for k, v := range base {
		m[k] = v
	}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

func noBridge(t *testing.T) {
	t.Helper()
	old := bridgeIP
	bridgeIP = func() string { return "" }
	t.Cleanup(func() { bridgeIP = old })
}

func TestDefaults(t *testing.T) {
	noBridge(t)
	c, err := Load(nil, envFunc(base), "")
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Endpoint:                "https://capstan.test:8443",
		Endpoints:               []string{"https://capstan.test:8443"},
		Cluster:                 "default",
		DataDir:                 "/var/lib/capstan/agent",
		AccessKeyID:             "AKIDAGENT",
		SecretAccessKey:         "agent-secret-value",
		Region:                  "us-east-1",
		LogLevel:                slog.LevelInfo,
		ReservedPorts:           []int{22, 2375, 2376, 51678, 51679},
		ReservedPortsUDP:        []int{},
		ContainerStopTimeout:    30 * time.Second,
		ContainerStartTimeout:   3 * time.Minute,
		TaskCleanupWait:         3 * time.Hour,
		ImagePullBehavior:       PullDefault,
		ImageCleanupInterval:    30 * time.Minute,
		ImageMinimumCleanupAge:  time.Hour,
		NumImagesDeletePerCycle: 5,
		RegistryAuth:            map[string]RegistryCredential{},
		InstanceAttributes:      map[string]string{},
		MetricsAddr:             "127.0.0.1:0",
		MetadataAddr:            "0.0.0.0:51679",
		MetadataRPS:             40,
		MetadataBurst:           60,
		TaskBridge:              "default",
		Runtime:                 "docker",
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("defaults:\n got %#v\nwant %#v", c, want)
		gotJSON, _ := json.Marshal(c)
		wantJSON, _ := json.Marshal(want)
		t.Errorf("got  %s\nwant %s", gotJSON, wantJSON)
	}
}

func TestVariables(t *testing.T) {
	noBridge(t)
	dockercfg := base64.StdEncoding.EncodeToString([]byte("alice:s3cret:with:colons"))
	tests := []struct {
		name  string
		env   map[string]string
		check func(Config) any
		want  any
	}{
		{"endpoint", map[string]string{"CAPSTAN_ENDPOINT": "http://10.0.0.1:8080"}, func(c Config) any { return c.Endpoint }, "http://10.0.0.1:8080"},
		{"several endpoints", map[string]string{"CAPSTAN_ENDPOINT": "http://10.0.0.1:8080, https://b:8443,http://10.0.0.1:8080"},
			func(c Config) any { return fmt.Sprint(c.Endpoint, " ", c.Endpoints) }, "http://10.0.0.1:8080 [http://10.0.0.1:8080 https://b:8443]"},
		{"cluster name", map[string]string{"ECS_CLUSTER": "prod-1"}, func(c Config) any { return c.Cluster }, "prod-1"},
		{"cluster arn", map[string]string{"ECS_CLUSTER": "arn:aws:ecs:us-east-1:000000000000:cluster/prod"}, func(c Config) any { return c.Cluster }, "arn:aws:ecs:us-east-1:000000000000:cluster/prod"},
		{"data dir", map[string]string{"ECS_DATADIR": "/srv/agent"}, func(c Config) any { return c.DataDir }, "/srv/agent"},
		{"data dir made absolute", map[string]string{"ECS_DATADIR": "/srv/agent/../x/"}, func(c Config) any { return c.DataDir }, "/srv/x"},
		{"AWS_REGION", map[string]string{"AWS_REGION": "eu-west-3"}, func(c Config) any { return c.Region }, "eu-west-3"},
		{"AWS_DEFAULT_REGION", map[string]string{"AWS_DEFAULT_REGION": "ap-south-1"}, func(c Config) any { return c.Region }, "ap-south-1"},
		{"AWS_REGION wins", map[string]string{"AWS_REGION": "eu-west-3", "AWS_DEFAULT_REGION": "ap-south-1"}, func(c Config) any { return c.Region }, "eu-west-3"},
		{"log crit", map[string]string{"ECS_LOGLEVEL": "crit"}, func(c Config) any { return c.LogLevel }, LevelCritical},
		{"log error", map[string]string{"ECS_LOGLEVEL": "error"}, func(c Config) any { return c.LogLevel }, slog.LevelError},
		{"log warn", map[string]string{"ECS_LOGLEVEL": "warn"}, func(c Config) any { return c.LogLevel }, slog.LevelWarn},
		{"log debug upper", map[string]string{"ECS_LOGLEVEL": "DEBUG"}, func(c Config) any { return c.LogLevel }, slog.LevelDebug},
		{"reserved memory", map[string]string{"ECS_RESERVED_MEMORY": "256"}, func(c Config) any { return c.ReservedMemoryMiB }, int64(256)},
		{"reserved ports", map[string]string{"ECS_RESERVED_PORTS": "[22, 80, 80, 443]"}, func(c Config) any { return c.ReservedPorts }, []int{22, 80, 443}},
		{"reserved ports empty", map[string]string{"ECS_RESERVED_PORTS": "[]"}, func(c Config) any { return c.ReservedPorts }, []int{}},
		{"reserved udp", map[string]string{"ECS_RESERVED_PORTS_UDP": "[53,123]"}, func(c Config) any { return c.ReservedPortsUDP }, []int{53, 123}},
		{"disable privileged", map[string]string{"ECS_DISABLE_PRIVILEGED": "true"}, func(c Config) any { return c.DisablePrivileged }, true},
		{"stop timeout", map[string]string{"ECS_CONTAINER_STOP_TIMEOUT": "2m"}, func(c Config) any { return c.ContainerStopTimeout }, 2 * time.Minute},
		{"stop timeout minimum", map[string]string{"ECS_CONTAINER_STOP_TIMEOUT": "1s"}, func(c Config) any { return c.ContainerStopTimeout }, time.Second},
		{"start timeout", map[string]string{"ECS_CONTAINER_START_TIMEOUT": "45s"}, func(c Config) any { return c.ContainerStartTimeout }, 45 * time.Second},
		{"pull always", map[string]string{"ECS_IMAGE_PULL_BEHAVIOR": "always"}, func(c Config) any { return c.ImagePullBehavior }, PullAlways},
		{"pull once", map[string]string{"ECS_IMAGE_PULL_BEHAVIOR": "once"}, func(c Config) any { return c.ImagePullBehavior }, PullOnce},
		{"pull prefer-cached", map[string]string{"ECS_IMAGE_PULL_BEHAVIOR": "prefer-cached"}, func(c Config) any { return c.ImagePullBehavior }, PullPreferCached},
		{"cleanup interval", map[string]string{"ECS_IMAGE_CLEANUP_INTERVAL": "1h30m"}, func(c Config) any { return c.ImageCleanupInterval }, 90 * time.Minute},
		{"cleanup age", map[string]string{"ECS_IMAGE_MINIMUM_CLEANUP_AGE": "0s"}, func(c Config) any { return c.ImageMinimumCleanupAge }, time.Duration(0)},
		{"delete per cycle", map[string]string{"ECS_NUM_IMAGES_DELETE_PER_CYCLE": "20"}, func(c Config) any { return c.NumImagesDeletePerCycle }, 20},
		{"disable image cleanup", map[string]string{"ECS_DISABLE_IMAGE_CLEANUP": "1"}, func(c Config) any { return c.DisableImageCleanup }, true},
		{"task cleanup wait", map[string]string{"ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION": "1m"}, func(c Config) any { return c.TaskCleanupWait }, time.Minute},
		{"rps limit", map[string]string{"ECS_TASK_METADATA_RPS_LIMIT": "100, 150"}, func(c Config) any { return [2]int{c.MetadataRPS, c.MetadataBurst} }, [2]int{100, 150}},
		{"attributes", map[string]string{"ECS_INSTANCE_ATTRIBUTES": `{"stack":"prod","team/owner":"ops@example.com: a b"}`},
			func(c Config) any { return c.InstanceAttributes }, map[string]string{"stack": "prod", "team/owner": "ops@example.com: a b"}},
		{"auth docker", map[string]string{"ECS_ENGINE_AUTH_TYPE": "docker",
			"ECS_ENGINE_AUTH_DATA": `{"https://index.docker.io/v1/":{"username":"bob","password":"pw","email":"b@x"},"127.0.0.1:5000":{"username":"u","password":"p"}}`},
			func(c Config) any { return c.RegistryAuth },
			map[string]RegistryCredential{"docker.io": {Username: "bob", Password: "pw", Email: "b@x"}, "127.0.0.1:5000": {Username: "u", Password: "p"}}},
		{"auth dockercfg", map[string]string{"ECS_ENGINE_AUTH_TYPE": "dockercfg",
			"ECS_ENGINE_AUTH_DATA": `{"https://registry.example.com/v2":{"auth":"` + dockercfg + `","email":"a@x"}}`},
			func(c Config) any { return c.RegistryAuth },
			map[string]RegistryCredential{"registry.example.com": {Username: "alice", Password: "s3cret:with:colons", Email: "a@x"}}},
		{"instance cpu", map[string]string{"CAPSTAN_INSTANCE_CPU": "2048"}, func(c Config) any { return c.InstanceCPU }, 2048},
		{"instance memory", map[string]string{"CAPSTAN_INSTANCE_MEMORY": "4096", "ECS_RESERVED_MEMORY": "512"}, func(c Config) any { return c.InstanceMemoryMiB }, int64(4096)},
		{"metrics addr", map[string]string{"CAPSTAN_METRICS_ADDR": "0.0.0.0:9100"}, func(c Config) any { return c.MetricsAddr }, "0.0.0.0:9100"},
		{"metadata addr", map[string]string{"CAPSTAN_METADATA_ADDR": "127.0.0.1:51679"}, func(c Config) any { return c.MetadataAddr }, "127.0.0.1:51679"},
		{"metadata addr ipv6", map[string]string{"CAPSTAN_METADATA_ADDR": "[::1]:8000"}, func(c Config) any { return c.MetadataAddr }, "[::1]:8000"},
		{"daemon subnet", map[string]string{"CAPSTAN_DAEMON_SUBNET": "169.254.173.0/24"},
			func(c Config) any { return [2]string{c.DaemonSubnet.String(), c.DaemonAddress.String()} }, [2]string{"169.254.173.0/24", "169.254.173.2"}},
		{"daemon subnet and address", map[string]string{"CAPSTAN_DAEMON_SUBNET": "10.99.0.0/16", "CAPSTAN_DAEMON_ADDRESS": "10.99.3.4"},
			func(c Config) any { return [2]string{c.DaemonSubnet.String(), c.DaemonAddress.String()} }, [2]string{"10.99.0.0/16", "10.99.3.4"}},
		{"daemon address alone", map[string]string{"CAPSTAN_DAEMON_ADDRESS": "169.254.172.9"},
			func(c Config) any { return [2]string{c.DaemonSubnet.String(), c.DaemonAddress.String()} }, [2]string{"169.254.172.0/24", "169.254.172.9"}},
		{"daemon smallest subnet", map[string]string{"CAPSTAN_DAEMON_SUBNET": "169.254.180.4/30"},
			func(c Config) any { return c.DaemonAddress.String() }, "169.254.180.6"},
		{"pause binary", map[string]string{"CAPSTAN_PAUSE_BINARY": "/opt/capstan/../bin/capstan"}, func(c Config) any { return c.PauseBinary }, "/opt/bin/capstan"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(nil, envFunc(withBase(tt.env)), "")
			if err != nil {
				t.Fatal(err)
			}
			if got := tt.check(c); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %#v, want %#v", got, tt.want)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	noBridge(t)
	tests := []struct {
		name string
		env  map[string]string
		want []string // substrings of the error
	}{
		{"endpoint missing", map[string]string{"CAPSTAN_ENDPOINT": ""}, []string{"CAPSTAN_ENDPOINT is required"}},
		{"endpoint scheme", map[string]string{"CAPSTAN_ENDPOINT": "ftp://x"}, []string{`CAPSTAN_ENDPOINT="ftp://x": must be an http:// or https:// URL`}},
		{"endpoint no host", map[string]string{"CAPSTAN_ENDPOINT": "https://"}, []string{"CAPSTAN_ENDPOINT"}},
		{"endpoint list with a bad one", map[string]string{"CAPSTAN_ENDPOINT": "http://a:1,b:2"}, []string{`CAPSTAN_ENDPOINT="http://a:1,b:2": must be an http:// or https:// URL with a host (or several, comma-separated), got "b:2"`}},
		{"endpoint list with an empty one", map[string]string{"CAPSTAN_ENDPOINT": "http://a:1,,http://b:2"}, []string{`CAPSTAN_ENDPOINT="http://a:1,,http://b:2": URL 2 of the list is empty`}},
		{"cluster", map[string]string{"ECS_CLUSTER": "bad name"}, []string{`ECS_CLUSTER="bad name": must be a cluster name`}},
		{"access key", map[string]string{"AWS_ACCESS_KEY_ID": ""}, []string{"AWS_ACCESS_KEY_ID is required"}},
		{"secret key", map[string]string{"AWS_SECRET_ACCESS_KEY": ""}, []string{"AWS_SECRET_ACCESS_KEY is required"}},
		{"region", map[string]string{"AWS_REGION": "Mars"}, []string{`AWS_REGION="Mars": must be a region name`}},
		{"default region", map[string]string{"AWS_DEFAULT_REGION": "x"}, []string{`AWS_DEFAULT_REGION="x"`}},
		{"log level", map[string]string{"ECS_LOGLEVEL": "loud"}, []string{`ECS_LOGLEVEL="loud": must be one of crit, error, warn, info, debug`}},
		{"reserved memory text", map[string]string{"ECS_RESERVED_MEMORY": "1g"}, []string{`ECS_RESERVED_MEMORY="1g": must be an integer of at least 0`}},
		{"reserved memory negative", map[string]string{"ECS_RESERVED_MEMORY": "-1"}, []string{"ECS_RESERVED_MEMORY"}},
		{"reserved memory over instance", map[string]string{"ECS_RESERVED_MEMORY": "1024", "CAPSTAN_INSTANCE_MEMORY": "1024"}, []string{"ECS_RESERVED_MEMORY", "must be less than CAPSTAN_INSTANCE_MEMORY"}},
		{"ports not json", map[string]string{"ECS_RESERVED_PORTS": "22,80"}, []string{`ECS_RESERVED_PORTS="22,80": must be a JSON list`}},
		{"ports range", map[string]string{"ECS_RESERVED_PORTS": "[0]"}, []string{"ECS_RESERVED_PORTS", "port 0 is outside 1-65535"}},
		{"udp range", map[string]string{"ECS_RESERVED_PORTS_UDP": "[70000]"}, []string{"ECS_RESERVED_PORTS_UDP", "70000"}},
		{"privileged", map[string]string{"ECS_DISABLE_PRIVILEGED": "yes"}, []string{`ECS_DISABLE_PRIVILEGED="yes": must be true or false`}},
		{"stop timeout syntax", map[string]string{"ECS_CONTAINER_STOP_TIMEOUT": "30"}, []string{`ECS_CONTAINER_STOP_TIMEOUT="30": must be a duration of at least 1s`}},
		{"stop timeout min", map[string]string{"ECS_CONTAINER_STOP_TIMEOUT": "500ms"}, []string{"ECS_CONTAINER_STOP_TIMEOUT", "at least 1s"}},
		{"start timeout min", map[string]string{"ECS_CONTAINER_START_TIMEOUT": "44s"}, []string{"ECS_CONTAINER_START_TIMEOUT", "at least 45s"}},
		{"pull behavior", map[string]string{"ECS_IMAGE_PULL_BEHAVIOR": "never"}, []string{"ECS_IMAGE_PULL_BEHAVIOR", "default, always, once, prefer-cached"}},
		{"cleanup interval min", map[string]string{"ECS_IMAGE_CLEANUP_INTERVAL": "5m"}, []string{"ECS_IMAGE_CLEANUP_INTERVAL", "at least 10m0s"}},
		{"cleanup age negative", map[string]string{"ECS_IMAGE_MINIMUM_CLEANUP_AGE": "-1h"}, []string{"ECS_IMAGE_MINIMUM_CLEANUP_AGE", "at least 0s"}},
		{"delete per cycle", map[string]string{"ECS_NUM_IMAGES_DELETE_PER_CYCLE": "0"}, []string{"ECS_NUM_IMAGES_DELETE_PER_CYCLE", "at least 1"}},
		{"disable cleanup", map[string]string{"ECS_DISABLE_IMAGE_CLEANUP": "maybe"}, []string{"ECS_DISABLE_IMAGE_CLEANUP"}},
		{"task cleanup min", map[string]string{"ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION": "59s"}, []string{"ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION", "at least 1m0s"}},
		{"rps one number", map[string]string{"ECS_TASK_METADATA_RPS_LIMIT": "40"}, []string{"ECS_TASK_METADATA_RPS_LIMIT", "STEADY,BURST"}},
		{"rps zero", map[string]string{"ECS_TASK_METADATA_RPS_LIMIT": "0,10"}, []string{"ECS_TASK_METADATA_RPS_LIMIT"}},
		{"attributes not object", map[string]string{"ECS_INSTANCE_ATTRIBUTES": `["a"]`}, []string{"ECS_INSTANCE_ATTRIBUTES", "JSON object"}},
		{"attributes non-string", map[string]string{"ECS_INSTANCE_ATTRIBUTES": `{"a":1}`}, []string{"ECS_INSTANCE_ATTRIBUTES", "string values"}},
		{"attribute name", map[string]string{"ECS_INSTANCE_ATTRIBUTES": `{"bad name":"x"}`}, []string{"ECS_INSTANCE_ATTRIBUTES", `attribute name "bad name"`}},
		{"attribute reserved", map[string]string{"ECS_INSTANCE_ATTRIBUTES": `{"ecs.os-type":"x"}`}, []string{"ECS_INSTANCE_ATTRIBUTES", "reserved"}},
		{"attribute value", map[string]string{"ECS_INSTANCE_ATTRIBUTES": `{"a":" padded"}`}, []string{"ECS_INSTANCE_ATTRIBUTES", `attribute "a" value`}},
		{"attribute value long", map[string]string{"ECS_INSTANCE_ATTRIBUTES": `{"a":"` + strings.Repeat("v", 129) + `"}`}, []string{`attribute "a" value`}},
		{"auth type alone", map[string]string{"ECS_ENGINE_AUTH_TYPE": "docker"}, []string{"ECS_ENGINE_AUTH_DATA is required when ECS_ENGINE_AUTH_TYPE"}},
		{"auth data alone", map[string]string{"ECS_ENGINE_AUTH_DATA": "{}"}, []string{"ECS_ENGINE_AUTH_TYPE", "is required when ECS_ENGINE_AUTH_DATA"}},
		{"auth type", map[string]string{"ECS_ENGINE_AUTH_TYPE": "ecr", "ECS_ENGINE_AUTH_DATA": "{}"}, []string{`ECS_ENGINE_AUTH_TYPE="ecr": must be docker or dockercfg`}},
		{"auth docker missing password", map[string]string{"ECS_ENGINE_AUTH_TYPE": "docker", "ECS_ENGINE_AUTH_DATA": `{"r.example":{"username":"u"}}`}, []string{"ECS_ENGINE_AUTH_DATA", "username and password are required"}},
		{"auth dockercfg bad base64", map[string]string{"ECS_ENGINE_AUTH_TYPE": "dockercfg", "ECS_ENGINE_AUTH_DATA": `{"r.example":{"auth":"!!"}}`}, []string{"ECS_ENGINE_AUTH_DATA", "base64 of username:password"}},
		{"auth not json", map[string]string{"ECS_ENGINE_AUTH_TYPE": "docker", "ECS_ENGINE_AUTH_DATA": `nope`}, []string{"ECS_ENGINE_AUTH_DATA: must be a JSON object"}},
		{"instance cpu", map[string]string{"CAPSTAN_INSTANCE_CPU": "-5"}, []string{"CAPSTAN_INSTANCE_CPU", "CPU units"}},
		{"instance memory", map[string]string{"CAPSTAN_INSTANCE_MEMORY": "4GiB"}, []string{"CAPSTAN_INSTANCE_MEMORY"}},
		{"metrics addr", map[string]string{"CAPSTAN_METRICS_ADDR": "localhost"}, []string{`CAPSTAN_METRICS_ADDR="localhost": must be IP:PORT`}},
		{"metadata addr port", map[string]string{"CAPSTAN_METADATA_ADDR": "0.0.0.0:99999"}, []string{"CAPSTAN_METADATA_ADDR"}},
		{"daemon subnet syntax", map[string]string{"CAPSTAN_DAEMON_SUBNET": "169.254.173.0"}, []string{`CAPSTAN_DAEMON_SUBNET="169.254.173.0": must be an IPv4 subnet in CIDR form`}},
		{"daemon subnet ipv6", map[string]string{"CAPSTAN_DAEMON_SUBNET": "fd00::/64"}, []string{"CAPSTAN_DAEMON_SUBNET", "must be an IPv4 subnet"}},
		{"daemon subnet host bits", map[string]string{"CAPSTAN_DAEMON_SUBNET": "169.254.173.2/24"}, []string{"CAPSTAN_DAEMON_SUBNET", "must be a network address: 169.254.173.0/24"}},
		{"daemon subnet too small", map[string]string{"CAPSTAN_DAEMON_SUBNET": "169.254.173.0/31"}, []string{"CAPSTAN_DAEMON_SUBNET", "/8 to /30"}},
		{"daemon address syntax", map[string]string{"CAPSTAN_DAEMON_ADDRESS": "daemon"}, []string{`CAPSTAN_DAEMON_ADDRESS="daemon": must be an IPv4 address`}},
		{"daemon address outside", map[string]string{"CAPSTAN_DAEMON_SUBNET": "169.254.173.0/24", "CAPSTAN_DAEMON_ADDRESS": "169.254.172.2"}, []string{"CAPSTAN_DAEMON_ADDRESS", "inside 169.254.173.0/24"}},
		{"daemon address outside default", map[string]string{"CAPSTAN_DAEMON_ADDRESS": "169.254.173.2"}, []string{"CAPSTAN_DAEMON_ADDRESS", "inside 169.254.172.0/24", "set CAPSTAN_DAEMON_SUBNET"}},
		{"daemon address network", map[string]string{"CAPSTAN_DAEMON_SUBNET": "169.254.173.0/24", "CAPSTAN_DAEMON_ADDRESS": "169.254.173.0"}, []string{"CAPSTAN_DAEMON_ADDRESS", "network address"}},
		{"daemon address gateway", map[string]string{"CAPSTAN_DAEMON_SUBNET": "169.254.173.0/24", "CAPSTAN_DAEMON_ADDRESS": "169.254.173.1"}, []string{"CAPSTAN_DAEMON_ADDRESS", "gateway"}},
		{"daemon address broadcast", map[string]string{"CAPSTAN_DAEMON_SUBNET": "169.254.173.0/24", "CAPSTAN_DAEMON_ADDRESS": "169.254.173.255"}, []string{"CAPSTAN_DAEMON_ADDRESS", "broadcast"}},
		{"several at once", map[string]string{"ECS_LOGLEVEL": "x", "ECS_CONTAINER_STOP_TIMEOUT": "x"}, []string{"ECS_LOGLEVEL", "ECS_CONTAINER_STOP_TIMEOUT"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(nil, envFunc(withBase(tt.env)), "")
			if err == nil {
				t.Fatal("Load succeeded, want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
			}
		})
	}
}

func TestSecretsNeverInErrors(t *testing.T) {
	env := withBase(map[string]string{"ECS_ENGINE_AUTH_TYPE": "docker", "ECS_ENGINE_AUTH_DATA": `{"r.example":{"username":"u","password":"hunter2"`})
	_, err := Load(nil, envFunc(env), "")
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("error must name ECS_ENGINE_AUTH_DATA without its value: %v", err)
	}
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agent.env")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestEnvFile(t *testing.T) {
	noBridge(t)
	path := writeFile(t, `# Capstan agent
CAPSTAN_ENDPOINT=https://from-file:1
export AWS_ACCESS_KEY_ID=AKIDFILE
AWS_SECRET_ACCESS_KEY='single # not a comment'

ECS_CLUSTER="quoted"
ECS_INSTANCE_ATTRIBUTES={"a":"b"}
ECS_LOGLEVEL = debug
CAPSTAN_METADATA_ADDR="127.0.0.1:\"1\""
ECS_ENABLE_TASK_IAM_ROLE=true
`)
	c, err := Load(nil, envFunc(nil), path)
	if err == nil {
		t.Fatal("want an error for the bad CAPSTAN_METADATA_ADDR")
	}
	if !strings.Contains(err.Error(), "CAPSTAN_METADATA_ADDR=\"127.0.0.1:\\\"1\\\"\" ("+path+" line 9)") {
		t.Errorf("error should name the file and line: %v", err)
	}
	os.WriteFile(path, []byte(strings.Replace(mustRead(t, path), `CAPSTAN_METADATA_ADDR="127.0.0.1:\"1\""`, `CAPSTAN_METADATA_ADDR="127.0.0.1:1"`, 1)), 0o600)
	c, err = Load(nil, envFunc(nil), path)
	if err != nil {
		t.Fatal(err)
	}
	if c.EnvFile != path || c.Endpoint != "https://from-file:1" || c.AccessKeyID != "AKIDFILE" ||
		c.SecretAccessKey.Reveal() != "single # not a comment" || c.Cluster != "quoted" ||
		c.InstanceAttributes["a"] != "b" || c.LogLevel != slog.LevelDebug || c.MetadataAddr != "127.0.0.1:1" {
		t.Errorf("file values not applied: %+v", c)
	}
	if !reflect.DeepEqual(c.Ignored, []string{"ECS_ENABLE_TASK_IAM_ROLE"}) {
		t.Errorf("Ignored = %v", c.Ignored)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestEnvFileErrors(t *testing.T) {
	tests := []struct{ content, want string }{
		{"JUST_A_WORD\n", "line 1: want KEY=VALUE"},
		{"# ok\n1BAD=x\n", "line 2: want KEY=VALUE"},
		{"A=\"open\n", `line 1: A: unterminated " quote`},
		{"A='open\n", `line 1: A: unterminated ' quote`},
	}
	for _, tt := range tests {
		_, err := Load(nil, envFunc(base), writeFile(t, tt.content))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: got %v, want %q", tt.content, err, tt.want)
		}
	}
	// The default file may be absent; a file named by --config may not.
	if _, err := Load(nil, envFunc(base), filepath.Join(t.TempDir(), "absent.env")); err != nil {
		t.Errorf("absent default env file: %v", err)
	}
	_, err := Load([]string{"--config", filepath.Join(t.TempDir(), "absent.env")}, envFunc(base), "")
	if err == nil || !strings.Contains(err.Error(), "absent.env") {
		t.Errorf("absent --config file: %v", err)
	}
}

func TestPrecedence(t *testing.T) {
	noBridge(t)
	file := writeFile(t, "ECS_CLUSTER=file\nECS_DATADIR=/file\nCAPSTAN_ENDPOINT=https://file\nECS_LOGLEVEL=warn\nECS_RESERVED_MEMORY=1\n")
	other := writeFile(t, "ECS_CLUSTER=other\n")
	tests := []struct {
		name string
		args []string
		env  map[string]string
		file string
		want [4]string // cluster, data dir, endpoint, log level
	}{
		{"file only", nil, nil, file, [4]string{"file", "/file", "https://file", "WARN"}},
		{"env over file", nil, map[string]string{"ECS_CLUSTER": "env", "ECS_LOGLEVEL": "error"}, file, [4]string{"env", "/file", "https://file", "ERROR"}},
		{"flag over env", []string{"--cluster", "flag", "--data-dir=/flag", "--endpoint", "http://flag"},
			map[string]string{"ECS_CLUSTER": "env", "ECS_DATADIR": "/env", "CAPSTAN_ENDPOINT": "https://env"}, file,
			[4]string{"flag", "/flag", "http://flag", "WARN"}},
		{"single dash flag", []string{"-cluster", "flag"}, nil, file, [4]string{"flag", "/file", "https://file", "WARN"}},
		{"--config replaces the default file", []string{"--config", other}, map[string]string{"CAPSTAN_ENDPOINT": "https://env"}, file,
			[4]string{"other", "/var/lib/capstan/agent", "https://env", "INFO"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"}
			for k, v := range tt.env {
				env[k] = v
			}
			c, err := Load(tt.args, envFunc(env), tt.file)
			if err != nil {
				t.Fatal(err)
			}
			got := [4]string{c.Cluster, c.DataDir, c.Endpoint, c.LogLevel.String()}
			if got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
	t.Run("flag error names the source", func(t *testing.T) {
		_, err := Load([]string{"--cluster", "bad name"}, envFunc(base), "")
		if err == nil || !strings.Contains(err.Error(), `ECS_CLUSTER="bad name" (flag --cluster)`) {
			t.Errorf("got %v", err)
		}
	})
	t.Run("unknown flag", func(t *testing.T) {
		_, err := Load([]string{"--nope"}, envFunc(base), "")
		if err == nil || !strings.Contains(err.Error(), "nope") {
			t.Errorf("got %v", err)
		}
	})
	t.Run("stray argument", func(t *testing.T) {
		_, err := Load([]string{"extra"}, envFunc(base), "")
		if err == nil || !strings.Contains(err.Error(), `unexpected argument "extra"`) {
			t.Errorf("got %v", err)
		}
	})
}

func TestRedaction(t *testing.T) {
	env := withBase(map[string]string{"ECS_ENGINE_AUTH_TYPE": "docker",
		"ECS_ENGINE_AUTH_DATA": `{"r.example":{"username":"u","password":"registry-password-value"}}`})
	c, err := Load(nil, envFunc(env), "")
	if err != nil {
		t.Fatal(err)
	}
	secrets := []string{"agent-secret-value", "registry-password-value"}
	var buf strings.Builder
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("cfg", "secret", c.SecretAccessKey, "auth", c.RegistryAuth)
	jsonText, _ := json.Marshal(c)
	outputs := map[string]string{
		"%v": fmt.Sprintf("%v", c), "%+v": fmt.Sprintf("%+v", c), "%#v": fmt.Sprintf("%#v", c), "%s": fmt.Sprintf("%s", c),
		"String": c.String(), "pointer %+v": fmt.Sprintf("%+v", &c), "field %v": fmt.Sprintf("%v", c.SecretAccessKey),
		"field %q": fmt.Sprintf("%q", c.SecretAccessKey), "auth %+v": fmt.Sprintf("%+v", c.RegistryAuth),
		"auth %#v": fmt.Sprintf("%#v", c.RegistryAuth), "slog": buf.String(), "json": string(jsonText),
	}
	for how, out := range outputs {
		for _, s := range secrets {
			if strings.Contains(out, s) {
				t.Errorf("%s leaks %q: %s", how, s, out)
			}
		}
	}
	if !strings.Contains(c.String(), "AKIDAGENT") || !strings.Contains(c.String(), "r.example(u)") {
		t.Errorf("String should still show non-secret values: %s", c)
	}
	if c.SecretAccessKey.Reveal() != "agent-secret-value" || c.RegistryAuths()["r.example"].Password != "registry-password-value" {
		t.Error("Reveal/RegistryAuths must return the real values")
	}
}

func TestMetadataAddress(t *testing.T) {
	old := bridgeIP
	t.Cleanup(func() { bridgeIP = old })

	bridgeIP = func() string { return "172.17.0.1" }
	c, err := Load(nil, envFunc(base), "")
	if err != nil {
		t.Fatal(err)
	}
	if c.MetadataAddr != "172.17.0.1:51679" || c.BridgeIP != "172.17.0.1" {
		t.Errorf("with docker0: listen %q bridge %q", c.MetadataAddr, c.BridgeIP)
	}
	if got := c.MetadataURIAddr("bridge"); got != "172.17.0.1:51679" {
		t.Errorf("bridge URI addr %q", got)
	}
	// Host-network containers share the host's addresses, docker0's included.
	if got := c.MetadataURIAddr("host"); got != "172.17.0.1:51679" {
		t.Errorf("host URI addr %q", got)
	}

	c, err = Load(nil, envFunc(withBase(map[string]string{"CAPSTAN_METADATA_ADDR": "0.0.0.0:8080"})), "")
	if err != nil {
		t.Fatal(err)
	}
	for mode, want := range map[string]string{"bridge": "172.17.0.1:8080", "host": "127.0.0.1:8080", "": "172.17.0.1:8080"} {
		if got := c.MetadataURIAddr(mode); got != want {
			t.Errorf("listen on all, %q: %q, want %q", mode, got, want)
		}
	}

	bridgeIP = func() string { return "" }
	c, err = Load(nil, envFunc(base), "")
	if err != nil {
		t.Fatal(err)
	}
	if c.MetadataAddr != "0.0.0.0:51679" || c.MetadataURIAddr("bridge") != "127.0.0.1:51679" {
		t.Errorf("without docker0: listen %q, uri %q", c.MetadataAddr, c.MetadataURIAddr("bridge"))
	}
}

func TestRegistryHost(t *testing.T) {
	for image, want := range map[string]string{
		"busybox":                         "docker.io",
		"library/busybox:1.36":            "docker.io",
		"docker.io/library/busybox":       "docker.io",
		"index.docker.io/x/y":             "docker.io",
		"127.0.0.1:5000/app:1":            "127.0.0.1:5000",
		"localhost/app":                   "localhost",
		"Registry.Example.com/team/app":   "registry.example.com",
		"ghcr.io/o/a@sha256:0123456789ab": "ghcr.io",
	} {
		if got := RegistryHost(image); got != want {
			t.Errorf("RegistryHost(%q) = %q, want %q", image, got, want)
		}
	}
}

func TestRuntimeSelection(t *testing.T) {
	c, err := Load(nil, envFunc(base), "")
	if err != nil || c.Runtime != "docker" {
		t.Fatalf("default runtime %q (%v), want docker", c.Runtime, err)
	}
	c, err = Load([]string{"--runtime", "sim"}, envFunc(base), "")
	if err != nil || c.Runtime != "sim" {
		t.Fatalf("--runtime sim: %q (%v)", c.Runtime, err)
	}
	c, err = Load(nil, envFunc(withBase(map[string]string{"CAPSTAN_RUNTIME": "sim"})), "")
	if err != nil || c.Runtime != "sim" {
		t.Fatalf("CAPSTAN_RUNTIME=sim: %q (%v)", c.Runtime, err)
	}
	_, err = Load([]string{"--runtime", "podman"}, envFunc(base), "")
	if err == nil || !strings.Contains(err.Error(), `CAPSTAN_RUNTIME="podman" (flag --runtime): must be docker or sim`) {
		t.Fatalf("bad runtime: %v", err)
	}
}

func TestTaskBridge(t *testing.T) {
	c, err := Load(nil, envFunc(base), "")
	if err != nil || c.TaskBridge != "default" {
		t.Fatalf("default task bridge %q (%v), want default", c.TaskBridge, err)
	}
	c, err = Load(nil, envFunc(withBase(map[string]string{"CAPSTAN_TASK_BRIDGE": "instance"})), "")
	if err != nil || c.TaskBridge != "instance" || !strings.Contains(c.String(), "taskBridge=instance") {
		t.Fatalf("CAPSTAN_TASK_BRIDGE=instance: %q (%v)", c.TaskBridge, err)
	}
	_, err = Load(nil, envFunc(withBase(map[string]string{"CAPSTAN_TASK_BRIDGE": "docker0"})), "")
	if err == nil || !strings.Contains(err.Error(), `CAPSTAN_TASK_BRIDGE="docker0"`) || !strings.Contains(err.Error(), "must be default or instance") {
		t.Fatalf("bad task bridge: %v", err)
	}
}

// CAPSTAN_CA_BUNDLE, else AWS_CA_BUNDLE, names a PEM file of certificates,
// from the environment or the env file; a file that cannot be one stops
// the agent at start.
func TestCABundle(t *testing.T) {
	noBridge(t)
	dir := t.TempDir()
	// Any certificate will do: Load only checks the file holds one.
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	pemCert := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	ca := filepath.Join(dir, "ca.pem")
	os.WriteFile(ca, []byte(pemCert), 0o644)
	other := filepath.Join(dir, "other.pem")
	os.WriteFile(other, []byte(pemCert), 0o644)
	garbage := filepath.Join(dir, "garbage.pem")
	os.WriteFile(garbage, []byte("not a certificate"), 0o644)

	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"none", nil, ""},
		{"capstan", map[string]string{"CAPSTAN_CA_BUNDLE": ca}, ca},
		{"aws", map[string]string{"AWS_CA_BUNDLE": ca}, ca},
		{"capstan wins", map[string]string{"CAPSTAN_CA_BUNDLE": ca, "AWS_CA_BUNDLE": other}, ca},
		{"made absolute", map[string]string{"CAPSTAN_CA_BUNDLE": dir + "/x/../ca.pem"}, ca},
	} {
		c, err := Load(nil, envFunc(withBase(tc.env)), "")
		if err != nil || c.CABundle != tc.want {
			t.Errorf("%s: %q %v, want %q", tc.name, c.CABundle, err, tc.want)
		}
	}
	file := filepath.Join(dir, "agent.env")
	os.WriteFile(file, []byte("CAPSTAN_CA_BUNDLE="+ca+"\n"), 0o600)
	if c, err := Load(nil, envFunc(base), file); err != nil || c.CABundle != ca || len(c.Ignored) != 0 {
		t.Errorf("env file: %+v %v", c.CABundle, err)
	}
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"CAPSTAN_CA_BUNDLE": garbage}, `CAPSTAN_CA_BUNDLE="` + garbage + `": the CA bundle ` + garbage + ` holds no PEM certificate`},
		{map[string]string{"AWS_CA_BUNDLE": dir + "/missing.pem"}, `AWS_CA_BUNDLE="` + dir + `/missing.pem": cannot read the CA bundle: open ` + dir + "/missing.pem"},
	} {
		if _, err := Load(nil, envFunc(withBase(tc.env)), ""); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want %q", err, tc.want)
		}
	}
}
