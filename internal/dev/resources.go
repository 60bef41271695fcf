package dev

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/aws/smithy-go"
)

// The sample's shape.
const (
	instanceVCPUs     = 2
	instanceMemoryMiB = 2048
	webTasks          = 2
)

// specTag on a task definition holds a hash of the request that registered
// it, so a rerun registers a new revision only when the sample changed.
const specTag = "capstan-dev-spec"

// ensureCluster creates the cluster, or re-activates it; CreateCluster is
// idempotent.
func (d *env) ensureCluster(ctx context.Context) error {
	if _, err := d.ecs.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String(d.names.cluster)}); err != nil {
		return fmt.Errorf("create cluster %s: %w", d.names.cluster, err)
	}
	d.out.step("cluster %s", d.names.cluster)
	return nil
}

// ensureResources makes (or keeps, or updates) everything the sample
// consists of. The service comes last: its waiting tasks are what makes
// the server provision an instance.
func (d *env) ensureResources(ctx context.Context, imgs sampleImages) error {
	if err := d.ensureCapacityProvider(ctx); err != nil {
		return err
	}
	daemonTD, err := d.ensureDaemonTaskDefinition(ctx, imgs[sampleTelemetry])
	if err != nil {
		return err
	}
	if err := d.ensureDaemon(ctx, daemonTD); err != nil {
		return err
	}
	webTD, err := d.ensureTaskDefinition(ctx, imgs[sampleWebapp])
	if err != nil {
		return err
	}
	return d.ensureService(ctx, webTD)
}

func (d *env) ensureCapacityProvider(ctx context.Context) error {
	name := d.names.capacityProvider
	out, err := d.ecs.DescribeCapacityProviders(ctx, &ecs.DescribeCapacityProvidersInput{CapacityProviders: []string{name}})
	if err != nil {
		return fmt.Errorf("describe capacity provider %s: %w", name, err)
	}
	if len(out.CapacityProviders) == 1 && out.CapacityProviders[0].Status == types.CapacityProviderStatusActive {
		if c := aws.ToString(out.CapacityProviders[0].Cluster); c != d.names.cluster && !strings.HasSuffix(c, "/"+d.names.cluster) {
			return fmt.Errorf("capacity provider %s belongs to cluster %s, not %s", name, c, d.names.cluster)
		}
		d.out.step("capacity provider %s", name)
		return nil
	}
	_, err = d.ecs.CreateCapacityProvider(ctx, &ecs.CreateCapacityProviderInput{
		Name:    aws.String(name),
		Cluster: aws.String(d.names.cluster),
		ManagedInstancesProvider: &types.CreateManagedInstancesProviderConfiguration{
			// Required as in ECS; Capstan keeps them but has no IAM or VPC to use them with.
			InfrastructureRoleArn: aws.String("arn:aws:iam::000000000000:role/capstan-dev"),
			InstanceLaunchTemplate: &types.InstanceLaunchTemplate{
				Ec2InstanceProfileArn: aws.String("arn:aws:iam::000000000000:instance-profile/capstan-dev"),
				NetworkConfiguration:  &types.ManagedInstancesNetworkConfiguration{Subnets: []string{"local"}},
				// The size of each instance the server provisions.
				InstanceRequirements: &types.InstanceRequirementsRequest{
					VCpuCount: &types.VCpuCountRangeRequest{Min: aws.Int32(instanceVCPUs), Max: aws.Int32(instanceVCPUs)},
					MemoryMiB: &types.MemoryMiBRequest{Min: aws.Int32(instanceMemoryMiB), Max: aws.Int32(instanceMemoryMiB)},
				},
			},
		},
	})
	if err != nil {
		return fmt.Errorf("create capacity provider %s: %w", name, err)
	}
	d.out.step("capacity provider %s created (instances of %d vCPU, %d MiB)", name, instanceVCPUs, instanceMemoryMiB)
	return nil
}

func (d *env) ensureDaemonTaskDefinition(ctx context.Context, image string) (string, error) {
	in := &ecs.RegisterDaemonTaskDefinitionInput{
		Family: aws.String(d.names.daemonFamily),
		Cpu:    aws.String("256"),
		Memory: aws.String("128"),
		ContainerDefinitions: []types.DaemonContainerDefinition{{
			Name:      aws.String("telemetry"),
			Image:     aws.String(image),
			Essential: aws.Bool(true),
			// Exec form: the image has no shell for CMD-SHELL to run in.
			HealthCheck: &types.HealthCheck{
				Command:  []string{"CMD", "/app", "healthcheck"},
				Interval: aws.Int32(5), Timeout: aws.Int32(2), Retries: aws.Int32(3),
			},
		}},
	}
	spec := specHash(in)
	if cur, err := d.ecs.DescribeDaemonTaskDefinition(ctx, &ecs.DescribeDaemonTaskDefinitionInput{DaemonTaskDefinition: in.Family}); err == nil {
		arn := aws.ToString(cur.DaemonTaskDefinition.DaemonTaskDefinitionArn)
		tags, err := d.ecs.ListTagsForResource(ctx, &ecs.ListTagsForResourceInput{ResourceArn: aws.String(arn)})
		if err != nil {
			return "", fmt.Errorf("tags of %s: %w", arn, err)
		}
		if hasSpec(tags.Tags, spec) {
			d.out.step("daemon task definition %s", shortArn(arn))
			return arn, nil
		}
	} else if !isAPIError(err, "ClientException") {
		return "", fmt.Errorf("describe daemon task definition %s: %w", aws.ToString(in.Family), err)
	}
	in.Tags = []types.Tag{{Key: aws.String(specTag), Value: aws.String(spec)}}
	out, err := d.ecs.RegisterDaemonTaskDefinition(ctx, in)
	if err != nil {
		return "", fmt.Errorf("register daemon task definition: %w", err)
	}
	arn := aws.ToString(out.DaemonTaskDefinitionArn)
	d.out.step("daemon task definition %s registered", shortArn(arn))
	return arn, nil
}

func (d *env) ensureTaskDefinition(ctx context.Context, image string) (string, error) {
	in := &ecs.RegisterTaskDefinitionInput{
		Family:      aws.String(d.names.webFamily),
		NetworkMode: types.NetworkModeBridge,
		ContainerDefinitions: []types.ContainerDefinition{{
			Name:      aws.String("web"),
			Image:     aws.String(image),
			Essential: aws.Bool(true),
			Memory:    aws.Int32(64),
			// Host port 0: the engine picks one, so tasks never collide.
			PortMappings: []types.PortMapping{{ContainerPort: aws.Int32(8080), HostPort: aws.Int32(0), Protocol: types.TransportProtocolTcp}},
		}},
	}
	spec := specHash(in)
	cur, err := d.ecs.DescribeTaskDefinition(ctx, &ecs.DescribeTaskDefinitionInput{TaskDefinition: in.Family, Include: []types.TaskDefinitionField{types.TaskDefinitionFieldTags}})
	if err == nil && hasSpec(cur.Tags, spec) {
		arn := aws.ToString(cur.TaskDefinition.TaskDefinitionArn)
		d.out.step("task definition %s", shortArn(arn))
		return arn, nil
	}
	if err != nil && !isAPIError(err, "ClientException") {
		return "", fmt.Errorf("describe task definition %s: %w", aws.ToString(in.Family), err)
	}
	in.Tags = []types.Tag{{Key: aws.String(specTag), Value: aws.String(spec)}}
	out, err := d.ecs.RegisterTaskDefinition(ctx, in)
	if err != nil {
		return "", fmt.Errorf("register task definition: %w", err)
	}
	arn := aws.ToString(out.TaskDefinition.TaskDefinitionArn)
	d.out.step("task definition %s registered", shortArn(arn))
	return arn, nil
}

func (d *env) ensureDaemon(ctx context.Context, taskDef string) error {
	arn, err := d.daemonArn(ctx)
	if err != nil {
		return err
	}
	cps := []string{d.names.capacityProvider}
	cur, err := d.ecs.DescribeDaemon(ctx, &ecs.DescribeDaemonInput{DaemonArn: aws.String(arn)})
	if isAPIError(err, "DaemonNotFoundException") {
		_, err := d.ecs.CreateDaemon(ctx, &ecs.CreateDaemonInput{
			DaemonName: aws.String(d.names.daemon), ClusterArn: aws.String(d.names.cluster),
			DaemonTaskDefinitionArn: aws.String(taskDef), CapacityProviderArns: cps, Critical: aws.Bool(true),
		})
		if err != nil {
			return fmt.Errorf("create daemon %s: %w", d.names.daemon, err)
		}
		d.out.step("daemon %s created (critical: instances wait for it)", d.names.daemon)
		return nil
	}
	if err != nil {
		return fmt.Errorf("describe daemon %s: %w", d.names.daemon, err)
	}
	if s := cur.Daemon.Status; s != types.DaemonStatusActive {
		return fmt.Errorf("daemon %s is %s; run capstan dev again once it is gone, or use --fresh", d.names.daemon, s)
	}
	var revs []string
	for _, r := range cur.Daemon.CurrentRevisions {
		revs = append(revs, aws.ToString(r.Arn))
	}
	same, users := false, ""
	if len(revs) > 0 {
		out, err := d.ecs.DescribeDaemonRevisions(ctx, &ecs.DescribeDaemonRevisionsInput{DaemonRevisionArns: revs})
		if err != nil {
			return fmt.Errorf("describe daemon %s revisions: %w", d.names.daemon, err)
		}
		same = len(out.DaemonRevisions) > 0 && !slices.ContainsFunc(out.DaemonRevisions, func(r types.DaemonRevision) bool {
			return aws.ToString(r.DaemonTaskDefinitionArn) != taskDef
		})
		for _, r := range out.DaemonRevisions {
			td := aws.ToString(r.DaemonTaskDefinitionArn)
			if mine, err := d.daemonDefinitionIsDevs(ctx, td); err != nil {
				return err
			} else if !mine {
				users = td
			}
		}
	}
	if same {
		d.out.step("daemon %s", d.names.daemon)
		return nil
	}
	// The user moved it to a definition of their own: theirs to keep.
	if users != "" {
		d.out.step("daemon %s (kept as you left it: %s)", d.names.daemon, shortArn(users))
		return nil
	}
	if _, err := d.ecs.UpdateDaemon(ctx, &ecs.UpdateDaemonInput{
		DaemonArn: aws.String(arn), DaemonTaskDefinitionArn: aws.String(taskDef), CapacityProviderArns: cps, Critical: aws.Bool(true),
	}); err != nil {
		return fmt.Errorf("update daemon %s: %w", d.names.daemon, err)
	}
	d.out.step("daemon %s updated to %s", d.names.daemon, shortArn(taskDef))
	return nil
}

// daemonArn is the daemon's ARN, which sits next to its cluster's.
func (d *env) daemonArn(ctx context.Context) (string, error) {
	out, err := d.ecs.DescribeClusters(ctx, &ecs.DescribeClustersInput{Clusters: []string{d.names.cluster}})
	if err != nil || len(out.Clusters) != 1 {
		return "", fmt.Errorf("describe cluster %s: %v", d.names.cluster, err)
	}
	cl := aws.ToString(out.Clusters[0].ClusterArn)
	prefix, _, ok := strings.Cut(cl, ":cluster/")
	if !ok {
		return "", fmt.Errorf("unexpected cluster ARN %q", cl)
	}
	return prefix + ":daemon/" + d.names.cluster + "/" + d.names.daemon, nil
}

func (d *env) ensureService(ctx context.Context, taskDef string) error {
	name := d.names.service
	out, err := d.ecs.DescribeServices(ctx, &ecs.DescribeServicesInput{Cluster: aws.String(d.names.cluster), Services: []string{name}})
	if err != nil {
		return fmt.Errorf("describe service %s: %w", name, err)
	}
	if len(out.Services) == 1 && aws.ToString(out.Services[0].Status) == "ACTIVE" {
		// What the user changed stays: the task count always, the task
		// definition unless it is an earlier one of dev's own (the sample
		// changed since).
		s := out.Services[0]
		cur := aws.ToString(s.TaskDefinition)
		if cur == taskDef {
			d.out.step("service %s (%d tasks)", name, s.DesiredCount)
			return nil
		}
		mine, err := d.definitionIsDevs(ctx, cur)
		if err != nil {
			return err
		}
		if !mine {
			d.out.step("service %s (kept as you left it: %s, %d tasks)", name, shortArn(cur), s.DesiredCount)
			return nil
		}
		if _, err := d.ecs.UpdateService(ctx, &ecs.UpdateServiceInput{
			Cluster: aws.String(d.names.cluster), Service: aws.String(name), TaskDefinition: aws.String(taskDef),
		}); err != nil {
			return fmt.Errorf("update service %s: %w", name, err)
		}
		d.out.step("service %s updated to %s (%d tasks)", name, shortArn(taskDef), s.DesiredCount)
		return nil
	}
	if _, err := d.ecs.CreateService(ctx, &ecs.CreateServiceInput{
		Cluster: aws.String(d.names.cluster), ServiceName: aws.String(name),
		TaskDefinition: aws.String(taskDef), DesiredCount: aws.Int32(webTasks),
		CapacityProviderStrategy: []types.CapacityProviderStrategyItem{{CapacityProvider: aws.String(d.names.capacityProvider), Weight: 1}},
	}); err != nil {
		return fmt.Errorf("create service %s: %w", name, err)
	}
	d.out.step("service %s created (%d tasks on %s)", name, webTasks, d.names.capacityProvider)
	return nil
}

// definitionIsDevs reports whether dev registered task definition arn.
func (d *env) definitionIsDevs(ctx context.Context, arn string) (bool, error) {
	out, err := d.ecs.DescribeTaskDefinition(ctx, &ecs.DescribeTaskDefinitionInput{TaskDefinition: aws.String(arn), Include: []types.TaskDefinitionField{types.TaskDefinitionFieldTags}})
	if err != nil {
		return false, fmt.Errorf("describe task definition %s: %w", arn, err)
	}
	return hasTag(out.Tags, specTag), nil
}

// daemonDefinitionIsDevs reports whether dev registered daemon task
// definition arn.
func (d *env) daemonDefinitionIsDevs(ctx context.Context, arn string) (bool, error) {
	out, err := d.ecs.ListTagsForResource(ctx, &ecs.ListTagsForResourceInput{ResourceArn: aws.String(arn)})
	if err != nil {
		return false, fmt.Errorf("tags of %s: %w", arn, err)
	}
	return hasTag(out.Tags, specTag), nil
}

func hasTag(tags []types.Tag, key string) bool {
	return slices.ContainsFunc(tags, func(t types.Tag) bool { return aws.ToString(t.Key) == key })
}

// instances returns the cluster's instances that are not deregistered.
func (d *env) instances(ctx context.Context) ([]types.ContainerInstance, error) {
	var arns []string
	in := &ecs.ListContainerInstancesInput{Cluster: aws.String(d.names.cluster)}
	for {
		out, err := d.ecs.ListContainerInstances(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("list instances: %w", err)
		}
		arns = append(arns, out.ContainerInstanceArns...)
		if out.NextToken == nil {
			break
		}
		in.NextToken = out.NextToken
	}
	var cis []types.ContainerInstance
	for chunk := range slices.Chunk(arns, 100) {
		out, err := d.ecs.DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{Cluster: aws.String(d.names.cluster), ContainerInstances: chunk})
		if err != nil {
			return nil, fmt.Errorf("describe instances: %w", err)
		}
		cis = append(cis, out.ContainerInstances...)
	}
	return cis, nil
}

func specHash(v any) string {
	b, _ := json.Marshal(v)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

func hasSpec(tags []types.Tag, spec string) bool {
	return slices.ContainsFunc(tags, func(t types.Tag) bool {
		return aws.ToString(t.Key) == specTag && aws.ToString(t.Value) == spec
	})
}

func isAPIError(err error, code string) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == code
}

// shortArn is the part of an ARN after the resource type.
func shortArn(arn string) string {
	if _, rest, ok := strings.Cut(arn, ":"+resourceType(arn)+"/"); ok {
		return rest
	}
	return arn
}

func resourceType(arn string) string {
	parts := strings.SplitN(arn, ":", 6)
	if len(parts) < 6 {
		return ""
	}
	t, _, _ := strings.Cut(parts[5], "/")
	return t
}
