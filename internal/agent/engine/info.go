package engine

import (
	"time"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/protocol"
)

// TaskInfo is a read-only picture of one task, for the metadata endpoint.
// Callers must not modify it: maps and slices may be shared.
type TaskInfo struct {
	Arn     string
	Cluster string
	Kind    string
	// Task is the task as the server last sent it (zero for a task known
	// only from its containers' labels).
	Task protocol.Task
	// Definition is what runs: the task definition with overrides applied.
	Definition    shapes.TaskDefinition
	DesiredStatus string
	// State is the last state reported on Changes.
	State protocol.TaskState
	// Limits are what the task reserved on the instance.
	CPU       int // CPU units
	MemoryMiB int
	// NetworkMode is the Docker network mode the containers run in.
	NetworkMode string
	// Waiting explains why a task is not admitted yet.
	Waiting    string
	Containers []ContainerInfo
}

// ContainerInfo is one container of a TaskInfo.
type ContainerInfo struct {
	Name        string
	RuntimeID   string
	RuntimeName string // the Docker container name
	Image       string
	ImageID     string
	ImageDigest string
	Labels      map[string]string
	Essential   bool

	DesiredStatus string
	KnownStatus   string // PENDING, RUNNING, STOPPED
	ExitCode      *int
	Reason        string
	Health        string // HEALTHY, UNHEALTHY, UNKNOWN; "" without a health check

	CPUShares            int64
	MemoryMiB            int // hard limit, 0 for none
	MemoryReservationMiB int

	Ports     []shapes.NetworkBinding
	IPAddress string

	CreatedAt    time.Time
	StartedAt    time.Time
	FinishedAt   time.Time
	RestartCount int

	LogDriver  string
	LogOptions map[string]string
	Volumes    []VolumeInfo
}

// VolumeInfo is a mount of a container.
type VolumeInfo struct {
	Source      string // host path
	Destination string
	ReadOnly    bool
}

// view is what a task publishes for readers on other goroutines.
type view struct {
	info     TaskInfo
	reported bool // a state has been emitted
}
