package dev

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecs"

	"github.com/capstanhq/capstan/internal/server"
	"github.com/capstanhq/capstan/internal/testenv"
)

// Issue 46: the summary printed the administrator secret. It now prints a
// shell command reading it from the server's 0600 file; run by a shell, the
// command yields the secret, which signs calls that succeed.
func TestSummaryKeepsSecretInItsFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "it's dev") // a quote and a space the command must survive
	srv := testenv.StartServerWith(t, func(c *server.Config) { c.DataDir, c.AdminKeyID, c.AdminSecret = dir, "", "" })
	if srv.AdminFile != filepath.Join(dir, "admin-credentials.json") {
		t.Fatalf("the server keeps its credential in %q", srv.AdminFile)
	}
	secret := srv.Admin.SecretAccessKey
	var out bytes.Buffer
	newPrinter(&out).summary(Status{Endpoint: srv.URL, Region: "us-east-1", AccessKeyID: srv.Admin.AccessKeyID,
		SecretAccessKey: secret, Cluster: "dev", DataDir: dir})
	text := out.String()
	if strings.Contains(text, secret) {
		t.Fatalf("the summary shows the secret:\n%s", text)
	}
	if !strings.Contains(text, srv.AdminFile) {
		t.Errorf("the summary does not name the file keeping the secret:\n%s", text)
	}
	var exports []string
	for _, l := range strings.Split(text, "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "export AWS_") {
			exports = append(exports, l)
		}
	}
	if len(exports) != 3 {
		t.Fatalf("exports: %q", exports)
	}
	got, err := exec.Command("sh", "-c", strings.Join(exports, "\n")+"\nprintf '%s %s' \"$AWS_ACCESS_KEY_ID\" \"$AWS_SECRET_ACCESS_KEY\"").Output()
	if err != nil {
		t.Fatalf("running the exports: %v", err)
	}
	id, key, _ := strings.Cut(string(got), " ")
	if id != srv.Admin.AccessKeyID || key != secret {
		t.Fatalf("the exports give %q", got)
	}
	client := ecs.New(ecs.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: credentials.NewStaticCredentialsProvider(id, key, ""), Retryer: testenv.Retryer()})
	if _, err := client.ListClusters(context.Background(), &ecs.ListClustersInput{}); err != nil {
		t.Fatalf("a call with the exported credential: %v", err)
	}
}
