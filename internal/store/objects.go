package store

import (
	"fmt"
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
}

func ContainerInstancePrefix(cluster string) string { return "containerinstances/" + cluster + "/" }

// ContainerInstance is an instance registered in a cluster.
type ContainerInstance struct {
	shapes.ContainerInstance
	Cluster string `json:"capstanCluster"`
}
