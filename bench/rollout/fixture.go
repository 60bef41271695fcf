package main

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/bench/internal/benchkit"
	"github.com/capstanhq/capstan/internal/coverage"
)

// bench is the running fixture: a local fleet, and what the scenarios
// keep of it.
type bench struct {
	*benchkit.Fleet
	o options
	// histories are the clusters' records as read, for -events.
	histories []*coverage.History
}

// daemonTaskDefinition registers a revision of the daemon task definition
// family: one container running Loop (32 MiB), with VERSION=version in its
// environment so that each revision differs from the one before.
func (b *bench) daemonTaskDefinition(ctx context.Context, family, version string) (string, error) {
	td, err := b.C.RegisterDaemonTaskDefinition(ctx, &ecs.RegisterDaemonTaskDefinitionInput{Family: aws.String(family),
		ContainerDefinitions: []types.DaemonContainerDefinition{{Name: aws.String(family), Image: aws.String(b.Image), Memory: aws.Int32(32),
			Command: benchkit.Loop, Environment: []types.KeyValuePair{{Name: aws.String("VERSION"), Value: aws.String(version)}}}}})
	if err != nil {
		return "", fmt.Errorf("register daemon task definition %s: %w", family, err)
	}
	return aws.ToString(td.DaemonTaskDefinitionArn), nil
}

// daemon creates a critical daemon of task definition td on one capacity
// provider.
func (b *bench) daemon(ctx context.Context, cluster, name, td, cpName, cpArn string) (coverage.Daemon, error) {
	created := time.Now()
	out, err := b.C.CreateDaemon(ctx, &ecs.CreateDaemonInput{DaemonName: aws.String(name), ClusterArn: aws.String(cluster),
		DaemonTaskDefinitionArn: aws.String(td), CapacityProviderArns: []string{cpArn}, Critical: aws.Bool(true)})
	if err != nil {
		return coverage.Daemon{}, fmt.Errorf("create daemon %s: %w", name, err)
	}
	return coverage.Daemon{Name: name, Arn: aws.ToString(out.DaemonArn), Critical: true, CPs: []string{cpName}, Created: created}, nil
}
