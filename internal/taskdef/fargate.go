package taskdef

import (
	"slices"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/fault"
)

// Fargate-style definitions run on managed instances: their tasks get an
// awsvpc namespace of their own there. Capstan holds them to the rules ECS
// applies to FARGATE, so a definition accepted here registers on ECS too.

// RequiresFargate reports a definition that asks for FARGATE.
func RequiresFargate(req []string) bool { return slices.Contains(req, "FARGATE") }

// fargateSizes lists, per task cpu, the memory range (MiB) and step ECS
// accepts on FARGATE.
var fargateSizes = map[int]struct{ lo, hi, step int }{
	256:   {512, 2048, 512},
	512:   {1024, 4096, 1024},
	1024:  {2048, 8192, 1024},
	2048:  {4096, 16384, 1024},
	4096:  {8192, 30720, 1024},
	8192:  {16384, 61440, 4096},
	16384: {32768, 122880, 8192},
}

// FargateSize reports whether cpu and memory (integers, as stored) form a
// FARGATE task size.
func FargateSize(cpu, memory int) bool {
	s, ok := fargateSizes[cpu]
	if !ok || memory < s.lo || memory > s.hi {
		return false
	}
	if cpu == 256 {
		return memory == 512 || memory%1024 == 0
	}
	return (memory-s.lo)%s.step == 0
}

// checkFargate applies ECS's FARGATE rules to a definition that requires
// it: awsvpc, task-level cpu and memory of a size Fargate has. It runs
// after taskSize has normalized cpu and memory.
func checkFargate(req *shapes.RegisterTaskDefinitionRequest, cpu, memory int) error {
	switch {
	case req.NetworkMode != "awsvpc":
		return fault.ClientError("networkMode: Fargate only supports network mode 'awsvpc' (got %s)", req.NetworkMode)
	case req.Cpu == "":
		return fault.ClientError("cpu: Fargate requires that 'cpu' be defined at the task level")
	case req.Memory == "":
		return fault.ClientError("memory: Fargate requires that 'memory' be defined at the task level")
	case !FargateSize(cpu, memory):
		return fault.ClientError("cpu, memory: No Fargate configuration exists for given values: %d CPU, %d memory", cpu, memory)
	}
	if e := req.EphemeralStorage; e != nil && e.SizeInGiB != nil {
		if err := between("ephemeralStorage.sizeInGiB", e.SizeInGiB, 21, 200); err != nil {
			return err
		}
	}
	return nil
}

// Compatibilities is what ECS answers in a definition's compatibilities
// for what Capstan adds: an awsvpc definition whose task size Fargate has
// is compatible with EC2, FARGATE and, here, MANAGED_INSTANCES, where it
// runs. base is the list for the definition's other launch types.
func Compatibilities(base []string, td *shapes.TaskDefinition) []string {
	if td.NetworkMode != "awsvpc" || td.Cpu == "" || td.Memory == "" {
		return base
	}
	cpu, err1 := ParseCPU(td.Cpu)
	mem, err2 := ParseMemory(td.Memory)
	if err1 != nil || err2 != nil || !FargateSize(cpu, mem) {
		return base
	}
	out := slices.Clone(base)
	for _, c := range []string{"EC2", "FARGATE", "MANAGED_INSTANCES"} {
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	order := []string{"EC2", "EXTERNAL", "FARGATE", "MANAGED_INSTANCES"}
	slices.SortStableFunc(out, func(a, b string) int { return slices.Index(order, a) - slices.Index(order, b) })
	return out
}
