package taskdef

import (
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/capstanhq/capstan/internal/fault"
)

// A number with an optional fraction and unit. Digit counts are capped so the
// arithmetic below cannot overflow.
var quantity = regexp.MustCompile(`^([0-9]{1,12})(?:\.([0-9]{1,9}))?\s*([A-Za-z]*)$`)

var (
	cpuUnits    = map[string]int64{"": 1, "vcpu": 1024, "vcpus": 1024}
	memoryUnits = map[string]int64{"": 1, "mb": 1, "mib": 1, "gb": 1024, "gib": 1024}
)

// ParseCPU returns a task cpu size in CPU units. It accepts an integer count
// of units ("1024") or vCPUs ("1 vCPU", "0.5 vcpu"); 1 vCPU is 1024 units.
func ParseCPU(s string) (int, error) {
	return parseQuantity("cpu", s, cpuUnits, "CPU units", `"1024" or "1 vCPU"`)
}

// ParseMemory returns a task memory size in MiB. It accepts an integer count
// of MiB ("512"), MiB or MB ("512 MiB") and GB or GiB ("1GB", "0.5 GB"); like
// ECS, 1 GB is 1024 MiB.
func ParseMemory(s string) (int, error) {
	return parseQuantity("memory", s, memoryUnits, "MiB", `"512", "1GB" or "0.5 GB"`)
}

func parseQuantity(field, s string, units map[string]int64, base, examples string) (int, error) {
	m := quantity.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, fault.Invalid(field, "%q is not a size; use %s", clip(s), examples)
	}
	whole, frac, unit := m[1], m[2], m[3]
	scale, ok := units[strings.ToLower(unit)]
	if !ok {
		return 0, fault.Invalid(field, "unknown unit %q; use %s", clip(unit), examples)
	}
	n, _ := strconv.ParseInt(whole, 10, 64) // at most 12 digits
	n *= scale
	if frac != "" {
		f, _ := strconv.ParseInt(frac, 10, 64) // at most 9 digits
		den := int64(math.Pow10(len(frac)))
		if f*scale%den != 0 {
			return 0, fault.Invalid(field, "%q is not a whole number of %s", clip(s), base)
		}
		n += f * scale / den
	}
	if n > math.MaxInt32 {
		return 0, fault.Invalid(field, "%q is too large", clip(s))
	}
	return int(n), nil
}

// taskSize parses, bounds and normalizes the task-level cpu and memory, and
// returns them (0 when unset). Standard and daemon definitions share it.
func taskSize(cpu, memory *string) (int, int, error) {
	c, m := 0, 0
	if *cpu != "" {
		n, err := ParseCPU(*cpu)
		if err != nil {
			return 0, 0, err
		}
		if n < minTaskCPU || n > maxCPU {
			return 0, 0, fault.Invalid("cpu", "must be between %d and %d CPU units (got %d)", minTaskCPU, maxCPU, n)
		}
		c, *cpu = n, strconv.Itoa(n)
	}
	if *memory != "" {
		n, err := ParseMemory(*memory)
		if err != nil {
			return 0, 0, err
		}
		if n < minMemory {
			return 0, 0, fault.Invalid("memory", "must be at least %d MiB (got %d)", minMemory, n)
		}
		m, *memory = n, strconv.Itoa(n)
	}
	return c, m, nil
}
