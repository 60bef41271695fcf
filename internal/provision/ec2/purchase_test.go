package ec2

import (
	"reflect"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/provision"
)

// withGPU, withFPGA, withInference, withDisk and withNet add what
// DescribeInstanceTypes reports beyond CPUs and memory.
func withGPU(t types.InstanceTypeInfo, maker, name string, n, mib int32) types.InstanceTypeInfo {
	t.GpuInfo = &types.GpuInfo{Gpus: []types.GpuDeviceInfo{{Manufacturer: aws.String(maker), Name: aws.String(name), Count: aws.Int32(n),
		MemoryInfo: &types.GpuDeviceMemoryInfo{SizeInMiB: aws.Int32(mib)}}}, TotalGpuMemoryInMiB: aws.Int32(n * mib)}
	return t
}

func withFPGA(t types.InstanceTypeInfo) types.InstanceTypeInfo {
	t.FpgaInfo = &types.FpgaInfo{Fpgas: []types.FpgaDeviceInfo{{Manufacturer: aws.String("Xilinx"), Name: aws.String("Virtex UltraScale (VU9P)"),
		Count: aws.Int32(1), MemoryInfo: &types.FpgaDeviceMemoryInfo{SizeInMiB: aws.Int32(65536)}}}}
	return t
}

func withInference(t types.InstanceTypeInfo) types.InstanceTypeInfo {
	t.InferenceAcceleratorInfo = &types.InferenceAcceleratorInfo{Accelerators: []types.InferenceDeviceInfo{{Manufacturer: aws.String("AWS"),
		Name: aws.String("Inferentia"), Count: aws.Int32(1), MemoryInfo: &types.InferenceDeviceMemoryInfo{SizeInMiB: aws.Int32(8192)}}}}
	return t
}

func withDisk(t types.InstanceTypeInfo, kind string, gb int64) types.InstanceTypeInfo {
	t.InstanceStorageSupported = aws.Bool(true)
	t.InstanceStorageInfo = &types.InstanceStorageInfo{TotalSizeInGB: aws.Int64(gb), Disks: []types.DiskInfo{{Type: types.DiskType(kind), SizeInGB: aws.Int64(gb), Count: aws.Int32(1)}}}
	return t
}

func withNet(t types.InstanceTypeInfo, gbps float64, nics, ebsMbps int32, hibernate bool) types.InstanceTypeInfo {
	t.NetworkInfo = &types.NetworkInfo{MaximumNetworkInterfaces: aws.Int32(nics),
		NetworkCards: []types.NetworkCardInfo{{BaselineBandwidthInGbps: aws.Float64(gbps)}}}
	t.EbsInfo = &types.EbsInfo{EbsOptimizedInfo: &types.EbsOptimizedInfo{BaselineBandwidthInMbps: aws.Int32(ebsMbps)}}
	t.HibernationSupported = aws.Bool(hibernate)
	return t
}

var accelCatalog = []types.InstanceTypeInfo{
	withNet(info("c5.large", "Intel", 2, 4096, false, false, "x86_64"), 0.75, 3, 650, true),
	withNet(withDisk(info("c5d.large", "Intel", 2, 4096, false, false, "x86_64"), "ssd", 50), 0.75, 3, 650, true),
	withNet(withDisk(info("d3.xlarge", "Intel", 4, 32768, false, false, "x86_64"), "hdd", 5940), 3, 4, 850, false),
	withNet(withDisk(withGPU(info("g4dn.xlarge", "Intel", 4, 16384, false, false, "x86_64"), "NVIDIA", "T4", 1, 16384), "ssd", 125), 5, 3, 950, false),
	withNet(withDisk(withGPU(info("g4dn.12xlarge", "Intel", 48, 196608, false, false, "x86_64"), "NVIDIA", "T4", 4, 16384), "ssd", 900), 50, 8, 9500, false),
	withNet(withGPU(info("g4ad.xlarge", "AMD", 4, 16384, false, false, "x86_64"), "AMD", "Radeon Pro V520", 1, 8192), 2, 2, 400, false),
	withNet(withInference(info("inf1.xlarge", "Intel", 4, 8192, false, false, "x86_64")), 5, 4, 1190, false),
	withNet(withFPGA(info("f1.2xlarge", "Intel", 8, 124928, false, false, "x86_64")), 2.5, 4, 1700, false),
}

func TestChooseByAcceleratorsStorageAndNetwork(t *testing.T) {
	i32, f64 := aws.Int32, aws.Float64
	cases := []struct {
		name string
		req  shapes.InstanceRequirementsRequest
		want []string
	}{
		{"no accelerator attribute: any type", shapes.InstanceRequirementsRequest{},
			[]string{"c5.large", "c5d.large", "inf1.xlarge", "g4ad.xlarge", "g4dn.xlarge", "d3.xlarge", "f1.2xlarge", "g4dn.12xlarge"}},
		{"acceleratorCount max 0 leaves accelerated types out", shapes.InstanceRequirementsRequest{AcceleratorCount: &shapes.AcceleratorCountRequest{Max: i32(0)}},
			[]string{"c5.large", "c5d.large", "d3.xlarge"}},
		{"GPUs", shapes.InstanceRequirementsRequest{AcceleratorTypes: []string{"gpu"}}, []string{"g4ad.xlarge", "g4dn.xlarge", "g4dn.12xlarge"}},
		{"NVIDIA GPUs, at least 2", shapes.InstanceRequirementsRequest{AcceleratorManufacturers: []string{"nvidia"},
			AcceleratorCount: &shapes.AcceleratorCountRequest{Min: i32(2)}}, []string{"g4dn.12xlarge"}},
		{"by name", shapes.InstanceRequirementsRequest{AcceleratorNames: []string{"radeon-pro-v520", "vu9p"}}, []string{"g4ad.xlarge", "f1.2xlarge"}},
		{"t4 is not t4g", shapes.InstanceRequirementsRequest{AcceleratorNames: []string{"t4g"}}, []string{}},
		{"inference from AWS", shapes.InstanceRequirementsRequest{AcceleratorTypes: []string{"inference"}, AcceleratorManufacturers: []string{"amazon-web-services"}},
			[]string{"inf1.xlarge"}},
		{"accelerator memory", shapes.InstanceRequirementsRequest{AcceleratorTypes: []string{"gpu"},
			AcceleratorTotalMemoryMiB: &shapes.AcceleratorTotalMemoryMiBRequest{Min: i32(10000), Max: i32(20000)}}, []string{"g4dn.xlarge"}},
		{"local storage required, hdd", shapes.InstanceRequirementsRequest{LocalStorage: "required", LocalStorageTypes: []string{"hdd"}}, []string{"d3.xlarge"}},
		{"local storage excluded", shapes.InstanceRequirementsRequest{LocalStorage: "excluded", AcceleratorCount: &shapes.AcceleratorCountRequest{Max: i32(0)}},
			[]string{"c5.large"}},
		{"total local storage", shapes.InstanceRequirementsRequest{TotalLocalStorageGB: &shapes.TotalLocalStorageGBRequest{Min: f64(100), Max: f64(1000)}},
			[]string{"g4dn.xlarge", "g4dn.12xlarge"}},
		{"network bandwidth and interfaces", shapes.InstanceRequirementsRequest{NetworkBandwidthGbps: &shapes.NetworkBandwidthGbpsRequest{Min: f64(3), Max: f64(10)},
			NetworkInterfaceCount: &shapes.NetworkInterfaceCountRequest{Min: i32(4)}}, []string{"inf1.xlarge", "d3.xlarge"}},
		{"EBS bandwidth", shapes.InstanceRequirementsRequest{BaselineEbsBandwidthMbps: &shapes.BaselineEbsBandwidthMbpsRequest{Min: i32(1500)}},
			[]string{"f1.2xlarge", "g4dn.12xlarge"}},
		{"memory per vCPU and hibernation", shapes.InstanceRequirementsRequest{MemoryGiBPerVCpu: &shapes.MemoryGiBPerVCpuRequest{Min: f64(2), Max: f64(2)},
			RequireHibernateSupport: aws.Bool(true)}, []string{"c5.large", "c5d.large"}},
	}
	for _, c := range cases {
		req := c.req
		if got := choose(accelCatalog, needs{req: &req, minVCPU: 1, arch: "x86_64"}); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

func TestPurchaseOptions(t *testing.T) {
	p := &Provisioner{cfg: Config{ImageID: "ami-1"}, owner: "o"}
	req := provision.Request{ID: "mi-1", Cluster: "c", CapacityProvider: "cp"}
	spot := p.runInput(req, shapes.InstanceLaunchTemplate{CapacityOptionType: "SPOT",
		CapacityReservations: &shapes.CapacityReservationRequest{ReservationPreference: "RESERVATIONS_FIRST"}}, "")
	if m := spot.InstanceMarketOptions; m == nil || m.MarketType != types.MarketTypeSpot || m.SpotOptions == nil ||
		m.SpotOptions.SpotInstanceType != types.SpotInstanceTypeOneTime || m.SpotOptions.InstanceInterruptionBehavior != types.InstanceInterruptionBehaviorTerminate {
		t.Errorf("SPOT: market options %+v", spot.InstanceMarketOptions)
	}
	if spot.CapacityReservationSpecification != nil {
		t.Errorf("SPOT: a spot instance cannot use reservations, got %+v", spot.CapacityReservationSpecification)
	}
	if od := p.runInput(req, shapes.InstanceLaunchTemplate{CapacityOptionType: "ON_DEMAND"}, ""); od.InstanceMarketOptions != nil || od.CapacityReservationSpecification != nil {
		t.Errorf("ON_DEMAND: %+v %+v", od.InstanceMarketOptions, od.CapacityReservationSpecification)
	}
	group := "arn:aws:resource-groups:us-east-1:123456789012:group/reserved"
	for _, c := range []struct {
		lt        shapes.InstanceLaunchTemplate
		pref      types.CapacityReservationPreference
		groupWant string
	}{
		{shapes.InstanceLaunchTemplate{CapacityReservations: &shapes.CapacityReservationRequest{ReservationPreference: "RESERVATIONS_ONLY"}},
			types.CapacityReservationPreferenceCapacityReservationsOnly, ""},
		{shapes.InstanceLaunchTemplate{CapacityOptionType: "RESERVED"}, types.CapacityReservationPreferenceCapacityReservationsOnly, ""},
		{shapes.InstanceLaunchTemplate{CapacityReservations: &shapes.CapacityReservationRequest{ReservationPreference: "RESERVATIONS_FIRST"}},
			types.CapacityReservationPreferenceOpen, ""},
		{shapes.InstanceLaunchTemplate{CapacityReservations: &shapes.CapacityReservationRequest{ReservationPreference: "RESERVATIONS_EXCLUDED", ReservationGroupArn: group}},
			types.CapacityReservationPreferenceNone, ""},
		{shapes.InstanceLaunchTemplate{CapacityReservations: &shapes.CapacityReservationRequest{ReservationPreference: "RESERVATIONS_ONLY", ReservationGroupArn: group}},
			"", group},
	} {
		s := p.runInput(req, c.lt, "").CapacityReservationSpecification
		if s == nil {
			t.Errorf("%+v: no reservation specification", c.lt.CapacityReservations)
			continue
		}
		gotGroup := ""
		if s.CapacityReservationTarget != nil {
			gotGroup = aws.ToString(s.CapacityReservationTarget.CapacityReservationResourceGroupArn)
		}
		if s.CapacityReservationPreference != c.pref || gotGroup != c.groupWant {
			t.Errorf("%s %+v: preference %q group %q, want %q %q", c.lt.CapacityOptionType, c.lt.CapacityReservations, s.CapacityReservationPreference, gotGroup, c.pref, c.groupWant)
		}
	}
}
