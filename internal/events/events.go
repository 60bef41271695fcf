// Package events defines the events Capstan records about its resources, in
// the shape Amazon EventBridge delivers ECS events (source aws.ecs), and the
// pure functions that build them from API objects. Recording and listing
// them is the control package's business.
package events

import (
	"encoding/json"
	"time"

	"github.com/capstanhq/capstan/internal/api/shapes"
)

// Source is the event source ECS uses.
const Source = "aws.ecs"

// Detail types.
const (
	TaskStateChange              = "ECS Task State Change"
	ContainerInstanceStateChange = "ECS Container Instance State Change"
	DaemonDeploymentStateChange  = "ECS Daemon Deployment State Change"
	DaemonServiceAction          = "ECS Daemon Service Action"
	// CapacityProviderAction is Capstan's own: a capacity provider could
	// not launch an instance. It is not a daemon's action, so it has its
	// own type and shape rather than borrowing a daemon's.
	CapacityProviderAction = "ECS Capacity Provider Action"
)

// DetailTypes lists every detail type Capstan emits.
var DetailTypes = []string{TaskStateChange, ContainerInstanceStateChange, DaemonDeploymentStateChange, DaemonServiceAction, CapacityProviderAction}

// Event is one EventBridge event. Builders fill the detail type, resources
// and detail; whoever records the event stamps id, time, account and region.
type Event struct {
	Version    string          `json:"version"`
	ID         string          `json:"id"`
	DetailType string          `json:"detail-type"`
	Source     string          `json:"source"`
	Account    string          `json:"account"`
	Time       string          `json:"time"`
	Region     string          `json:"region"`
	Resources  []string        `json:"resources"`
	Detail     json.RawMessage `json:"detail"`
}

func newEvent(detailType string, resources []string, detail any) Event {
	b, err := json.Marshal(detail)
	if err != nil {
		// The detail types below hold only strings, numbers and shapes.
		panic("events: encode detail: " + err.Error())
	}
	if resources == nil {
		resources = []string{}
	}
	return Event{Version: "0", DetailType: detailType, Source: Source, Resources: resources, Detail: b}
}

// EventTime formats the envelope's time (whole seconds, as EventBridge).
func EventTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// iso formats a detail timestamp the way ECS events carry them: UTC with
// milliseconds; the zero time is left out.
func iso(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

// TaskDetail is the detail of an ECS Task State Change.
type TaskDetail struct {
	Attributes           []shapes.Attribute   `json:"attributes,omitempty"`
	AvailabilityZone     string               `json:"availabilityZone,omitempty"`
	CapacityProviderName string               `json:"capacityProviderName,omitempty"`
	ClusterArn           string               `json:"clusterArn"`
	ContainerInstanceArn string               `json:"containerInstanceArn,omitempty"`
	Containers           []ContainerDetail    `json:"containers"`
	Cpu                  string               `json:"cpu,omitempty"`
	CreatedAt            string               `json:"createdAt,omitempty"`
	DesiredStatus        string               `json:"desiredStatus"`
	EnableExecuteCommand bool                 `json:"enableExecuteCommand"`
	ExecutionStoppedAt   string               `json:"executionStoppedAt,omitempty"`
	Group                string               `json:"group,omitempty"`
	HealthStatus         string               `json:"healthStatus,omitempty"`
	LaunchType           string               `json:"launchType,omitempty"`
	LastStatus           string               `json:"lastStatus"`
	Memory               string               `json:"memory,omitempty"`
	Overrides            *shapes.TaskOverride `json:"overrides,omitempty"`
	PullStartedAt        string               `json:"pullStartedAt,omitempty"`
	PullStoppedAt        string               `json:"pullStoppedAt,omitempty"`
	StartedAt            string               `json:"startedAt,omitempty"`
	StartedBy            string               `json:"startedBy,omitempty"`
	StopCode             string               `json:"stopCode,omitempty"`
	StoppedAt            string               `json:"stoppedAt,omitempty"`
	StoppedReason        string               `json:"stoppedReason,omitempty"`
	StoppingAt           string               `json:"stoppingAt,omitempty"`
	TaskArn              string               `json:"taskArn"`
	TaskDefinitionArn    string               `json:"taskDefinitionArn"`
	UpdatedAt            string               `json:"updatedAt"`
	Version              int64                `json:"version"`
}

// ContainerDetail is one container of a TaskDetail.
type ContainerDetail struct {
	ContainerArn      string                  `json:"containerArn"`
	Cpu               string                  `json:"cpu,omitempty"`
	ExitCode          *int32                  `json:"exitCode,omitempty"`
	HealthStatus      string                  `json:"healthStatus,omitempty"`
	Image             string                  `json:"image,omitempty"`
	ImageDigest       string                  `json:"imageDigest,omitempty"`
	LastStatus        string                  `json:"lastStatus"`
	Memory            string                  `json:"memory,omitempty"`
	MemoryReservation string                  `json:"memoryReservation,omitempty"`
	Name              string                  `json:"name"`
	NetworkBindings   []shapes.NetworkBinding `json:"networkBindings,omitempty"`
	Reason            string                  `json:"reason,omitempty"`
	RuntimeID         string                  `json:"runtimeId,omitempty"`
	TaskArn           string                  `json:"taskArn"`
}

// TaskStateChangeEvent builds the event for a task as it now is.
func TaskStateChangeEvent(t shapes.Task, updatedAt time.Time) Event {
	d := TaskDetail{
		Attributes:           t.Attributes,
		AvailabilityZone:     t.AvailabilityZone,
		CapacityProviderName: t.CapacityProviderName,
		ClusterArn:           t.ClusterArn,
		ContainerInstanceArn: t.ContainerInstanceArn,
		Containers:           make([]ContainerDetail, 0, len(t.Containers)),
		Cpu:                  t.Cpu,
		CreatedAt:            iso(t.CreatedAt.Time),
		DesiredStatus:        t.DesiredStatus,
		EnableExecuteCommand: t.EnableExecuteCommand != nil && *t.EnableExecuteCommand,
		ExecutionStoppedAt:   iso(t.ExecutionStoppedAt.Time),
		Group:                t.Group,
		HealthStatus:         t.HealthStatus,
		LaunchType:           t.LaunchType,
		LastStatus:           t.LastStatus,
		Memory:               t.Memory,
		Overrides:            t.Overrides,
		PullStartedAt:        iso(t.PullStartedAt.Time),
		PullStoppedAt:        iso(t.PullStoppedAt.Time),
		StartedAt:            iso(t.StartedAt.Time),
		StartedBy:            t.StartedBy,
		StopCode:             t.StopCode,
		StoppedAt:            iso(t.StoppedAt.Time),
		StoppedReason:        t.StoppedReason,
		StoppingAt:           iso(t.StoppingAt.Time),
		TaskArn:              t.TaskArn,
		TaskDefinitionArn:    t.TaskDefinitionArn,
		UpdatedAt:            iso(updatedAt),
	}
	if t.Version != nil {
		d.Version = *t.Version
	}
	for _, c := range t.Containers {
		d.Containers = append(d.Containers, ContainerDetail{
			ContainerArn: c.ContainerArn, Cpu: c.Cpu, ExitCode: c.ExitCode, HealthStatus: c.HealthStatus,
			Image: c.Image, ImageDigest: c.ImageDigest, LastStatus: c.LastStatus, Memory: c.Memory,
			MemoryReservation: c.MemoryReservation, Name: c.Name, NetworkBindings: c.NetworkBindings,
			Reason: c.Reason, RuntimeID: c.RuntimeId, TaskArn: c.TaskArn,
		})
	}
	return newEvent(TaskStateChange, []string{t.TaskArn}, d)
}

// ContainerInstanceDetail is the detail of an ECS Container Instance State
// Change.
type ContainerInstanceDetail struct {
	AgentConnected       bool                `json:"agentConnected"`
	Attributes           []shapes.Attribute  `json:"attributes"`
	CapacityProviderName string              `json:"capacityProviderName,omitempty"`
	ClusterArn           string              `json:"clusterArn"`
	ContainerInstanceArn string              `json:"containerInstanceArn"`
	Ec2InstanceID        string              `json:"ec2InstanceId,omitempty"`
	RegisteredAt         string              `json:"registeredAt,omitempty"`
	RegisteredResources  []shapes.Resource   `json:"registeredResources"`
	RemainingResources   []shapes.Resource   `json:"remainingResources"`
	Status               string              `json:"status"`
	StatusReason         string              `json:"statusReason,omitempty"`
	UpdatedAt            string              `json:"updatedAt"`
	Version              int64               `json:"version"`
	VersionInfo          *shapes.VersionInfo `json:"versionInfo,omitempty"`
}

// ContainerInstanceStateChangeEvent builds the event for an instance as it
// now is; the API view of an instance does not carry its cluster's ARN.
func ContainerInstanceStateChangeEvent(ci shapes.ContainerInstance, clusterArn string, updatedAt time.Time) Event {
	d := ContainerInstanceDetail{
		AgentConnected:       ci.AgentConnected != nil && *ci.AgentConnected,
		Attributes:           orEmpty(ci.Attributes),
		CapacityProviderName: ci.CapacityProviderName,
		ClusterArn:           clusterArn,
		ContainerInstanceArn: ci.ContainerInstanceArn,
		Ec2InstanceID:        ci.Ec2InstanceId,
		RegisteredAt:         iso(ci.RegisteredAt.Time),
		RegisteredResources:  orEmpty(ci.RegisteredResources),
		RemainingResources:   orEmpty(ci.RemainingResources),
		Status:               ci.Status,
		StatusReason:         ci.StatusReason,
		UpdatedAt:            iso(updatedAt),
		VersionInfo:          ci.VersionInfo,
	}
	if ci.Version != nil {
		d.Version = *ci.Version
	}
	return newEvent(ContainerInstanceStateChange, []string{ci.ContainerInstanceArn}, d)
}

func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// Event types of daemon events.
const (
	TypeInfo    = "INFO"
	TypeWarning = "WARNING"
	TypeError   = "ERROR"
)

// DeploymentChange is a daemon deployment that reached Status.
type DeploymentChange struct {
	Status                  string
	ClusterArn              string
	DaemonArn               string
	DaemonDeploymentArn     string
	TargetDaemonRevisionArn string // empty for a DeleteDaemon deployment
	UpdatedAt               time.Time
}

// DeploymentDetail is the detail of an ECS Daemon Deployment State Change.
type DeploymentDetail struct {
	EventType               string `json:"eventType"`
	EventName               string `json:"eventName"`
	ClusterArn              string `json:"clusterArn"`
	DaemonArn               string `json:"daemonArn"`
	DaemonDeploymentArn     string `json:"daemonDeploymentArn"`
	TargetDaemonRevisionArn string `json:"targetDaemonRevisionArn,omitempty"`
	UpdatedAt               string `json:"updatedAt"`
}

// DaemonDeploymentStateChangeEvent builds the event for a deployment
// transition. Only a failed rollback is an ERROR; every other state is INFO.
func DaemonDeploymentStateChangeEvent(c DeploymentChange) Event {
	typ := TypeInfo
	if c.Status == "ROLLBACK_FAILED" {
		typ = TypeError
	}
	d := DeploymentDetail{
		EventType:               typ,
		EventName:               "DAEMON_DEPLOYMENT_" + c.Status,
		ClusterArn:              c.ClusterArn,
		DaemonArn:               c.DaemonArn,
		DaemonDeploymentArn:     c.DaemonDeploymentArn,
		TargetDaemonRevisionArn: c.TargetDaemonRevisionArn,
		// ECS shows nanoseconds here, unlike its other event timestamps.
		UpdatedAt: c.UpdatedAt.UTC().Format("2006-01-02T15:04:05.000000000Z"),
	}
	return newEvent(DaemonDeploymentStateChange, []string{c.DaemonArn}, d)
}

// Failure types of a daemon task that did not start.
const (
	// TaskFailedToRun: the task was created but never ran (image pull,
	// health check, an essential container exiting).
	TaskFailedToRun = "TASK_FAILED_TO_RUN"
	// TaskCreationFailed: no task could be created (not enough CPU or
	// memory on the instance, for one).
	TaskCreationFailed = "TASK_CREATION_FAILED"
)

// StartFailure is a daemon task that failed to start on an instance.
type StartFailure struct {
	FailureType             string // TaskFailedToRun or TaskCreationFailed
	ClusterArn              string
	ContainerInstanceArn    string
	TaskArn                 string // only for TaskFailedToRun
	DaemonArn               string
	DaemonRevisionArn       string
	DaemonTaskDefinitionArn string
	CapacityProviderName    string
	CreatedAt               time.Time
	Reason                  string
}

// ServiceActionDetail is the detail of an ECS Daemon Service Action.
type ServiceActionDetail struct {
	EventType               string `json:"eventType"`
	EventName               string `json:"eventName"`
	ClusterArn              string `json:"clusterArn"`
	ContainerInstanceArn    string `json:"containerInstanceArn"`
	TaskArn                 string `json:"taskArn,omitempty"`
	DaemonRevisionArn       string `json:"daemonRevisionArn"`
	CapacityProviderName    string `json:"capacityProviderName"`
	DaemonArn               string `json:"daemonArn"`
	DaemonTaskDefinitionArn string `json:"daemonTaskDefinitionArn"`
	FailureType             string `json:"failureType"`
	CreatedAt               string `json:"createdAt"`
	Reason                  string `json:"reason"`
}

// DaemonTaskStartImpairedEvent builds the warning for a daemon task that
// did not start. A task that was never created has no ARN to name, so the
// task ARN is dropped for TaskCreationFailed.
func DaemonTaskStartImpairedEvent(f StartFailure) Event {
	d := ServiceActionDetail{
		EventType:               TypeWarning,
		EventName:               "DAEMON_TASK_START_IMPAIRED",
		ClusterArn:              f.ClusterArn,
		ContainerInstanceArn:    f.ContainerInstanceArn,
		DaemonRevisionArn:       f.DaemonRevisionArn,
		CapacityProviderName:    f.CapacityProviderName,
		DaemonArn:               f.DaemonArn,
		DaemonTaskDefinitionArn: f.DaemonTaskDefinitionArn,
		FailureType:             f.FailureType,
		CreatedAt:               iso(f.CreatedAt),
		Reason:                  f.Reason,
	}
	var resources []string
	if f.FailureType != TaskCreationFailed && f.TaskArn != "" {
		d.TaskArn = f.TaskArn
		resources = []string{f.TaskArn}
	}
	return newEvent(DaemonServiceAction, resources, d)
}

// LaunchFailure is an instance a capacity provider failed to launch.
type LaunchFailure struct {
	ClusterArn           string
	CapacityProviderArn  string
	CapacityProviderName string
	// FailureType is the provisioner's code for the failure (EC2's error
	// code: a capacity code, or LaunchFailed).
	FailureType string
	CreatedAt   time.Time
	Reason      string
}

// LaunchImpairedDetail is the detail of an ECS Capacity Provider Action.
type LaunchImpairedDetail struct {
	EventType            string `json:"eventType"`
	EventName            string `json:"eventName"`
	ClusterArn           string `json:"clusterArn"`
	CapacityProviderArn  string `json:"capacityProviderArn"`
	CapacityProviderName string `json:"capacityProviderName"`
	FailureType          string `json:"failureType"`
	CreatedAt            string `json:"createdAt"`
	Reason               string `json:"reason"`
}

// InstanceLaunchImpaired is the event name of a failed instance launch.
const InstanceLaunchImpaired = "MANAGED_INSTANCE_LAUNCH_IMPAIRED"

// InstanceLaunchImpairedEvent builds the warning for an instance a
// capacity provider could not launch; its resource is the provider.
func InstanceLaunchImpairedEvent(f LaunchFailure) Event {
	d := LaunchImpairedDetail{
		EventType:            TypeWarning,
		EventName:            InstanceLaunchImpaired,
		ClusterArn:           f.ClusterArn,
		CapacityProviderArn:  f.CapacityProviderArn,
		CapacityProviderName: f.CapacityProviderName,
		FailureType:          f.FailureType,
		CreatedAt:            iso(f.CreatedAt),
		Reason:               f.Reason,
	}
	var resources []string
	if f.CapacityProviderArn != "" {
		resources = []string{f.CapacityProviderArn}
	}
	return newEvent(CapacityProviderAction, resources, d)
}
