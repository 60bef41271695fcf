package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/client"

	"github.com/capstanhq/capstan/bench/internal/benchkit"
)

// Machine describes where the numbers were taken.
type Machine struct {
	GOOS          string `json:"goos"`
	GOARCH        string `json:"goarch"`
	NumCPU        int    `json:"numCPU"`
	GOMAXPROCS    int    `json:"gomaxprocs"`
	GoVersion     string `json:"goVersion"`
	CPUModel      string `json:"cpuModel,omitempty"`
	MemTotalMiB   int64  `json:"memTotalMiB,omitempty"`
	Kernel        string `json:"kernel,omitempty"`
	Revision      string `json:"vcsRevision,omitempty"`
	DockerVersion string `json:"dockerVersion"`
	DockerAPI     string `json:"dockerApiVersion"`
	StorageDriver string `json:"dockerStorageDriver,omitempty"`
	CgroupDriver  string `json:"dockerCgroupDriver,omitempty"`
	CgroupVersion string `json:"dockerCgroupVersion,omitempty"`
	// Containers is how many containers the engine held when the run
	// started: other work sharing the engine shows up here.
	Containers   int    `json:"dockerContainersAtStart"`
	LoadAvgStart string `json:"loadAvgStart,omitempty"`
	LoadAvgEnd   string `json:"loadAvgEnd,omitempty"`
}

func machine(ctx context.Context, dc *client.Client) (Machine, error) {
	m := Machine{GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, NumCPU: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0),
		GoVersion: runtime.Version(), LoadAvgStart: benchkit.LoadAvg()}
	m.CPUModel = benchkit.CPUModel()
	if bs, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.Lines(string(bs)) {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				kib, _ := strconv.ParseInt(f[1], 10, 64)
				m.MemTotalMiB = kib >> 10
			}
		}
	}
	m.Revision = benchkit.VCSRevision()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, err := dc.ServerVersion(ctx, client.ServerVersionOptions{})
	if err != nil {
		return m, fmt.Errorf("docker version: %w", err)
	}
	m.DockerVersion, m.DockerAPI = v.Version, v.APIVersion
	info, err := dc.Info(ctx, client.InfoOptions{})
	if err != nil {
		return m, fmt.Errorf("docker info: %w", err)
	}
	m.StorageDriver, m.CgroupDriver, m.CgroupVersion = info.Info.Driver, info.Info.CgroupDriver, info.Info.CgroupVersion
	m.Kernel = info.Info.KernelVersion
	m.Containers = info.Info.Containers
	return m, nil
}
