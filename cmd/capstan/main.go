// Command capstan is the Capstan control plane, instance agent and client,
// in one binary whose first argument picks the role. From the source tree:
//
//	go run ./cmd/capstan dev [--fresh] [--data-dir DIR] [--listen 127.0.0.1:8080]
//	go run ./cmd/capstan dev urls [--data-dir DIR]
//	go run ./cmd/capstan server [--data-dir DIR] [--listen 127.0.0.1:8080] [--etcd-endpoints URL,...]
//	go run ./cmd/capstan agent [--endpoint URL] [--cluster NAME] [--config FILE]
//	go run ./cmd/capstan etcd [--data-dir DIR] [--listen 127.0.0.1:2379]
//	go run ./cmd/capstan cluster list [--endpoint http://127.0.0.1:8080]
//
// dev runs all of it on this machine with a sample daemon and service. The
// server prints the administrator credential it creates on its first start;
// an agent takes its own from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY
// (`capstan agent-credential create` mints one). `capstan -h` lists every
// command; `capstan server -h` or `capstan <noun> -h` shows one's flags.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/capstanhq/capstan/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "server":
		err = runServer(ctx, os.Args[2:])
	case "agent":
		err = runAgent(ctx, os.Args[2:])
	case "dev":
		err = runDev(ctx, os.Args[2:])
	case "etcd":
		err = runEtcd(ctx, os.Args[2:])
	case "pause":
		err = runPause(ctx)
	case "-h", "--help", "help":
		fmt.Print(usage)
		return
	default:
		os.Exit(cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr))
	}
	if code := exitFor(err); code != 0 {
		os.Exit(code)
	}
}

const usage = `capstan: managed daemons on your own container fleet, through the ECS API.

Usage:
  capstan server [flags]        run the control plane (ECS API on etcd)
  capstan agent [flags]         run the instance agent (tasks on Docker)
  capstan dev [flags]           run everything on this machine, with a sample
                                daemon and service (from the source tree);
                                'capstan dev urls' prints what it runs now
  capstan etcd [flags]          run an etcd member with the embedded one's
                                settings, for servers with --etcd-endpoints;
                                alone or one of a cluster (--initial-cluster);
                                'capstan etcd ca|member|snapshot' manage it
  capstan <noun> <verb> [flags] manage resources (cluster, service, task, instance,
                                daemon, capacity-provider, task-definition,
                                daemon-task-definition, agent-credential, user,
                                group, policy)
  capstan events [flags]        the cluster's events (--follow to keep reading)
  capstan logs TASK [flags]     a task's output (--follow; --service, --daemon)
  capstan exec TASK -- CMD      run a command in a task's container (-it)

Run 'capstan server -h' or 'capstan <noun> -h' for details.
`
