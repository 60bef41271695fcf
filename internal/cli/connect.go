package cli

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/smithy-go"
	"github.com/capstanhq/capstan/internal/failover"
)

const (
	defaultEndpoint = "http://127.0.0.1:8080"
	defaultRegion   = "us-east-1"
)

// globals are the flags every command accepts, before or after the noun.
type globals struct {
	endpoint        string
	configPath      string
	region          string
	accessKeyID     string
	secretAccessKey string
	caBundle        string
	output          string
}

func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.endpoint, "endpoint", g.endpoint, "Capstan API `URL` (default $CAPSTAN_ENDPOINT, the config file, or "+defaultEndpoint+")")
	fs.StringVar(&g.configPath, "config", g.configPath, "config `file` (default $CAPSTAN_CONFIG or ~/.capstan/config.json)")
	fs.StringVar(&g.region, "region", g.region, "signing `region` (default from the config file or AWS environment, else "+defaultRegion+")")
	fs.StringVar(&g.accessKeyID, "access-key-id", g.accessKeyID, "access key `id` (overrides the config file and AWS environment)")
	fs.StringVar(&g.secretAccessKey, "secret-access-key", g.secretAccessKey, "secret access `key`")
	fs.StringVar(&g.caBundle, "ca-bundle", g.caBundle, "PEM `file` of the CAs to verify an https:// endpoint with (default $CAPSTAN_CA_BUNDLE, the config file, $AWS_CA_BUNDLE, else the system's)")
	fs.StringVar(&g.output, "o", g.output, "output `format`: table or json")
	fs.StringVar(&g.output, "output", g.output, "same as -o")
}

const globalHelp = `Global flags (before or after the noun):
  --endpoint URL[,URL...]   Capstan API (several servers: reads fail over on
                            any connection error, writes only when refused);
                            else $CAPSTAN_ENDPOINT, the config file, then ` + defaultEndpoint + `
  --config FILE             else $CAPSTAN_CONFIG, then ~/.capstan/config.json:
                            {"endpoint": "...", "region": "...",
                             "accessKeyId": "...", "secretAccessKey": "..."}
  --region R                signing region (default ` + defaultRegion + `)
  --access-key-id ID, --secret-access-key KEY
                            credentials; else the config file, then the AWS
                            environment (AWS_ACCESS_KEY_ID, AWS_PROFILE, ...)
  --ca-bundle FILE           CAs to verify an https:// endpoint with; else
                            $CAPSTAN_CA_BUNDLE, the config file's "caBundle",
                            $AWS_CA_BUNDLE, then the system's roots
  -o, --output table|json   json prints the API result with ECS member names
`

// fileConfig is ~/.capstan/config.json.
type fileConfig struct {
	Endpoint        string `json:"endpoint"`
	Region          string `json:"region"`
	AccessKeyID     string `json:"accessKeyId"`
	SecretAccessKey string `json:"secretAccessKey"`
	CABundle        string `json:"caBundle"`
}

// loadFileConfig reads the config file. The default path may be absent; a
// path the user named must exist.
func loadFileConfig(g *globals, getenv func(string) string) (fileConfig, string, error) {
	var fc fileConfig
	path, explicit := g.configPath, true
	if path == "" {
		path = getenv("CAPSTAN_CONFIG")
	}
	if path == "" {
		explicit = false
		home := getenv("HOME")
		if home == "" {
			return fc, "", nil
		}
		path = filepath.Join(home, ".capstan", "config.json")
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && !explicit {
		return fc, path, nil
	}
	if err != nil {
		return fc, path, fmt.Errorf("config: %w", err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return fc, path, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&fc); err != nil {
		return fc, path, fmt.Errorf("config %s: %w", path, err)
	}
	if (fc.AccessKeyID == "") != (fc.SecretAccessKey == "") {
		return fc, path, fmt.Errorf("config %s: accessKeyId and secretAccessKey go together", path)
	}
	return fc, path, nil
}

// connection is the resolved endpoint and SDK configuration.
type connection struct {
	endpoint string // the first of several
	// endpoints is every endpoint, comma-separated, as an agent's
	// CAPSTAN_ENDPOINT takes them.
	endpoints string
	failover  *failover.Middleware // nil for one endpoint
	caBundle  string               // absolute; "" for the system's roots
	aws       aws.Config
}

// connect resolves where to send requests and how to sign them:
//
//	endpoint:    --endpoint, $CAPSTAN_ENDPOINT, config file, default
//	credentials: --access-key-id/--secret-access-key, config file, AWS SDK chain
//	region:      --region, config file, AWS_REGION, AWS_DEFAULT_REGION, profile, default
//	CA bundle:   --ca-bundle, CAPSTAN_CA_BUNDLE, config file, AWS_CA_BUNDLE, profile, system roots
//
// The AWS variables are read through getenv and handed to the SDK as
// explicit options, so a caller (a test) controls them.
func connect(ctx context.Context, g *globals, getenv func(string) string) (*connection, error) {
	fc, cfgPath, err := loadFileConfig(g, getenv)
	if err != nil {
		return nil, err
	}
	// Several comma-separated URLs are servers sharing one etcd.
	endpoints, err := parseEndpoints(firstOf(g.endpoint, getenv("CAPSTAN_ENDPOINT"), fc.Endpoint, defaultEndpoint))
	if err != nil {
		return nil, err
	}
	endpoint := endpoints[0].String()
	if (g.accessKeyID == "") != (g.secretAccessKey == "") {
		return nil, usageErrorf("--access-key-id and --secret-access-key go together")
	}

	// The SDK must not wander off to the EC2 metadata service looking for a
	// role: on a laptop that is a multi-second hang before a useless error.
	opts := []func(*config.LoadOptions) error{
		config.WithEC2IMDSClientEnableState(imds.ClientDisabled),
	}
	if p := getenv("AWS_PROFILE"); p != "" {
		opts = append(opts, config.WithSharedConfigProfile(p))
	}
	if f := getenv("AWS_CONFIG_FILE"); f != "" {
		opts = append(opts, config.WithSharedConfigFiles([]string{f}))
	}
	if f := getenv("AWS_SHARED_CREDENTIALS_FILE"); f != "" {
		opts = append(opts, config.WithSharedCredentialsFiles([]string{f}))
	}
	caBundle := firstOf(g.caBundle, getenv("CAPSTAN_CA_BUNDLE"), fc.CABundle, getenv("AWS_CA_BUNDLE"))
	if caBundle != "" {
		pem, err := readCABundle(caBundle)
		if err != nil {
			return nil, err
		}
		if caBundle, err = filepath.Abs(caBundle); err != nil {
			return nil, err
		}
		opts = append(opts, config.WithCustomCABundle(bytes.NewReader(pem)))
	}
	if r := firstOf(g.region, fc.Region, getenv("AWS_REGION"), getenv("AWS_DEFAULT_REGION")); r != "" {
		opts = append(opts, config.WithRegion(r))
	}
	switch {
	case g.accessKeyID != "":
		opts = append(opts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(g.accessKeyID, g.secretAccessKey, "")))
	case fc.AccessKeyID != "":
		opts = append(opts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(fc.AccessKeyID, fc.SecretAccessKey, "")))
	case getenv("AWS_ACCESS_KEY_ID") != "" && getenv("AWS_SECRET_ACCESS_KEY") != "":
		opts = append(opts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(
			getenv("AWS_ACCESS_KEY_ID"), getenv("AWS_SECRET_ACCESS_KEY"), getenv("AWS_SESSION_TOKEN"))))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		cfg.Region = defaultRegion
	}
	// Fail here with advice rather than inside the first request.
	if cfg.Credentials == nil {
		return nil, noCredentials(cfgPath, nil)
	}
	if _, err := cfg.Credentials.Retrieve(ctx); err != nil {
		return nil, noCredentials(cfgPath, err)
	}
	all := make([]string, len(endpoints))
	for i, u := range endpoints {
		all[i] = u.String()
	}
	conn := &connection{endpoint: endpoint, endpoints: strings.Join(all, ","), caBundle: caBundle, aws: cfg}
	if len(endpoints) > 1 {
		conn.failover = newFailover(endpoints)
	}
	return conn, nil
}

// readCABundle reads a CA bundle, refusing one without a certificate: the
// SDK would otherwise fail every request with a vaguer error.
func readCABundle(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("CA bundle: %w", err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("CA bundle %s holds no PEM certificate", path)
	}
	return b, nil
}

// certProblem says what was wrong with the server's certificate when a
// request failed for it, or "" when it did not. notTLS is an https://
// endpoint that answered in plain HTTP.
const notTLS = "the server does not speak TLS (is its URL http://?)"

func certProblem(err error) string {
	var verr *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var record tls.RecordHeaderError
	switch {
	case errors.As(err, &verr):
		return verr.Err.Error()
	case errors.As(err, &unknown):
		return unknown.Error()
	case errors.As(err, &host):
		return host.Error()
	case errors.As(err, &record), strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return notTLS
	}
	return ""
}

func noCredentials(cfgPath string, err error) error {
	where := "~/.capstan/config.json"
	if cfgPath != "" {
		where = cfgPath
	}
	msg := "no credentials: pass --access-key-id and --secret-access-key, set accessKeyId and secretAccessKey in " +
		where + ", or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)"
	// The chain's last resort is the disabled metadata service; its
	// complaint says nothing useful. Other causes (an expired SSO login) do.
	if err != nil && !strings.Contains(err.Error(), "IMDS") {
		return fmt.Errorf("%s: %w", msg, err)
	}
	return errors.New(msg)
}

func (c *connection) client() *ecs.Client {
	return ecs.NewFromConfig(c.aws, func(o *ecs.Options) {
		o.BaseEndpoint = aws.String(c.endpoint)
		if c.failover != nil {
			o.APIOptions = append(o.APIOptions, c.failover.Add)
		}
	})
}

func firstOf(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

// notCapstan says why an answer cannot have come from an ECS API (a body
// that is not ECS JSON, an error without an ECS error code), or "".
func notCapstan(err error) string {
	status := "a response"
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		status = fmt.Sprintf("HTTP %d", re.HTTPStatusCode())
	}
	var de *smithy.DeserializationError
	var ae smithy.APIError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &de):
		return fmt.Sprintf("it answered %s with %s", status, bodyGist(de.Snapshot))
	case errors.As(err, &ae) && noErrorCode(ae):
		return fmt.Sprintf("it answered %s without an ECS error code", status)
	case errors.As(err, &se):
		return "its answer is not JSON"
	}
	return ""
}

// noErrorCode is an error response whose body named no ECS error: the SDK
// calls those UnknownError, callExtension leaves the code empty.
func noErrorCode(ae smithy.APIError) bool {
	return ae.ErrorCode() == "" || ae.ErrorCode() == "UnknownError"
}

// bodyGist is the start of a response body, for a message.
func bodyGist(b []byte) string {
	first, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	if first == "" {
		// The SDK keeps no copy of a success body it failed to read.
		return "a body that is not ECS JSON"
	}
	if len(first) > 60 {
		first = first[:60] + "..."
	}
	return fmt.Sprintf("%q", first)
}
