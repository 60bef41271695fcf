package main

import (
	"context"
	"os"

	"github.com/capstanhq/capstan/internal/agent"
	"github.com/capstanhq/capstan/internal/agent/config"
)

func runAgent(ctx context.Context, args []string) error {
	cfg, err := config.Load(args, os.Getenv, config.DefaultEnvFile)
	if err != nil {
		return err
	}
	return agent.Run(ctx, cfg, agent.Options{})
}
