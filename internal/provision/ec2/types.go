package ec2

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/capstanhq/capstan/internal/api/shapes"
)

// needs is what one launch asks of an instance type: the launch
// template's requirements, with the vCPU and memory floors raised to the
// instance size the controller chose.
type needs struct {
	req          *shapes.InstanceRequirementsRequest
	minVCPU      int
	minMemoryMiB int
	arch         string
}

// catalog reads every instance type the region offers, once: moto does not
// serve GetInstanceTypesFromInstanceRequirements, and filtering the
// catalog here gives the same choice against real EC2.
func (p *Provisioner) catalog(ctx context.Context) ([]types.InstanceTypeInfo, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.types != nil {
		return p.types, nil
	}
	var all []types.InstanceTypeInfo
	pages := ec2.NewDescribeInstanceTypesPaginator(p.cfg.Client, &ec2.DescribeInstanceTypesInput{})
	for pages.HasMorePages() {
		out, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("describe instance types: %w", err)
		}
		all = append(all, out.InstanceTypes...)
	}
	p.types = all
	return all, nil
}

// manufacturers maps ECS's cpuManufacturers values to what
// DescribeInstanceTypes reports.
var manufacturers = map[string]string{"intel": "intel", "amd": "amd", "amazon-web-services": "aws", "apple": "apple"}

// matches reports whether t meets n.
func matches(t types.InstanceTypeInfo, n needs) bool {
	if t.VCpuInfo == nil || t.MemoryInfo == nil || t.ProcessorInfo == nil {
		return false
	}
	vcpu, mem := int(aws.ToInt32(t.VCpuInfo.DefaultVCpus)), int(aws.ToInt64(t.MemoryInfo.SizeInMiB))
	if vcpu < n.minVCPU || mem < n.minMemoryMiB {
		return false
	}
	if n.arch != "" && !slices.Contains(t.ProcessorInfo.SupportedArchitectures, types.ArchitectureType(n.arch)) {
		return false
	}
	name := string(t.InstanceType)
	r := n.req
	if r == nil {
		r = &shapes.InstanceRequirementsRequest{}
	}
	if r.VCpuCount != nil && r.VCpuCount.Max != nil && vcpu > int(*r.VCpuCount.Max) {
		return false
	}
	if r.MemoryMiB != nil && r.MemoryMiB.Max != nil && mem > int(*r.MemoryMiB.Max) {
		return false
	}
	if len(r.CpuManufacturers) > 0 {
		got := strings.ToLower(aws.ToString(t.ProcessorInfo.Manufacturer))
		if !slices.ContainsFunc(r.CpuManufacturers, func(m string) bool { return manufacturers[m] == got }) {
			return false
		}
	}
	if len(r.AllowedInstanceTypes) > 0 && !matchAny(r.AllowedInstanceTypes, name) {
		return false
	}
	if matchAny(r.ExcludedInstanceTypes, name) {
		return false
	}
	burstable := aws.ToBool(t.BurstablePerformanceSupported)
	// EC2's default for attribute-based selection leaves burstable and
	// bare-metal types out.
	switch r.BurstablePerformance {
	case "included":
	case "required":
		if !burstable {
			return false
		}
	default:
		if burstable {
			return false
		}
	}
	bare := aws.ToBool(t.BareMetal)
	switch r.BareMetal {
	case "included":
	case "required":
		if !bare {
			return false
		}
	default:
		if bare {
			return false
		}
	}
	if len(r.InstanceGenerations) > 0 {
		gen := "previous"
		if aws.ToBool(t.CurrentGeneration) {
			gen = "current"
		}
		if !slices.Contains(r.InstanceGenerations, gen) {
			return false
		}
	}
	return true
}

// matchAny matches name against patterns with EC2's '*' wildcard.
func matchAny(patterns []string, name string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}

// choose returns the instance types meeting n, smallest first (fewest
// vCPUs, then least memory): the controller sized the instance, and
// anything larger is paid for and unused.
func choose(all []types.InstanceTypeInfo, n needs) []string {
	var fit []types.InstanceTypeInfo
	for _, t := range all {
		if matches(t, n) {
			fit = append(fit, t)
		}
	}
	slices.SortFunc(fit, func(a, b types.InstanceTypeInfo) int {
		if c := int(aws.ToInt32(a.VCpuInfo.DefaultVCpus) - aws.ToInt32(b.VCpuInfo.DefaultVCpus)); c != 0 {
			return c
		}
		if c := int(aws.ToInt64(a.MemoryInfo.SizeInMiB) - aws.ToInt64(b.MemoryInfo.SizeInMiB)); c != 0 {
			return c
		}
		return strings.Compare(string(a.InstanceType), string(b.InstanceType))
	})
	out := make([]string, len(fit))
	for i, t := range fit {
		out[i] = string(t.InstanceType)
	}
	return out
}
