package ec2

import (
	"reflect"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/capstanhq/capstan/internal/api/shapes"
)

func info(name, maker string, vcpu int32, mib int64, burst, bare bool, arch string) types.InstanceTypeInfo {
	return types.InstanceTypeInfo{InstanceType: types.InstanceType(name), VCpuInfo: &types.VCpuInfo{DefaultVCpus: aws.Int32(vcpu)},
		MemoryInfo:                    &types.MemoryInfo{SizeInMiB: aws.Int64(mib)},
		ProcessorInfo:                 &types.ProcessorInfo{Manufacturer: aws.String(maker), SupportedArchitectures: []types.ArchitectureType{types.ArchitectureType(arch)}},
		BurstablePerformanceSupported: aws.Bool(burst), BareMetal: aws.Bool(bare), CurrentGeneration: aws.Bool(true)}
}

var catalog = []types.InstanceTypeInfo{
	info("m5.xlarge", "Intel", 4, 16384, false, false, "x86_64"),
	info("c5.large", "Intel", 2, 4096, false, false, "x86_64"),
	info("c5a.large", "AMD", 2, 4096, false, false, "x86_64"),
	info("t3.medium", "Intel", 2, 4096, true, false, "x86_64"),
	info("c6g.large", "AWS", 2, 4096, false, false, "arm64"),
	info("m5.metal", "Intel", 96, 393216, false, true, "x86_64"),
	info("c5d.large", "Intel", 2, 4096, false, false, "x86_64"),
}

func TestChooseInstanceTypes(t *testing.T) {
	i32 := aws.Int32
	cases := []struct {
		name string
		n    needs
		want []string
	}{
		{"smallest first, burstable and bare metal left out by default",
			needs{minVCPU: 2, minMemoryMiB: 4096, arch: "x86_64"}, []string{"c5.large", "c5a.large", "c5d.large", "m5.xlarge"}},
		{"manufacturer, allowed and excluded patterns",
			needs{req: &shapes.InstanceRequirementsRequest{CpuManufacturers: []string{"intel"}, AllowedInstanceTypes: []string{"c5*.*", "t3.*"},
				ExcludedInstanceTypes: []string{"c5d.*"}}, minVCPU: 2, minMemoryMiB: 4096, arch: "x86_64"}, []string{"c5.large"}},
		{"burstable required", needs{req: &shapes.InstanceRequirementsRequest{BurstablePerformance: "required"}, minVCPU: 1, arch: "x86_64"}, []string{"t3.medium"}},
		{"maximums", needs{req: &shapes.InstanceRequirementsRequest{VCpuCount: &shapes.VCpuCountRangeRequest{Max: i32(2)},
			MemoryMiB: &shapes.MemoryMiBRequest{Max: i32(4096)}, BareMetal: "included"}, minVCPU: 2, minMemoryMiB: 4096, arch: "arm64"}, []string{"c6g.large"}},
		{"the task's need raises the floor", needs{minVCPU: 3, minMemoryMiB: 1024, arch: "x86_64"}, []string{"m5.xlarge"}},
		{"nothing fits", needs{req: &shapes.InstanceRequirementsRequest{CpuManufacturers: []string{"apple"}}, arch: "x86_64"}, []string{}},
	}
	for _, c := range cases {
		if got := choose(catalog, c.n); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

func TestUserDataRoundTrip(t *testing.T) {
	env := map[string]string{"ECS_CLUSTER": "prod", "AWS_SECRET_ACCESS_KEY": "s3cr+t/=x", "ECS_IMAGE_PULL_BEHAVIOR": "prefer-cached"}
	ud, err := UserData("mi-1", "prod", "fleet", env, "https://example.test/capstan-agent.deb")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ud, "#!/bin/sh\n") || !strings.Contains(ud, "systemctl restart capstan-agent") || !strings.Contains(ud, "dpkg -i") {
		t.Fatalf("user data:\n%s", ud)
	}
	got, err := ParseUserData(ud)
	if err != nil || !reflect.DeepEqual(got, env) {
		t.Fatalf("parsed %v %v, want %v", got, err, env)
	}
	if ud, _ := UserData("mi-1", "prod", "fleet", env, ""); strings.Contains(ud, "curl") {
		t.Errorf("no agent URL, yet the script downloads:\n%s", ud)
	}
	for _, bad := range []map[string]string{{"A": "line\nbreak"}, {"A=B": "x"}, {"": "x"}} {
		if _, err := UserData("mi-1", "prod", "fleet", bad, ""); err == nil {
			t.Errorf("setting %q taken", bad)
		}
	}
	if _, err := UserData("mi-1", "prod", "fleet", env, "https://x/'; rm -rf /"); err == nil {
		t.Error("agent URL with a quote taken")
	}
	if _, err := ParseUserData("#!/bin/sh\necho hi\n"); err == nil {
		t.Error("script without settings parsed")
	}
}

func TestMachineEnvDropsHostSharingAddresses(t *testing.T) {
	got := machineEnv(map[string]string{"CAPSTAN_METRICS_ADDR": "127.0.0.1:0", "CAPSTAN_METADATA_ADDR": "0.0.0.0:0", "ECS_CLUSTER": "c"})
	if !reflect.DeepEqual(got, map[string]string{"ECS_CLUSTER": "c"}) {
		t.Fatal(got)
	}
}

func TestClientTokenFitsEC2(t *testing.T) {
	a, b := clientToken("capstan-0123456789abcdef", "mi-0123456789ab", "c5.large"), clientToken("capstan-0123456789abcdef", "mi-0123456789ab", "c5a.large")
	if len(a) > 64 || a == b || a != clientToken("capstan-0123456789abcdef", "mi-0123456789ab", "c5.large") {
		t.Fatalf("tokens %q %q", a, b)
	}
}
