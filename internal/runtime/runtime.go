// Package runtime declares what the agent needs from a container runtime.
// Implementations: docker (the Docker Engine API; the real one) and, later,
// sim (simulated containers for scale and fault tests).
package runtime

import (
	"context"
	"errors"
	"io"
	"time"
)

// ErrNotFound means the container or image does not exist.
var ErrNotFound = errors.New("runtime: not found")

// Runtime runs containers. Every method is safe for concurrent use.
type Runtime interface {
	// Info describes the engine and the host's capacity.
	Info(ctx context.Context) (Info, error)

	// Pull fetches an image; auth may be nil.
	Pull(ctx context.Context, image string, auth *RegistryAuth) error
	// Image inspects a local image by reference or ID (ErrNotFound).
	Image(ctx context.Context, ref string) (Image, error)
	// Images lists local images.
	Images(ctx context.Context) ([]Image, error)
	// RemoveImage deletes a local image by ID; it fails if a container uses it.
	RemoveImage(ctx context.Context, id string) error

	// Create makes a container from spec and returns its ID.
	Create(ctx context.Context, spec ContainerSpec) (string, error)
	Start(ctx context.Context, id string) error
	// Stop sends the stop signal, then SIGKILL after timeout.
	Stop(ctx context.Context, id string, timeout time.Duration) error
	// Remove deletes a container (and its anonymous volumes), forcing if running.
	Remove(ctx context.Context, id string) error
	// Inspect returns the current state of a container (ErrNotFound).
	Inspect(ctx context.Context, id string) (Container, error)
	// List returns containers (running or not) carrying all given labels.
	List(ctx context.Context, labels map[string]string) ([]Container, error)
	// Events streams container events from now on until ctx ends or the
	// stream fails; the error channel then yields one error (nil on ctx end).
	Events(ctx context.Context) (<-chan Event, <-chan error)
	// Stats samples resource usage of a running container.
	Stats(ctx context.Context, id string) (Stats, error)
	// Logs returns the container's output (stdout and stderr interleaved),
	// only the last tail lines if tail > 0.
	Logs(ctx context.Context, id string, tail int) (io.ReadCloser, error)
	// Exec runs a command in a running container and returns its exit code and output.
	Exec(ctx context.Context, id string, cmd []string) (int, []byte, error)
}

// Info describes the engine.
type Info struct {
	Name          string // "docker"
	Version       string // engine version
	APIVersion    string
	CPUs          int   // logical CPUs of the host
	MemoryBytes   int64 // memory of the host
	OS, Arch      string
	KernelVersion string
}

// RegistryAuth is a registry credential.
type RegistryAuth struct {
	Username      string
	Password      string
	ServerAddress string
}

// Image is a local image.
type Image struct {
	ID          string
	RepoTags    []string
	RepoDigests []string
	Size        int64
	Created     time.Time
}

// ContainerSpec is everything needed to create a container.
type ContainerSpec struct {
	Name       string
	Image      string
	Labels     map[string]string
	Entrypoint []string
	Cmd        []string
	Env        []string // KEY=VALUE
	WorkingDir string
	User       string
	Hostname   string

	CPUShares         int64 // relative weight (ECS cpu units)
	MemoryLimit       int64 // bytes, hard; 0 for none
	MemoryReservation int64 // bytes, soft; 0 for none

	// NetworkMode: "bridge", "host", "none", or "container:<id>" to join
	// another container's network namespace, or a user network name.
	NetworkMode string
	Ports       []PortBinding // published ports (bridge mode)
	ExtraHosts  []string      // "name:ip"
	DNS         []string
	Mounts      []Mount
	Tmpfs       []Tmpfs

	Privileged     bool
	CapAdd         []string
	CapDrop        []string
	Devices        []Device
	Init           bool
	ReadonlyRootfs bool
	Ulimits        []Ulimit
	Sysctls        map[string]string
	PidMode        string // "", "host", "container:<id>"
	IpcMode        string // "", "host", "shareable", "container:<id>"
	ShmSizeBytes   int64

	Healthcheck *Healthcheck
	LogDriver   string
	LogOptions  map[string]string
	StopSignal  string
	StopTimeout time.Duration
}

// PortBinding maps a container port to a host port (0: any free port).
type PortBinding struct {
	ContainerPort int
	HostPort      int
	HostIP        string
	Protocol      string // tcp or udp
}

// Mount is a bind mount of a host path.
type Mount struct {
	Source   string
	Target   string
	ReadOnly bool
}

// Tmpfs is a tmpfs mount.
type Tmpfs struct {
	Target    string
	SizeBytes int64
	Options   []string
}

// Device exposes a host device.
type Device struct {
	HostPath      string
	ContainerPath string
	Permissions   string // e.g. "rwm"
}

// Ulimit is a resource limit.
type Ulimit struct {
	Name       string
	Soft, Hard int64
}

// Healthcheck is a container health check.
type Healthcheck struct {
	Test        []string // CMD or CMD-SHELL form
	Interval    time.Duration
	Timeout     time.Duration
	Retries     int
	StartPeriod time.Duration
}

// Container states.
const (
	StateCreated    = "created"
	StateRunning    = "running"
	StatePaused     = "paused"
	StateRestarting = "restarting"
	StateRemoving   = "removing"
	StateExited     = "exited"
	StateDead       = "dead"
)

// Health states.
const (
	HealthNone      = ""
	HealthStarting  = "starting"
	HealthHealthy   = "healthy"
	HealthUnhealthy = "unhealthy"
)

// Container is the observed state of a container.
type Container struct {
	ID         string
	Name       string
	Image      string
	ImageID    string
	Labels     map[string]string
	State      string
	ExitCode   int
	OOMKilled  bool
	Error      string // runtime error, e.g. why start failed
	Health     string
	CreatedAt  time.Time
	StartedAt  time.Time
	FinishedAt time.Time
	// Ports are the actual bindings, host ports resolved.
	Ports []PortBinding
	// IPAddress on the default bridge or the container's first network.
	IPAddress string
	// NetworkMode as the engine stores it: "container:<id>" names the
	// container whose network namespace this one joined.
	NetworkMode string
	Pid         int
}

// Event actions the agent cares about.
const (
	EventCreate  = "create"
	EventStart   = "start"
	EventDie     = "die"
	EventStop    = "stop"
	EventKill    = "kill"
	EventOOM     = "oom"
	EventDestroy = "destroy"
	EventHealth  = "health_status"
)

// Event is a container event.
type Event struct {
	ContainerID string
	Action      string // one of the Event* constants
	Health      string // for EventHealth
	ExitCode    int    // for EventDie
	Labels      map[string]string
	Time        time.Time
}

// Stats is one sample of a container's resource usage.
type Stats struct {
	Time             time.Time
	CPUTotalNanos    uint64 // cumulative CPU time
	SystemCPUNanos   uint64 // cumulative host CPU time
	OnlineCPUs       int
	MemoryUsageBytes uint64
	MemoryLimitBytes uint64
	NetworkRxBytes   uint64
	NetworkTxBytes   uint64
	BlockReadBytes   uint64
	BlockWriteBytes  uint64
	Pids             uint64
	Raw              []byte // the engine's own JSON, for the metadata endpoint
}
