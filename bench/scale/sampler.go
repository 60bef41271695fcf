package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// samplerEnv marks the process as the API sampler; its configuration is
// the first line of its standard input. The sampler is a process of its own, as a user's CLI or
// SDK is: a client inside the server's process waits for the server's
// cores in the same Go scheduler, which a real client does not.
const samplerEnv = "CAPSTAN_SCALE_API_SAMPLER"

type samplerConfig struct {
	Endpoint  string   `json:"endpoint"`
	KeyID     string   `json:"keyId"`
	Secret    string   `json:"secret"`
	DaemonArn string   `json:"daemonArn"`
	Instances []string `json:"instances"`
}

type samplerResult struct {
	ByOp       map[string][]time.Duration `json:"byOp"`
	ByPosition map[string][]time.Duration `json:"byPosition"`
	Errors     int64                      `json:"errors"`
}

// serveSampler samples the API until its standard input closes, then
// writes what it measured to its standard output.
func serveSampler() error {
	in := bufio.NewReader(os.Stdin)
	line, err := in.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	var cfg samplerConfig
	if err := json.Unmarshal(line, &cfg); err != nil {
		return err
	}
	c := newClient(cfg.Endpoint, cfg.KeyID, cfg.Secret)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		io.Copy(io.Discard, in)
		cancel()
	}()
	l := newLatencies()
	sample(ctx, c, cfg.DaemonArn, cfg.Instances, l)
	return json.NewEncoder(os.Stdout).Encode(samplerResult{ByOp: l.byOp, ByPosition: l.byPosition, Errors: l.errors.Load()})
}

// startSampler starts the sampler process; stop ends it and returns what
// it measured.
func (h *harness) startSampler(daemonArn string, instances []string) (stop func() (*latencies, error), err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cfg, _ := json.Marshal(samplerConfig{Endpoint: h.url(), KeyID: h.cfg.AdminKeyID, Secret: h.cfg.AdminSecret,
		DaemonArn: daemonArn, Instances: instances})
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), samplerEnv+"=1")
	cmd.Stderr = os.Stderr
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	if _, err := in.Write(append(cfg, '\n')); err != nil {
		in.Close()
		cmd.Wait()
		return nil, fmt.Errorf("api sampler: %w", err)
	}
	return func() (*latencies, error) {
		in.Close()
		if err := cmd.Wait(); err != nil {
			return nil, fmt.Errorf("api sampler: %w", err)
		}
		var r samplerResult
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("api sampler's report: %w", err)
		}
		l := &latencies{byOp: r.ByOp, byPosition: r.ByPosition}
		l.errors.Store(r.Errors)
		return l, nil
	}, nil
}
