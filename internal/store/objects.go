package store

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/api/shapes"
)

// Keys, relative to the store prefix. Cluster-scoped objects carry the
// cluster name so that a cluster's objects list with one prefix scan.

func ClusterKey(name string) string             { return "clusters/" + name }
func CapacityProviderKey(name string) string    { return "capacityproviders/" + name }
func TaskDefinitionFamilyKey(f string) string   { return "taskdeffamilies/" + f }
func TaskDefinitionPrefix(family string) string { return "taskdefs/" + family + "/" }
func TaskDefinitionKey(family string, rev int) string {
	return fmt.Sprintf("taskdefs/%s/%08d", family, rev)
}
func DaemonTaskDefinitionFamilyKey(f string) string { return "daemontaskdeffamilies/" + f }
func DaemonTaskDefinitionPrefix(family string) string {
	return "daemontaskdefs/" + family + "/"
}
func DaemonTaskDefinitionKey(family string, rev int) string {
	return fmt.Sprintf("daemontaskdefs/%s/%08d", family, rev)
}
func DaemonPrefix(cluster string) string    { return "daemons/" + cluster + "/" }
func DaemonKey(cluster, name string) string { return "daemons/" + cluster + "/" + name }
func DaemonRevisionPrefix(cluster, daemon string) string {
	return "daemonrevisions/" + cluster + "/" + daemon + "/"
}
func DaemonRevisionKey(cluster, daemon, id string) string {
	return DaemonRevisionPrefix(cluster, daemon) + id
}
func DaemonDeploymentPrefix(cluster, daemon string) string {
	return "daemondeployments/" + cluster + "/" + daemon + "/"
}
func DaemonDeploymentKey(cluster, daemon, id string) string {
	return DaemonDeploymentPrefix(cluster, daemon) + id
}

// Cluster is the stored cluster; counts are derived when described.
type Cluster struct {
	shapes.Cluster
	CreatedAt time.Time `json:"capstanCreatedAt"`
}

// CapacityProvider is the stored capacity provider (cluster-scoped for
// managed instances).
type CapacityProvider struct {
	shapes.CapacityProvider
	CreatedAt time.Time `json:"capstanCreatedAt"`
}

// Family records the last revision number handed out for a family, so
// numbers are never reused even after revisions are deleted.
type Family struct {
	Name         string `json:"name"`
	LastRevision int    `json:"lastRevision"`
}

// TaskDefinition is one immutable task definition revision.
type TaskDefinition struct {
	shapes.TaskDefinition
	Tags []shapes.Tag `json:"tags,omitempty"`
}

// DaemonTaskDefinition is one immutable daemon task definition revision.
type DaemonTaskDefinition struct {
	shapes.DaemonTaskDefinition
	Tags []shapes.Tag `json:"tags,omitempty"`
}

// DaemonSpec is the full configuration a Create/UpdateDaemon call asked for,
// defaults filled in.
type DaemonSpec struct {
	TaskDefinitionArn       string                               `json:"daemonTaskDefinitionArn"`
	CapacityProviderArns    []string                             `json:"capacityProviderArns"`
	DeploymentConfiguration shapes.DaemonDeploymentConfiguration `json:"deploymentConfiguration"`
	Critical                bool                                 `json:"critical"`
	PropagateTags           string                               `json:"propagateTags"`
	EnableECSManagedTags    bool                                 `json:"enableECSManagedTags"`
	EnableExecuteCommand    bool                                 `json:"enableExecuteCommand"`
}

// Daemon is the stored daemon.
type Daemon struct {
	Name       string       `json:"name"`
	Arn        string       `json:"arn"`
	Cluster    string       `json:"cluster"`
	ClusterArn string       `json:"clusterArn"`
	Status     string       `json:"status"`
	CreatedAt  time.Time    `json:"createdAt"`
	UpdatedAt  time.Time    `json:"updatedAt"`
	Tags       []shapes.Tag `json:"tags,omitempty"`
	Spec       DaemonSpec   `json:"spec"`
	// RevisionArn is the revision of the latest Create/UpdateDaemon call.
	RevisionArn string `json:"revisionArn"`
	// DeploymentArn is the most recent deployment.
	DeploymentArn string `json:"deploymentArn"`
	// CreateDeploymentArn is the deployment CreateDaemon started.
	CreateDeploymentArn string `json:"createDeploymentArn"`
	// ClientToken and RequestHash make CreateDaemon idempotent.
	ClientToken string `json:"clientToken,omitempty"`
	RequestHash string `json:"requestHash,omitempty"`
}

// DaemonRevision is an immutable snapshot of a daemon's configuration.
type DaemonRevision struct {
	shapes.DaemonRevision
	ID                      string                               `json:"capstanId"`
	CapacityProviderArns    []string                             `json:"capstanCapacityProviderArns"`
	DeploymentConfiguration shapes.DaemonDeploymentConfiguration `json:"capstanDeploymentConfiguration"`
}

// DaemonDeployment is one rollout of a daemon towards a target revision
// (none for a delete). Controllers drive it; the API only creates it and,
// when it has nothing to do, completes it.
type DaemonDeployment struct {
	shapes.DaemonDeployment
	ID        string `json:"capstanId"`
	DaemonArn string `json:"capstanDaemonArn"`
	Daemon    string `json:"capstanDaemon"`
	Cluster   string `json:"capstanCluster"`
	// TargetRevisionArn is empty for a DeleteDaemon deployment.
	TargetRevisionArn string `json:"capstanTargetRevisionArn,omitempty"`
	// SourceRevisionArns are the revisions the deployment replaces.
	SourceRevisionArns []string `json:"capstanSourceRevisionArns,omitempty"`
	// CapacityProviderArns in scope: the target's plus the sources'.
	CapacityProviderArns []string `json:"capstanCapacityProviderArns,omitempty"`
	Rollout              Rollout  `json:"capstanRollout"`
}

// Rollout is the rollout engine's own record of a deployment: what it is
// replacing now and why it may not be moving.
type Rollout struct {
	// BatchSize is how many instances may be replaced at once.
	BatchSize int `json:"batchSize,omitempty"`
	// Replacing are the instances being replaced now, at most BatchSize.
	Replacing []Replacement `json:"replacing,omitempty"`
	// Filling was how many more instances a batch still took when batches
	// waited for each other; read from older records, no longer written.
	Filling int `json:"filling,omitempty"`
	// OnTarget is how many instances ran the target at the last look.
	OnTarget int `json:"onTarget,omitempty"`
	// RollbackFailures counts failed starts of the rollback target.
	RollbackFailures int `json:"rollbackFailures,omitempty"`
	// AlarmError is why the alarms could not be read at the last look.
	AlarmError string `json:"alarmError,omitempty"`
	// Replaced counts instances the deployment has finished replacing.
	Replaced int `json:"replaced,omitempty"`
	// LastProgressAt is when an instance last reached the target; the
	// progress deadline counts from it.
	LastProgressAt time.Time `json:"lastProgressAt,omitzero"`
	// BakeUntil is the end of the bake window, once every instance is on
	// the target.
	BakeUntil time.Time `json:"bakeUntil,omitzero"`
	// FiringAtStart are alarms already firing when the deployment started;
	// they are ignored.
	FiringAtStart []string `json:"firingAtStart,omitempty"`
	// Stalled says why the rollout is not progressing: "" when it is.
	Stalled *Stall `json:"stalled,omitempty"`
	// StopReasons are the latest stop reasons of failed target tasks.
	StopReasons []string `json:"stopReasons,omitempty"`
}

// Replacement is one instance of a rollout batch: a managed instance is
// drained and replaced by a new one (ManagedInstance names it); an
// instance Capstan did not provision is changed in place.
type Replacement struct {
	Instance        string `json:"instance"`
	ManagedInstance string `json:"managedInstance,omitempty"`
	InPlace         bool   `json:"inPlace,omitempty"`
}

// Stall kinds: a bad release, instances that cannot be provisioned, or
// instances that are unhealthy or lost.
const (
	StallRevisionFailing    = "REVISION_FAILING"
	StallProvisioning       = "PROVISIONING"
	StallInstancesUnhealthy = "INSTANCES_UNHEALTHY"
)

// Stall is why a rollout does not progress, in words.
type Stall struct {
	Kind    string    `json:"kind"`
	Message string    `json:"message"`
	Since   time.Time `json:"since"`
}

func ContainerInstancePrefix(cluster string) string { return "containerinstances/" + cluster + "/" }
func ContainerInstanceKey(cluster, id string) string {
	return ContainerInstancePrefix(cluster) + id
}
func TaskPrefix(cluster string) string  { return "tasks/" + cluster + "/" }
func TaskKey(cluster, id string) string { return TaskPrefix(cluster) + id }
func DesiredPrefix(cluster, instance string) string {
	return "desired/" + cluster + "/" + instance + "/"
}
func DesiredKey(cluster, instance, task string) string {
	return DesiredPrefix(cluster, instance) + task
}
func CredentialKey(accessKeyID string) string { return "credentials/" + accessKeyID }
func SessionKey(cluster, instance string) string {
	return "sessions/" + cluster + "/" + instance
}

// ContainerInstance is an instance registered in a cluster. Its
// remainingResources are kept exact: every placement and every release
// changes them in the same transaction as the task.
type ContainerInstance struct {
	shapes.ContainerInstance
	ID      string `json:"capstanId"`
	Cluster string `json:"capstanCluster"`
	// AccessKeyID is the agent credential bound to the instance.
	AccessKeyID string `json:"capstanAccessKeyId,omitempty"`
	// Fingerprint identifies the host for idempotent re-registration.
	Fingerprint string `json:"capstanFingerprint,omitempty"`
	// Ports reserved on the instance, by "tcp/80"-style key, for placement.
	UsedPorts map[string]string `json:"capstanUsedPorts,omitempty"`
	// InactiveAt is when the instance was deregistered; it is deleted once
	// its retention has passed since (control.ExpireInactiveInstances).
	InactiveAt time.Time `json:"capstanInactiveAt,omitzero"`
	// CustomAttributes names the attributes PutAttributes set: they outlive
	// the agent's re-registration, which replaces the rest.
	CustomAttributes []string `json:"capstanCustomAttributes,omitempty"`
}

// Reservation is what a task holds on its instance while it is not STOPPED.
type Reservation struct {
	CPU    int      `json:"cpu"`
	Memory int      `json:"memory"`
	Ports  []string `json:"ports,omitempty"` // "tcp/8080"
}

// Task is the API view of a task plus what the control plane needs.
type Task struct {
	shapes.Task
	ID         string `json:"capstanId"`
	Cluster    string `json:"capstanCluster"`
	InstanceID string `json:"capstanInstanceId"`
	Kind       string `json:"capstanKind"`
	// Reserved is released when the task reaches STOPPED.
	Reserved *Reservation `json:"capstanReserved,omitempty"`
	// StateSeq is the agent's sequence of the last state written.
	StateSeq uint64 `json:"capstanStateSeq,omitempty"`
	// HostAccess is the grant of the host access its definition asks for,
	// given by an authorized API call (protocol.Task.HostAccess).
	HostAccess bool `json:"capstanHostAccess,omitempty"`
	// ProtectedUntil is when the task's scale-in protection
	// (UpdateTaskProtection) ends; zero when it has none.
	ProtectedUntil time.Time `json:"capstanProtectedUntil,omitzero"`
}

// AgentCredential is a credential minted for agents. It binds to the first
// instance it registers and may act for that instance only.
type AgentCredential struct {
	AccessKeyID string `json:"accessKeyId"`
	// SecretAccessKey is the secret in memory; etcd holds it sealed
	// (sealed.go), or, as written before secrets were sealed, in the clear.
	SecretAccessKey       string `json:"secretAccessKey,omitempty"`
	SealedSecretAccessKey string `json:"sealedSecretAccessKey,omitempty"`
	Cluster               string `json:"cluster"`
	InstanceID            string `json:"instanceId,omitempty"`
	// CapacityProvider, for credentials of provisioned instances.
	CapacityProvider string    `json:"capacityProvider,omitempty"`
	CreatedAt        time.Time `json:"createdAt"`
	Description      string    `json:"description,omitempty"`
	// Managed credentials belong to one provisioned instance for its whole
	// life: once it is deregistered they register nothing else.
	Managed bool `json:"managed,omitempty"`
}

// Session marks an instance whose agent is connected; it lives on an etcd
// lease, so it vanishes when the serving server stops renewing it.
type Session struct {
	Server      string    `json:"server"`
	ConnectedAt time.Time `json:"connectedAt"`
}

func ServicePrefix(cluster string) string    { return "services/" + cluster + "/" }
func ServiceKey(cluster, name string) string { return ServicePrefix(cluster) + name }

// ServiceEventsKey holds a service's recent events apart from the service,
// so that recording one neither conflicts with UpdateService nor wakes the
// services controller.
func ServiceEventsKey(cluster, name string) string {
	return "serviceevents/" + cluster + "/" + name
}

// Service is the stored service. Deployments hold the PRIMARY deployment
// and the ACTIVE ones that still have tasks; task counts and events are
// derived when the service is described.
type Service struct {
	shapes.Service
	Cluster string `json:"capstanCluster"`
	// ClientToken and RequestHash make CreateService idempotent.
	ClientToken string `json:"capstanClientToken,omitempty"`
	RequestHash string `json:"capstanRequestHash,omitempty"`
	// InactiveAt is when the service became INACTIVE; the record is removed
	// a while later.
	InactiveAt time.Time `json:"capstanInactiveAt,omitzero"`
	// HostAccess is the grant its tasks get: set by the authorized
	// CreateService or UpdateService that chose its task definition.
	HostAccess bool `json:"capstanHostAccess,omitempty"`
}

// Account settings (PutAccountSetting) are keyed by the principal they
// apply to, path-escaped; the root's hold the account's defaults.
func AccountSettingPrefix(principal string) string {
	return "accountsettings/" + url.PathEscape(principal) + "/"
}
func AccountSettingKey(principal, name string) string { return AccountSettingPrefix(principal) + name }

// ServiceEvents are a service's most recent events, newest first.
type ServiceEvents struct {
	Events []shapes.ServiceEvent `json:"events"`
}

// Events are keyed by time-ordered IDs so that a cluster's events list
// oldest first; they live on shared leases and expire on their own.
func EventPrefix(cluster string) string  { return "events/" + cluster + "/" }
func EventKey(cluster, id string) string { return EventPrefix(cluster) + id }

// IAM identities and their policies (internal/iam). IAM names are unique
// regardless of case, so keys carry the lower-cased name and the records
// the name as it was created.

func IAMUserPrefix() string               { return "iam/users/" }
func IAMUserKey(name string) string       { return IAMUserPrefix() + strings.ToLower(name) }
func IAMGroupPrefix() string              { return "iam/groups/" }
func IAMGroupKey(name string) string      { return IAMGroupPrefix() + strings.ToLower(name) }
func IAMPolicyPrefix() string             { return "iam/policies/" }
func IAMPolicyKey(name string) string     { return IAMPolicyPrefix() + strings.ToLower(name) }
func IAMAccessKeyPrefix() string          { return "iam/accesskeys/" }
func IAMAccessKeyKey(keyID string) string { return IAMAccessKeyPrefix() + keyID }
