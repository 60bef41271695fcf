// Command capstan-agent is the instance agent alone: the same agent as
// `capstan agent`, in a binary without the server and client, so that it
// keeps less memory resident on every instance.
//
//	go run ./cmd/capstan-agent [--endpoint URL] [--cluster NAME] [--data-dir DIR] [--config FILE]
//	capstan-agent version
//
// Settings come from the flags, then the environment (CAPSTAN_ENDPOINT,
// ECS_CLUSTER, ECS_DATADIR, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, ...),
// then the env file: --config, else /etc/capstan/agent.env if it exists.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/capstanhq/capstan/internal/agent"
	"github.com/capstanhq/capstan/internal/agent/config"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "pause" {
		// The daemon namespace holder's process: wait for the stop signal.
		<-ctx.Done()
		return
	}
	if len(args) > 0 && args[0] == "version" {
		// The version it registers with; packages stamp it with -ldflags -X.
		fmt.Println(agent.Version)
		return
	}
	if len(args) > 0 && args[0] == "agent" {
		args = args[1:] // accepted, so it can stand in for `capstan agent`
	}
	cfg, err := config.Load(args, os.Getenv, config.DefaultEnvFile)
	if err == nil {
		err = agent.Run(ctx, cfg, agent.Options{})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "capstan-agent:", err)
		os.Exit(1)
	}
}
