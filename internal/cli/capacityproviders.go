package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
)

// Placeholders for members the ECS model requires but Capstan ignores: it
// provisions instances itself, with no IAM or VPC involved.
const (
	placeholderRoleArn    = "arn:aws:iam::000000000000:role/capstan-unused"
	placeholderProfileArn = "arn:aws:iam::000000000000:instance-profile/capstan-unused"
	placeholderSubnet     = "subnet-capstan-unused"
)

const capacityProviderDetails = `
A capacity provider of type MANAGED_INSTANCES belongs to one cluster and
supplies its instances; --vcpu and --memory-mib size each instance.

The ECS model requires an infrastructure role, an instance profile and subnets.
Capstan ignores them; when not given, create sends these placeholders:
  infrastructureRoleArn                           ` + placeholderRoleArn + `
  instanceLaunchTemplate.ec2InstanceProfileArn    ` + placeholderProfileArn + `
  instanceLaunchTemplate.networkConfiguration     {"subnets": ["` + placeholderSubnet + `"]}

-f FILE takes the request JSON (as for aws ecs ... --cli-input-json; "-"
reads standard input). Flags given alongside override the file.`

func capacityProviderNoun() *noun {
	return &noun{
		name:    "capacity-provider",
		summary: "Capacity providers supply a cluster's managed instances.",
		verbs: []*verb{
			{name: "create", args: "[NAME] --cluster C [flags] | -f FILE", summary: "Create a managed-instances capacity provider.", details: capacityProviderDetails, bind: capacityProviderCreate},
			{name: "describe", args: "[NAME|ARN...] [--cluster C]", summary: "Show capacity providers in detail (all when none is named).", bind: capacityProviderDescribe},
			{name: "list", args: "[--cluster C]", summary: "List capacity providers.", bind: capacityProviderList},
			{name: "update", args: "NAME --cluster C [flags] | -f FILE", summary: "Change a capacity provider; settings not given keep their current values.", details: `
Without -f, update reads the provider and changes only what the flags say.
With -f FILE (the UpdateCapacityProvider request), the file's
managedInstancesProvider replaces the current one; the infrastructure role and
launch template are filled in from the current provider when the file omits them.`, bind: capacityProviderUpdate},
			{name: "delete", args: "NAME|ARN [--cluster C]", summary: "Delete a capacity provider.", bind: capacityProviderDelete},
		},
	}
}

// instanceFlags are the settings create and update share.
type instanceFlags struct {
	vcpu, memory, autoRepair, role, profile, propagate string
	scaleInAfter                                       int
	subnets, securityGroups                            listFlag
}

func (f *instanceFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.vcpu, "vcpu", "", "vCPUs per instance, `MIN[-MAX]`")
	fs.StringVar(&f.memory, "memory-mib", "", "memory per instance in MiB, `MIN[-MAX]`")
	fs.IntVar(&f.scaleInAfter, "scale-in-after", 0, "`seconds` an idle instance waits before it is scaled in (-1: never)")
	fs.StringVar(&f.autoRepair, "auto-repair", "", "replace impaired instances: `enabled|disabled`")
	fs.StringVar(&f.role, "infrastructure-role-arn", "", "infrastructure role `ARN` (ignored by Capstan)")
	fs.StringVar(&f.profile, "instance-profile-arn", "", "EC2 instance profile `ARN` (ignored by Capstan)")
	fs.Var(&f.subnets, "subnet", "subnet `ID` (repeatable; ignored by Capstan)")
	fs.Var(&f.securityGroups, "security-group", "security group `ID` (repeatable; ignored by Capstan)")
	fs.StringVar(&f.propagate, "propagate-tags", "", "tag instances from the provider: `CAPACITY_PROVIDER|NONE`")
}

// apply writes the flags the user gave onto a provider configuration.
func (f *instanceFlags) apply(s *session, mip *types.CreateManagedInstancesProviderConfiguration) error {
	lt := mip.InstanceLaunchTemplate
	if lt == nil {
		lt = &types.InstanceLaunchTemplate{}
		mip.InstanceLaunchTemplate = lt
	}
	if err := f.applyRequirements(s, &lt.InstanceRequirements); err != nil {
		return err
	}
	if s.set("scale-in-after") {
		mip.InfrastructureOptimization = &types.InfrastructureOptimization{ScaleInAfter: aws.Int32(int32(f.scaleInAfter))}
	}
	if s.set("auto-repair") {
		v, err := upperEnum("auto-repair", f.autoRepair, "ENABLED", "DISABLED")
		if err != nil {
			return err
		}
		mip.AutoRepairConfiguration = &types.AutoRepairConfiguration{ActionsStatus: types.AutoRepairActionsStatus(v)}
	}
	if s.set("propagate-tags") {
		v, err := upperEnum("propagate-tags", f.propagate, "CAPACITY_PROVIDER", "NONE")
		if err != nil {
			return err
		}
		mip.PropagateTags = types.PropagateMITags(v)
	}
	if f.role != "" {
		mip.InfrastructureRoleArn = aws.String(f.role)
	}
	if f.profile != "" {
		lt.Ec2InstanceProfileArn = aws.String(f.profile)
	}
	if len(f.subnets) > 0 || len(f.securityGroups) > 0 {
		if lt.NetworkConfiguration == nil {
			lt.NetworkConfiguration = &types.ManagedInstancesNetworkConfiguration{}
		}
		if len(f.subnets) > 0 {
			lt.NetworkConfiguration.Subnets = f.subnets
		}
		if len(f.securityGroups) > 0 {
			lt.NetworkConfiguration.SecurityGroups = f.securityGroups
		}
	}
	return nil
}

func (f *instanceFlags) applyRequirements(s *session, req **types.InstanceRequirementsRequest) error {
	if s.set("vcpu") || s.set("memory-mib") {
		if *req == nil {
			*req = &types.InstanceRequirementsRequest{}
		}
	}
	if s.set("vcpu") {
		lo, hi, err := parseRange("vcpu", f.vcpu)
		if err != nil {
			return err
		}
		(*req).VCpuCount = &types.VCpuCountRangeRequest{Min: aws.Int32(lo), Max: hi}
	}
	if s.set("memory-mib") {
		lo, hi, err := parseRange("memory-mib", f.memory)
		if err != nil {
			return err
		}
		(*req).MemoryMiB = &types.MemoryMiBRequest{Min: aws.Int32(lo), Max: hi}
	}
	if r := *req; r != nil && (r.VCpuCount == nil || r.MemoryMiB == nil) {
		return usageErrorf("instance requirements need both --vcpu and --memory-mib")
	}
	return nil
}

func capacityProviderCreate(fs *flag.FlagSet) action {
	var name, cluster, file string
	var tags tagFlag
	var inst instanceFlags
	fs.StringVar(&name, "name", "", "capacity provider `name` (or give it as the argument)")
	fs.StringVar(&cluster, "cluster", "", "`cluster` the provider belongs to (required)")
	fs.StringVar(&file, "f", "", "CreateCapacityProvider request `file` (JSON)")
	fs.Var(&tags, "tag", "resource tag `KEY=VALUE` (repeatable)")
	inst.register(fs)
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 0, 1, ""); err != nil {
			return err
		}
		in := &ecs.CreateCapacityProviderInput{}
		if file != "" {
			if err := readInputFile(file, s.stdin, in); err != nil {
				return err
			}
		}
		if len(args) == 1 {
			if name != "" && name != args[0] {
				return usageErrorf("name given twice: %q and --name %q", args[0], name)
			}
			name = args[0]
		}
		if name != "" {
			in.Name = aws.String(name)
		}
		if cluster != "" {
			in.Cluster = aws.String(cluster)
		}
		if aws.ToString(in.Name) == "" {
			return usageErrorf("missing capacity provider name")
		}
		if aws.ToString(in.Cluster) == "" {
			return usageErrorf("missing --cluster: a managed-instances capacity provider belongs to one cluster")
		}
		in.Tags = append(in.Tags, tags...)
		if in.AutoScalingGroupProvider == nil {
			if in.ManagedInstancesProvider == nil {
				in.ManagedInstancesProvider = &types.CreateManagedInstancesProviderConfiguration{}
			}
			mip := in.ManagedInstancesProvider
			if err := inst.apply(s, mip); err != nil {
				return err
			}
			fillPlaceholders(mip)
		}
		c, err := s.client(ctx)
		if err != nil {
			return err
		}
		out, err := c.CreateCapacityProvider(ctx, in)
		if err != nil {
			return err
		}
		return s.show(out, func(w io.Writer) { capacityProviderTable(w, []types.CapacityProvider{*out.CapacityProvider}) })
	}
}

func fillPlaceholders(mip *types.CreateManagedInstancesProviderConfiguration) {
	if mip.InfrastructureRoleArn == nil {
		mip.InfrastructureRoleArn = aws.String(placeholderRoleArn)
	}
	lt := mip.InstanceLaunchTemplate
	if lt.Ec2InstanceProfileArn == nil {
		lt.Ec2InstanceProfileArn = aws.String(placeholderProfileArn)
	}
	if lt.NetworkConfiguration == nil {
		lt.NetworkConfiguration = &types.ManagedInstancesNetworkConfiguration{}
	}
	if len(lt.NetworkConfiguration.Subnets) == 0 {
		lt.NetworkConfiguration.Subnets = []string{placeholderSubnet}
	}
}

func capacityProviderUpdate(fs *flag.FlagSet) action {
	var cluster, file string
	var inst instanceFlags
	fs.StringVar(&cluster, "cluster", "", "`cluster` the provider belongs to")
	fs.StringVar(&file, "f", "", "UpdateCapacityProvider request `file` (JSON)")
	inst.register(fs)
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 0, 1, ""); err != nil {
			return err
		}
		in := &ecs.UpdateCapacityProviderInput{}
		if file != "" {
			if err := readInputFile(file, s.stdin, in); err != nil {
				return err
			}
		}
		if len(args) == 1 {
			in.Name = aws.String(args[0])
		}
		if cluster != "" {
			in.Cluster = aws.String(cluster)
		}
		if aws.ToString(in.Name) == "" {
			return usageErrorf("missing capacity provider NAME")
		}
		c, err := s.client(ctx)
		if err != nil {
			return err
		}
		cur, err := describeCapacityProvider(ctx, c, aws.ToString(in.Name), aws.ToString(in.Cluster))
		if err != nil {
			return err
		}
		if in.Cluster == nil {
			in.Cluster = cur.Cluster
		}
		if in.AutoScalingGroupProvider == nil && cur.ManagedInstancesProvider != nil {
			// Edit the current settings through the create shape, whose
			// launch template is a superset of the update one.
			now := cur.ManagedInstancesProvider
			mip := &types.CreateManagedInstancesProviderConfiguration{
				InfrastructureRoleArn:      now.InfrastructureRoleArn,
				InstanceLaunchTemplate:     now.InstanceLaunchTemplate,
				AutoRepairConfiguration:    now.AutoRepairConfiguration,
				InfrastructureOptimization: now.InfrastructureOptimization,
				PropagateTags:              now.PropagateTags,
			}
			if u := in.ManagedInstancesProvider; u != nil {
				mip = mergeUpdate(mip, u)
			}
			if err := inst.apply(s, mip); err != nil {
				return err
			}
			fillPlaceholders(mip)
			in.ManagedInstancesProvider = toUpdate(mip)
		}
		out, err := c.UpdateCapacityProvider(ctx, in)
		if err != nil {
			return err
		}
		return s.show(out, func(w io.Writer) { capacityProviderTable(w, []types.CapacityProvider{*out.CapacityProvider}) })
	}
}

// mergeUpdate takes the file's configuration and fills the two members the
// model requires from the current provider when the file leaves them out.
func mergeUpdate(cur *types.CreateManagedInstancesProviderConfiguration, u *types.UpdateManagedInstancesProviderConfiguration) *types.CreateManagedInstancesProviderConfiguration {
	out := &types.CreateManagedInstancesProviderConfiguration{
		InfrastructureRoleArn:      u.InfrastructureRoleArn,
		AutoRepairConfiguration:    u.AutoRepairConfiguration,
		InfrastructureOptimization: u.InfrastructureOptimization,
		PropagateTags:              u.PropagateTags,
		InstanceLaunchTemplate:     cur.InstanceLaunchTemplate,
	}
	if out.InfrastructureRoleArn == nil {
		out.InfrastructureRoleArn = cur.InfrastructureRoleArn
	}
	if lt := u.InstanceLaunchTemplate; lt != nil {
		prev := cur.InstanceLaunchTemplate
		if prev == nil {
			prev = &types.InstanceLaunchTemplate{}
		}
		out.InstanceLaunchTemplate = &types.InstanceLaunchTemplate{
			CapacityReservations:            lt.CapacityReservations,
			Ec2InstanceProfileArn:           lt.Ec2InstanceProfileArn,
			InstanceMetadataTagsPropagation: lt.InstanceMetadataTagsPropagation,
			InstanceRequirements:            lt.InstanceRequirements,
			LocalStorageConfiguration:       lt.LocalStorageConfiguration,
			Monitoring:                      lt.Monitoring,
			NetworkConfiguration:            lt.NetworkConfiguration,
			StorageConfiguration:            lt.StorageConfiguration,
		}
		if lt.Ec2InstanceProfileArn == nil {
			out.InstanceLaunchTemplate.Ec2InstanceProfileArn = prev.Ec2InstanceProfileArn
		}
		if lt.NetworkConfiguration == nil {
			out.InstanceLaunchTemplate.NetworkConfiguration = prev.NetworkConfiguration
		}
	}
	return out
}

func toUpdate(m *types.CreateManagedInstancesProviderConfiguration) *types.UpdateManagedInstancesProviderConfiguration {
	lt := m.InstanceLaunchTemplate
	return &types.UpdateManagedInstancesProviderConfiguration{
		InfrastructureRoleArn:      m.InfrastructureRoleArn,
		AutoRepairConfiguration:    m.AutoRepairConfiguration,
		InfrastructureOptimization: m.InfrastructureOptimization,
		PropagateTags:              m.PropagateTags,
		InstanceLaunchTemplate: &types.InstanceLaunchTemplateUpdate{
			CapacityReservations:            lt.CapacityReservations,
			Ec2InstanceProfileArn:           lt.Ec2InstanceProfileArn,
			InstanceMetadataTagsPropagation: lt.InstanceMetadataTagsPropagation,
			InstanceRequirements:            lt.InstanceRequirements,
			LocalStorageConfiguration:       lt.LocalStorageConfiguration,
			Monitoring:                      lt.Monitoring,
			NetworkConfiguration:            lt.NetworkConfiguration,
			StorageConfiguration:            lt.StorageConfiguration,
		},
	}
}

func describeCapacityProvider(ctx context.Context, c *ecs.Client, name, cluster string) (*types.CapacityProvider, error) {
	in := &ecs.DescribeCapacityProvidersInput{CapacityProviders: []string{name}}
	if cluster != "" {
		in.Cluster = aws.String(cluster)
	}
	out, err := c.DescribeCapacityProviders(ctx, in)
	if err != nil {
		return nil, err
	}
	if len(out.CapacityProviders) == 0 {
		if err := failuresError("capacity provider", out.Failures); err != nil {
			return nil, err
		}
		return nil, &apiError{code: "MISSING", msg: "capacity provider " + name}
	}
	return &out.CapacityProviders[0], nil
}

// allCapacityProviders pages through DescribeCapacityProviders.
func allCapacityProviders(ctx context.Context, c *ecs.Client, in *ecs.DescribeCapacityProvidersInput) (*ecs.DescribeCapacityProvidersOutput, error) {
	all := &ecs.DescribeCapacityProvidersOutput{CapacityProviders: []types.CapacityProvider{}}
	for {
		out, err := c.DescribeCapacityProviders(ctx, in)
		if err != nil {
			return nil, err
		}
		all.CapacityProviders = append(all.CapacityProviders, out.CapacityProviders...)
		all.Failures = append(all.Failures, out.Failures...)
		if aws.ToString(out.NextToken) == "" {
			return all, nil
		}
		in.NextToken = out.NextToken
	}
}

func capacityProviderDescribe(fs *flag.FlagSet) action {
	var cluster string
	fs.StringVar(&cluster, "cluster", "", "only providers of `cluster`")
	return func(ctx context.Context, s *session, args []string) error {
		c, err := s.client(ctx)
		if err != nil {
			return err
		}
		in := &ecs.DescribeCapacityProvidersInput{CapacityProviders: args, Include: []types.CapacityProviderField{types.CapacityProviderFieldTags}}
		if cluster != "" {
			in.Cluster = aws.String(cluster)
		}
		out, err := allCapacityProviders(ctx, c, in)
		if err != nil {
			return err
		}
		err = s.show(out, func(w io.Writer) {
			for i, cp := range out.CapacityProviders {
				if i > 0 {
					fmt.Fprintln(w)
				}
				capacityProviderFields(w, cp)
			}
		})
		return errors.Join(err, failuresError("capacity provider", out.Failures))
	}
}

func capacityProviderList(fs *flag.FlagSet) action {
	var cluster string
	fs.StringVar(&cluster, "cluster", "", "only providers of `cluster`")
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 0, 0, ""); err != nil {
			return err
		}
		c, err := s.client(ctx)
		if err != nil {
			return err
		}
		in := &ecs.DescribeCapacityProvidersInput{}
		if cluster != "" {
			in.Cluster = aws.String(cluster)
		}
		out, err := allCapacityProviders(ctx, c, in)
		if err != nil {
			return err
		}
		return s.show(out, func(w io.Writer) { capacityProviderTable(w, out.CapacityProviders) })
	}
}

func capacityProviderDelete(fs *flag.FlagSet) action {
	var cluster string
	fs.StringVar(&cluster, "cluster", "", "`cluster` the provider belongs to")
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 1, 1, "capacity provider NAME or ARN"); err != nil {
			return err
		}
		c, err := s.client(ctx)
		if err != nil {
			return err
		}
		in := &ecs.DeleteCapacityProviderInput{CapacityProvider: aws.String(args[0])}
		if cluster != "" {
			in.Cluster = aws.String(cluster)
		}
		out, err := c.DeleteCapacityProvider(ctx, in)
		if err != nil {
			return err
		}
		return s.show(out, func(w io.Writer) { capacityProviderTable(w, []types.CapacityProvider{*out.CapacityProvider}) })
	}
}

func capacityProviderTable(w io.Writer, cps []types.CapacityProvider) {
	tw := newTable(w, "NAME", "CLUSTER", "TYPE", "STATUS", "UPDATE STATUS", "VCPU", "MEMORY MIB", "SCALE IN AFTER", "AUTO REPAIR")
	for _, cp := range cps {
		v := instanceView(cp.ManagedInstancesProvider)
		row(tw, str(cp.Name), str(cp.Cluster), string(cp.Type), string(cp.Status), string(cp.UpdateStatus),
			v.vcpu, v.memory, v.scaleIn, v.autoRepair)
	}
	tw.Flush()
}

func capacityProviderFields(w io.Writer, cp types.CapacityProvider) {
	f := newFields(w)
	f.add("Name", str(cp.Name))
	f.add("ARN", str(cp.CapacityProviderArn))
	f.add("Cluster", str(cp.Cluster))
	f.add("Type", string(cp.Type))
	f.add("Status", string(cp.Status))
	upd := string(cp.UpdateStatus)
	if r := str(cp.UpdateStatusReason); r != "" {
		upd += " (" + r + ")"
	}
	f.add("Update status", upd)
	if m := cp.ManagedInstancesProvider; m != nil {
		v := instanceView(m)
		f.add("vCPU", v.vcpu)
		f.add("Memory (MiB)", v.memory)
		f.add("Scale in after", v.scaleIn)
		f.add("Auto repair", v.autoRepair)
		f.add("Propagate tags", string(m.PropagateTags))
		f.add("Infrastructure role", str(m.InfrastructureRoleArn))
		if lt := m.InstanceLaunchTemplate; lt != nil {
			f.add("Instance profile", str(lt.Ec2InstanceProfileArn))
			if n := lt.NetworkConfiguration; n != nil {
				f.add("Subnets", strings.Join(n.Subnets, ", "))
				f.add("Security groups", strings.Join(n.SecurityGroups, ", "))
			}
			if st := lt.StorageConfiguration; st != nil {
				f.add("Storage (GiB)", i32(st.StorageSizeGiB))
			}
		}
	}
	f.add("Tags", tagText(cp.Tags, tagKV))
	f.flush()
}

type instanceSummary struct{ vcpu, memory, scaleIn, autoRepair string }

func instanceView(m *types.ManagedInstancesProvider) instanceSummary {
	var v instanceSummary
	if m == nil {
		return v
	}
	if lt := m.InstanceLaunchTemplate; lt != nil && lt.InstanceRequirements != nil {
		r := lt.InstanceRequirements
		if r.VCpuCount != nil {
			v.vcpu = rangeText(r.VCpuCount.Min, r.VCpuCount.Max)
		}
		if r.MemoryMiB != nil {
			v.memory = rangeText(r.MemoryMiB.Min, r.MemoryMiB.Max)
		}
	}
	if o := m.InfrastructureOptimization; o != nil && o.ScaleInAfter != nil {
		switch n := *o.ScaleInAfter; n {
		case -1:
			v.scaleIn = "never"
		default:
			v.scaleIn = strconv.Itoa(int(n)) + "s"
		}
	}
	if a := m.AutoRepairConfiguration; a != nil {
		v.autoRepair = string(a.ActionsStatus)
	}
	return v
}

func rangeText(lo, hi *int32) string {
	switch {
	case lo == nil:
		return ""
	case hi == nil:
		return i32(lo) + "+"
	case *hi == *lo:
		return i32(lo)
	}
	return i32(lo) + "-" + i32(hi)
}
