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
	if !acceleratorsMatch(t, r) || !storageMatches(t, r) || !networkMatches(t, r) {
		return false
	}
	if m := r.MemoryGiBPerVCpu; m != nil && vcpu > 0 {
		per := float64(mem) / 1024 / float64(vcpu)
		if (m.Min != nil && per < *m.Min) || (m.Max != nil && per > *m.Max) {
			return false
		}
	}
	if aws.ToBool(r.RequireHibernateSupport) && !aws.ToBool(t.HibernationSupported) {
		return false
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

// accelerator is one kind of accelerator an instance type has.
type accelerator struct {
	kind, manufacturer, name string // kind: gpu, fpga or inference
	count                    int
	memoryMiB                int64
}

func accelerators(t types.InstanceTypeInfo) []accelerator {
	var out []accelerator
	if g := t.GpuInfo; g != nil {
		for _, d := range g.Gpus {
			a := accelerator{kind: "gpu", manufacturer: aws.ToString(d.Manufacturer), name: aws.ToString(d.Name), count: int(aws.ToInt32(d.Count))}
			if d.MemoryInfo != nil {
				a.memoryMiB = int64(aws.ToInt32(d.MemoryInfo.SizeInMiB)) * int64(a.count)
			}
			out = append(out, a)
		}
	}
	if f := t.FpgaInfo; f != nil {
		for _, d := range f.Fpgas {
			a := accelerator{kind: "fpga", manufacturer: aws.ToString(d.Manufacturer), name: aws.ToString(d.Name), count: int(aws.ToInt32(d.Count))}
			if d.MemoryInfo != nil {
				a.memoryMiB = int64(aws.ToInt32(d.MemoryInfo.SizeInMiB)) * int64(a.count)
			}
			out = append(out, a)
		}
	}
	if i := t.InferenceAcceleratorInfo; i != nil {
		for _, d := range i.Accelerators {
			a := accelerator{kind: "inference", manufacturer: aws.ToString(d.Manufacturer), name: aws.ToString(d.Name), count: int(aws.ToInt32(d.Count))}
			if d.MemoryInfo != nil {
				a.memoryMiB = int64(aws.ToInt32(d.MemoryInfo.SizeInMiB)) * int64(a.count)
			}
			out = append(out, a)
		}
	} else if n := t.NeuronInfo; n != nil {
		// Newer Inferentia and Trainium types report Neuron devices only.
		for _, d := range n.NeuronDevices {
			a := accelerator{kind: "inference", manufacturer: "AWS", name: aws.ToString(d.Name), count: int(aws.ToInt32(d.Count))}
			if d.MemoryInfo != nil {
				a.memoryMiB = int64(aws.ToInt32(d.MemoryInfo.SizeInMiB)) * int64(a.count)
			}
			out = append(out, a)
		}
	}
	return out
}

// squash is a name compared loosely: "Radeon Pro V520" is radeon-pro-v520.
func squash(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// acceleratorsMatch applies acceleratorTypes, acceleratorManufacturers
// and acceleratorNames to the type's accelerators, then acceleratorCount
// and acceleratorTotalMemoryMiB to those that pass. With no accelerator
// attribute any type passes, as in EC2; acceleratorCount max 0 excludes
// types with accelerators.
func acceleratorsMatch(t types.InstanceTypeInfo, r *shapes.InstanceRequirementsRequest) bool {
	filtered := len(r.AcceleratorTypes) > 0 || len(r.AcceleratorManufacturers) > 0 || len(r.AcceleratorNames) > 0
	if !filtered && r.AcceleratorCount == nil && r.AcceleratorTotalMemoryMiB == nil {
		return true
	}
	count, mem := 0, int64(0)
	for _, a := range accelerators(t) {
		if len(r.AcceleratorTypes) > 0 && !slices.Contains(r.AcceleratorTypes, a.kind) {
			continue
		}
		if len(r.AcceleratorManufacturers) > 0 && !slices.ContainsFunc(r.AcceleratorManufacturers, func(m string) bool {
			return squash(manufacturers[m]) == squash(a.manufacturer) || squash(m) == squash(a.manufacturer)
		}) {
			continue
		}
		if len(r.AcceleratorNames) > 0 && !slices.ContainsFunc(r.AcceleratorNames, func(n string) bool {
			// FPGAs are named like "Virtex UltraScale (VU9P)".
			return squash(n) == squash(a.name) || strings.Contains(strings.ToLower(a.name), "("+n+")")
		}) {
			continue
		}
		count += a.count
		mem += a.memoryMiB
	}
	if filtered && count == 0 {
		return false
	}
	if c := r.AcceleratorCount; c != nil && ((c.Min != nil && count < int(*c.Min)) || (c.Max != nil && count > int(*c.Max))) {
		return false
	}
	if m := r.AcceleratorTotalMemoryMiB; m != nil && ((m.Min != nil && mem < int64(*m.Min)) || (m.Max != nil && mem > int64(*m.Max))) {
		return false
	}
	return true
}

// storageMatches applies localStorage (default included),
// localStorageTypes, totalLocalStorageGB and baselineEbsBandwidthMbps.
func storageMatches(t types.InstanceTypeInfo, r *shapes.InstanceRequirementsRequest) bool {
	local := aws.ToBool(t.InstanceStorageSupported) && t.InstanceStorageInfo != nil
	switch r.LocalStorage {
	case "required":
		if !local {
			return false
		}
	case "excluded":
		if local {
			return false
		}
	}
	if local && len(r.LocalStorageTypes) > 0 && !slices.ContainsFunc(t.InstanceStorageInfo.Disks, func(d types.DiskInfo) bool {
		return slices.Contains(r.LocalStorageTypes, string(d.Type))
	}) {
		return false
	}
	if g := r.TotalLocalStorageGB; g != nil {
		size := 0.0
		if local {
			size = float64(aws.ToInt64(t.InstanceStorageInfo.TotalSizeInGB))
		}
		if (g.Min != nil && size < *g.Min) || (g.Max != nil && size > *g.Max) {
			return false
		}
	}
	if b := r.BaselineEbsBandwidthMbps; b != nil {
		mbps := 0
		if t.EbsInfo != nil && t.EbsInfo.EbsOptimizedInfo != nil {
			mbps = int(aws.ToInt32(t.EbsInfo.EbsOptimizedInfo.BaselineBandwidthInMbps))
		}
		if (b.Min != nil && mbps < int(*b.Min)) || (b.Max != nil && mbps > int(*b.Max)) {
			return false
		}
	}
	return true
}

// networkMatches applies networkBandwidthGbps (the network cards'
// baseline bandwidth, as EC2 compares) and networkInterfaceCount.
func networkMatches(t types.InstanceTypeInfo, r *shapes.InstanceRequirementsRequest) bool {
	if r.NetworkBandwidthGbps == nil && r.NetworkInterfaceCount == nil {
		return true
	}
	gbps, nics := 0.0, 0
	if n := t.NetworkInfo; n != nil {
		for _, c := range n.NetworkCards {
			gbps += aws.ToFloat64(c.BaselineBandwidthInGbps)
		}
		nics = int(aws.ToInt32(n.MaximumNetworkInterfaces))
	}
	if b := r.NetworkBandwidthGbps; b != nil && ((b.Min != nil && gbps < *b.Min) || (b.Max != nil && gbps > *b.Max)) {
		return false
	}
	if c := r.NetworkInterfaceCount; c != nil && ((c.Min != nil && nics < int(*c.Min)) || (c.Max != nil && nics > int(*c.Max))) {
		return false
	}
	return true
}
