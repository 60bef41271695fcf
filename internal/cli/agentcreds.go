package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

func agentCredentialNoun() *noun {
	return &noun{
		name:    "agent-credential",
		summary: "Credentials for hand-started agents (one instance each).",
		verbs: []*verb{
			{name: "create", args: "--cluster NAME [--description TEXT]", summary: "Mint a credential an agent registers one instance of the cluster with.",
				details: "The secret is shown once. Start the agent with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY set to it.\n",
				bind:    agentCredentialCreate},
		},
	}
}

func agentCredentialCreate(fs *flag.FlagSet) action {
	cluster := fs.String("cluster", "", "cluster the agent joins (required)")
	desc := fs.String("description", "", "a note kept with the credential")
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 0, 0, ""); err != nil {
			return err
		}
		if *cluster == "" {
			return usageErrorf("--cluster is required")
		}
		if _, err := s.client(ctx); err != nil {
			return err
		}
		var out struct {
			AccessKeyID     string `json:"accessKeyId"`
			SecretAccessKey string `json:"secretAccessKey"`
			Cluster         string `json:"cluster"`
		}
		if err := s.callExtension(ctx, "CreateAgentCredential", map[string]string{"cluster": *cluster, "description": *desc}, &out); err != nil {
			return err
		}
		if s.json() {
			b, _ := json.MarshalIndent(out, "", "  ")
			fmt.Fprintln(s.stdout, string(b))
			return nil
		}
		fmt.Fprintf(s.stdout, "AWS_ACCESS_KEY_ID=%s\nAWS_SECRET_ACCESS_KEY=%s\nECS_CLUSTER=%s\nCAPSTAN_ENDPOINT=%s\n",
			out.AccessKeyID, out.SecretAccessKey, out.Cluster, s.conn.endpoints)
		if s.conn.caBundle != "" {
			fmt.Fprintf(s.stdout, "CAPSTAN_CA_BUNDLE=%s\n", s.conn.caBundle)
		}
		return nil
	}
}

// callExtension calls one of Capstan's own operations: the ECS protocol and
// signing under another target prefix, which the SDK has no method for.
func (s *session) callExtension(ctx context.Context, op string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(s.conn.endpoint, "/")+"/", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	req.Header.Set("X-Amz-Target", "CapstanV1."+op)
	creds, err := s.conn.aws.Credentials.Retrieve(ctx)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(body)
	if err := v4.NewSigner().SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), "ecs", s.conn.aws.Region, time.Now()); err != nil {
		return err
	}
	var hc aws.HTTPClient = http.DefaultClient
	if s.conn.aws.HTTPClient != nil {
		hc = s.conn.aws.HTTPClient // the SDK's carries the CA bundle
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach %s: %w", s.conn.endpoint, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Type    string `json:"__type"`
			Message string `json:"message"`
		}
		json.Unmarshal(b, &e)
		return &apiError{code: e.Type, msg: e.Message}
	}
	return json.Unmarshal(b, out)
}
