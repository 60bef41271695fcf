package dev

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
)

// stateFile is where a running dev says where its API is, for
// `capstan dev urls`; it goes when dev stops.
const stateFile = "dev.json"

type runState struct {
	Endpoint string `json:"endpoint"`
	Cluster  string `json:"cluster"`
	Pid      int    `json:"pid"`
}

func (d *env) connect(endpoint, keyID, secret string) {
	d.endpoint, d.keyID, d.secret = endpoint, keyID, secret
	d.ecs = ecs.New(ecs.Options{
		Region:       serverRegion,
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider(keyID, secret, ""),
	})
}

func (d *env) writeState() error {
	b, _ := json.Marshal(runState{Endpoint: d.endpoint, Cluster: d.names.cluster, Pid: os.Getpid()})
	return os.WriteFile(filepath.Join(d.cfg.DataDir, stateFile), b, 0o600)
}

// URLs prints what the capstan dev running on dataDir runs now, and where:
// its API, instances, the daemon's tasks, the web tasks' URLs. It asks
// that dev's server, with the administrator credential in dataDir.
func URLs(ctx context.Context, dataDir string, w io.Writer) error {
	if dataDir == "" {
		dataDir = DefaultDataDir()
	}
	dir, err := filepath.Abs(dataDir)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("capstan dev is not running on %s (start it with capstan dev, or name its --data-dir)", dir)
	}
	if err != nil {
		return err
	}
	var rs runState
	if err := json.Unmarshal(b, &rs); err != nil || rs.Endpoint == "" {
		return fmt.Errorf("%s: not what capstan dev writes: %v", filepath.Join(dir, stateFile), err)
	}
	b, err = os.ReadFile(filepath.Join(dir, "admin-credentials.json"))
	if err != nil {
		return fmt.Errorf("the administrator credential of %s: %w", dir, err)
	}
	var cred struct {
		AccessKeyID     string `json:"accessKeyId"`
		SecretAccessKey string `json:"secretAccessKey"`
	}
	if err := json.Unmarshal(b, &cred); err != nil {
		return fmt.Errorf("the administrator credential of %s: %w", dir, err)
	}
	d := &env{cfg: Config{DataDir: dir}, names: namesFor(rs.Cluster)}
	d.connect(rs.Endpoint, cred.AccessKeyID, cred.SecretAccessKey)
	st, err := d.status(ctx, false)
	if err != nil {
		return fmt.Errorf("capstan dev (pid %d) does not answer at %s: %w", rs.Pid, rs.Endpoint, err)
	}
	table(w, st)
	return nil
}

// webURLs are the URLs of the web tasks, in the order status lists them.
func webURLs(st Status) []string {
	var urls []string
	for _, t := range st.Web {
		if t.URL != "" {
			urls = append(urls, t.URL)
		}
	}
	return urls
}
