package main

import (
	"context"
	"flag"
	"os"

	"github.com/capstanhq/capstan/internal/dev"
)

func runDev(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("capstan dev", flag.ContinueOnError)
	cfg := dev.Config{Out: os.Stdout}
	fs.StringVar(&cfg.DataDir, "data-dir", dev.DefaultDataDir(), "directory for the state kept between runs")
	fs.StringVar(&cfg.Listen, "listen", dev.DefaultListen, "HOST:PORT of the ECS API")
	fs.BoolVar(&cfg.Fresh, "fresh", false, "wipe the data directory first")
	fs.StringVar(&cfg.Cluster, "cluster", dev.DefaultCluster, "name of the cluster dev creates and runs the sample in")
	if err := fs.Parse(args); err != nil {
		return err
	}
	return dev.Run(ctx, cfg)
}
