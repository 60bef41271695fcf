package taskdef

import (
	"testing"

	"github.com/capstanhq/capstan/internal/fault"
)

func TestParseCPU(t *testing.T) {
	rows := []struct {
		in   string
		want int // -1: rejected
	}{
		{"1024", 1024},
		{"128", 128},
		{"0", 0},
		{"1 vCPU", 1024},
		{"1 vcpu", 1024},
		{"1vCPU", 1024},
		{"2 VCPU", 2048},
		{"0.25 vCPU", 256},
		{"0.5 vcpu", 512},
		{"1.5 vCPUs", 1536},
		{"  4 vCPU  ", 4096},
		{"", -1},
		{"-1", -1},
		{"1.5", -1},
		{"0.1 vCPU", -1},
		{"1 GB", -1},
		{"1e3", -1},
		{"0x400", -1},
		{"1,024", -1},
		{"99999999999 vCPU", -1},
	}
	for _, row := range rows {
		got, err := ParseCPU(row.in)
		check(t, "ParseCPU", row.in, got, err, row.want, "cpu")
	}
}

func TestParseMemory(t *testing.T) {
	rows := []struct {
		in   string
		want int
	}{
		{"512", 512},
		{"1GB", 1024},
		{"1 GB", 1024},
		{"1 gb", 1024},
		{"0.5 GB", 512},
		{"2.25GiB", 2304},
		{"512 MiB", 512},
		{"512MB", 512},
		{"2097151 GB", 2097151 * 1024},
		{"", -1},
		{"1 TB", -1},
		{"1.5", -1},
		{"0.001 GB", -1},
		{"2097152 GB", -1},
		{"GB", -1},
		{"1 G B", -1},
	}
	for _, row := range rows {
		got, err := ParseMemory(row.in)
		check(t, "ParseMemory", row.in, got, err, row.want, "memory")
	}
}

func check(t *testing.T, fn, in string, got int, err error, want int, field string) {
	t.Helper()
	switch {
	case want < 0 && err == nil:
		t.Errorf("%s(%q) = %d, want an error", fn, in, got)
	case want < 0:
		assertFault(t, err, fault.InvalidParameter, field)
	case err != nil:
		t.Errorf("%s(%q): %v", fn, in, err)
	case got != want:
		t.Errorf("%s(%q) = %d, want %d", fn, in, got, want)
	}
}
