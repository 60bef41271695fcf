package metadata

import "time"

// The v4 response shapes. Member names are the ECS agent's (ECS promises
// to add members, never to rename or remove them); times are RFC 3339 with
// nanoseconds and are left out while unknown.

type containerJSON struct {
	DockerID      string            `json:"DockerId"`
	Name          string            `json:"Name"`
	DockerName    string            `json:"DockerName"`
	Image         string            `json:"Image"`
	ImageID       string            `json:"ImageID"`
	Ports         []portJSON        `json:"Ports,omitempty"`
	Labels        map[string]string `json:"Labels,omitempty"`
	DesiredStatus string            `json:"DesiredStatus"`
	KnownStatus   string            `json:"KnownStatus"`
	ExitCode      *int              `json:"ExitCode,omitempty"`
	Limits        limitsJSON        `json:"Limits"`
	CreatedAt     time.Time         `json:"CreatedAt,omitzero"`
	StartedAt     time.Time         `json:"StartedAt,omitzero"`
	FinishedAt    time.Time         `json:"FinishedAt,omitzero"`
	Type          string            `json:"Type"`
	LogDriver     string            `json:"LogDriver,omitempty"`
	LogOptions    map[string]string `json:"LogOptions,omitempty"`
	ContainerARN  string            `json:"ContainerARN,omitempty"`
	Networks      []networkJSON     `json:"Networks,omitempty"`
	Health        *healthJSON       `json:"Health,omitempty"`
	Volumes       []volumeJSON      `json:"Volumes,omitempty"`
	RestartCount  *int              `json:"RestartCount,omitempty"`
}

type limitsJSON struct {
	CPU    float64 `json:"CPU"`
	Memory int     `json:"Memory"`
}

type portJSON struct {
	ContainerPort int    `json:"ContainerPort"`
	Protocol      string `json:"Protocol"`
	HostPort      int    `json:"HostPort,omitempty"`
	HostIP        string `json:"HostIp,omitempty"`
}

type networkJSON struct {
	NetworkMode   string   `json:"NetworkMode"`
	IPv4Addresses []string `json:"IPv4Addresses,omitempty"`
}

type healthJSON struct {
	Status      string    `json:"status"`
	StatusSince time.Time `json:"statusSince,omitzero"`
	Output      string    `json:"output,omitempty"`
}

type volumeJSON struct {
	DockerName  string `json:"DockerName,omitempty"`
	Source      string `json:"Source"`
	Destination string `json:"Destination"`
}

type taskJSON struct {
	Cluster               string            `json:"Cluster"`
	TaskARN               string            `json:"TaskARN"`
	Family                string            `json:"Family"`
	Revision              string            `json:"Revision"`
	DesiredStatus         string            `json:"DesiredStatus"`
	KnownStatus           string            `json:"KnownStatus"`
	Containers            []containerJSON   `json:"Containers"`
	Limits                *taskLimitsJSON   `json:"Limits,omitempty"`
	PullStartedAt         time.Time         `json:"PullStartedAt,omitzero"`
	PullStoppedAt         time.Time         `json:"PullStoppedAt,omitzero"`
	ExecutionStoppedAt    time.Time         `json:"ExecutionStoppedAt,omitzero"`
	AvailabilityZone      string            `json:"AvailabilityZone"`
	LaunchType            string            `json:"LaunchType"`
	ServiceName           string            `json:"ServiceName,omitempty"`
	TaskTags              map[string]string `json:"TaskTags,omitzero"`
	ContainerInstanceTags map[string]string `json:"ContainerInstanceTags,omitzero"`
}

// taskLimitsJSON has task CPU in vCPUs, as ECS reports it (0.25, not 256).
type taskLimitsJSON struct {
	CPU    float64 `json:"CPU,omitempty"`
	Memory int     `json:"Memory,omitempty"`
}

func containerResponse(t TaskView, c ContainerView) containerJSON {
	out := containerJSON{
		DockerID:      c.RuntimeID,
		Name:          c.Name,
		DockerName:    c.RuntimeName,
		Image:         c.Image,
		ImageID:       c.ImageID,
		Labels:        c.Labels,
		DesiredStatus: c.DesiredStatus,
		KnownStatus:   c.KnownStatus,
		ExitCode:      c.ExitCode,
		Limits:        limitsJSON{CPU: float64(c.CPUUnits), Memory: c.MemoryMiB},
		CreatedAt:     c.CreatedAt,
		StartedAt:     c.StartedAt,
		FinishedAt:    c.FinishedAt,
		Type:          "NORMAL",
		LogDriver:     c.LogDriver,
		LogOptions:    c.LogOptions,
		ContainerARN:  c.ContainerARN,
	}
	for _, p := range c.Ports {
		out.Ports = append(out.Ports, portJSON{ContainerPort: p.ContainerPort, Protocol: p.Protocol, HostPort: p.HostPort, HostIP: p.HostIP})
	}
	if t.NetworkMode != "" {
		out.Networks = []networkJSON{{NetworkMode: t.NetworkMode, IPv4Addresses: c.IPv4}}
	}
	if c.Health != "" {
		out.Health = &healthJSON{Status: c.Health, StatusSince: c.HealthSince, Output: c.HealthOutput}
	}
	for _, v := range c.Volumes {
		out.Volumes = append(out.Volumes, volumeJSON{DockerName: v.Name, Source: v.Source, Destination: v.Destination})
	}
	if c.RestartCount > 0 {
		n := c.RestartCount
		out.RestartCount = &n
	}
	return out
}

func taskResponse(t TaskView, withTags bool) taskJSON {
	out := taskJSON{
		Cluster:            t.Cluster,
		TaskARN:            t.ARN,
		Family:             t.Family,
		Revision:           t.Revision,
		DesiredStatus:      t.DesiredStatus,
		KnownStatus:        t.KnownStatus,
		Containers:         make([]containerJSON, 0, len(t.Containers)),
		PullStartedAt:      t.PullStartedAt,
		PullStoppedAt:      t.PullStoppedAt,
		ExecutionStoppedAt: t.ExecutionStoppedAt,
		AvailabilityZone:   "local",
		LaunchType:         "EC2",
		ServiceName:        t.ServiceName,
	}
	if t.CPUUnits > 0 || t.MemoryMiB > 0 {
		out.Limits = &taskLimitsJSON{CPU: float64(t.CPUUnits) / 1024, Memory: t.MemoryMiB}
	}
	for _, c := range t.Containers {
		out.Containers = append(out.Containers, containerResponse(t, c))
	}
	if withTags {
		out.TaskTags = t.Tags
		if out.TaskTags == nil {
			out.TaskTags = map[string]string{}
		}
		out.ContainerInstanceTags = map[string]string{}
	}
	return out
}
