package main

import (
	"context"
	"flag"
	"os"

	"github.com/capstanhq/capstan/internal/dev"
)

func runDev(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "urls" {
		fs := flag.NewFlagSet("capstan dev urls", flag.ContinueOnError)
		dir := fs.String("data-dir", dev.DefaultDataDir(), "data directory of the running capstan dev")
		if err := parseFlags(fs, args[1:]); err != nil {
			return err
		}
		return dev.URLs(ctx, *dir, os.Stdout)
	}
	fs := flag.NewFlagSet("capstan dev", flag.ContinueOnError)
	cfg := dev.Config{Out: os.Stdout}
	fs.StringVar(&cfg.DataDir, "data-dir", dev.DefaultDataDir(), "directory for the state kept between runs")
	fs.StringVar(&cfg.Listen, "listen", dev.DefaultListen, "HOST:PORT of the ECS API")
	fs.BoolVar(&cfg.Fresh, "fresh", false, "wipe the data directory first")
	fs.StringVar(&cfg.Cluster, "cluster", dev.DefaultCluster, "name of the cluster dev creates and runs the sample in")
	fs.Usage = func() {
		fs.Output().Write([]byte("Usage: capstan dev [flags]        run Capstan and a sample on this machine\n       capstan dev urls [--data-dir D]  print what the running one runs, and where\n\n"))
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	return dev.Run(ctx, cfg)
}
