package events

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/api/shapes"
)

const (
	clusterArn  = "arn:aws:ecs:us-east-1:123456789012:cluster/fleet"
	taskArn     = "arn:aws:ecs:us-east-1:123456789012:task/fleet/0123456789abcdef0123456789abcdef"
	instanceArn = "arn:aws:ecs:us-east-1:123456789012:container-instance/fleet/fedcba9876543210fedcba9876543210"
	daemonArn   = "arn:aws:ecs:us-east-1:123456789012:daemon/fleet/monitoring"
	deployArn   = "arn:aws:ecs:us-east-1:123456789012:daemon-deployment/fleet/monitoring/AbCdEf"
	revisionArn = "arn:aws:ecs:us-east-1:123456789012:daemon-revision/fleet/monitoring/1234567890123456789"
	daemonTDArn = "arn:aws:ecs:us-east-1:123456789012:daemon-task-definition/agent:3"
)

var at = time.Date(2026, 3, 14, 15, 9, 26, 535_897_932, time.UTC)

func ptr[T any](v T) *T { return &v }

// detail decodes an event's detail generically, as a consumer would.
func detail(t *testing.T, e Event) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(e.Detail, &m); err != nil {
		t.Fatalf("detail is not a JSON object: %v\n%s", err, e.Detail)
	}
	return m
}

func TestEnvelope(t *testing.T) {
	e := TaskStateChangeEvent(shapes.Task{TaskArn: taskArn}, at)
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	json.Unmarshal(b, &m)
	for _, k := range []string{"version", "id", "detail-type", "source", "account", "time", "region", "resources", "detail"} {
		if _, ok := m[k]; !ok {
			t.Errorf("envelope lacks %q: %s", k, b)
		}
	}
	if m["version"] != "0" || m["source"] != "aws.ecs" || m["detail-type"] != TaskStateChange {
		t.Errorf("envelope %s", b)
	}
	if got := EventTime(at.In(time.FixedZone("x", 3600))); got != "2026-03-14T15:09:26Z" {
		t.Errorf("EventTime = %s", got)
	}
}

func TestTaskStateChange(t *testing.T) {
	base := shapes.Task{
		TaskArn: taskArn, ClusterArn: clusterArn, ContainerInstanceArn: instanceArn,
		TaskDefinitionArn: "arn:aws:ecs:us-east-1:123456789012:task-definition/web:1",
		LastStatus:        "RUNNING", DesiredStatus: "RUNNING", Group: "family:web", StartedBy: "me",
		LaunchType: "EC2", Cpu: "128", Memory: "256", Version: ptr(int64(3)),
		CreatedAt: shapes.At(at.Add(-time.Minute)), StartedAt: shapes.At(at),
		Containers: []shapes.Container{{ContainerArn: "c1", TaskArn: taskArn, Name: "web", Image: "busybox", LastStatus: "RUNNING", RuntimeId: "abc"}},
	}
	stopped := base
	stopped.LastStatus, stopped.DesiredStatus = "STOPPED", "STOPPED"
	stopped.StopCode, stopped.StoppedReason = "EssentialContainerExited", "Essential container in task exited"
	stopped.StoppedAt = shapes.At(at)
	stopped.Containers = []shapes.Container{{ContainerArn: "c1", TaskArn: taskArn, Name: "web", LastStatus: "STOPPED", ExitCode: ptr(int32(1))}}

	cases := []struct {
		name    string
		task    shapes.Task
		want    map[string]any
		absent  []string
		summary string
	}{
		{"running", base, map[string]any{
			"clusterArn": clusterArn, "taskArn": taskArn, "containerInstanceArn": instanceArn,
			"lastStatus": "RUNNING", "desiredStatus": "RUNNING", "group": "family:web", "startedBy": "me",
			"version": 3.0, "createdAt": "2026-03-14T15:08:26.535Z", "startedAt": "2026-03-14T15:09:26.535Z",
			"updatedAt": "2026-03-14T15:09:26.535Z", "enableExecuteCommand": false,
		}, []string{"stoppedAt", "stopCode", "stoppedReason", "pullStartedAt"}, "RUNNING (desired RUNNING) family:web"},
		{"stopped", stopped, map[string]any{
			"lastStatus": "STOPPED", "desiredStatus": "STOPPED", "stopCode": "EssentialContainerExited",
			"stoppedReason": "Essential container in task exited", "stoppedAt": "2026-03-14T15:09:26.535Z",
		}, nil, "STOPPED (desired STOPPED) family:web: EssentialContainerExited: Essential container in task exited"},
		{"no containers", shapes.Task{TaskArn: taskArn, LastStatus: "PENDING", DesiredStatus: "RUNNING"},
			map[string]any{"containers": []any{}, "version": 0.0}, nil, "PENDING (desired RUNNING)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := TaskStateChangeEvent(c.task, at)
			if e.DetailType != TaskStateChange || !reflect.DeepEqual(e.Resources, []string{taskArn}) {
				t.Fatalf("event %+v", e)
			}
			d := detail(t, e)
			for k, v := range c.want {
				if !reflect.DeepEqual(d[k], v) {
					t.Errorf("%s = %#v, want %#v", k, d[k], v)
				}
			}
			for _, k := range c.absent {
				if _, ok := d[k]; ok {
					t.Errorf("%s present: %v", k, d[k])
				}
			}
			if got := e.Summary(); got != c.summary {
				t.Errorf("summary %q, want %q", got, c.summary)
			}
		})
	}
	d := detail(t, TaskStateChangeEvent(stopped, at))
	c := d["containers"].([]any)[0].(map[string]any)
	if c["exitCode"] != 1.0 || c["name"] != "web" || c["taskArn"] != taskArn || c["lastStatus"] != "STOPPED" {
		t.Errorf("container %v", c)
	}
}

func TestContainerInstanceStateChange(t *testing.T) {
	res := []shapes.Resource{{Name: "CPU", Type: "INTEGER", IntegerValue: ptr(int32(1024))}}
	cases := []struct {
		name      string
		ci        shapes.ContainerInstance
		connected bool
		status    string
		summary   string
	}{
		{"registered", shapes.ContainerInstance{ContainerInstanceArn: instanceArn, Status: "ACTIVE", AgentConnected: ptr(true),
			RegisteredResources: res, RemainingResources: res, Version: ptr(int64(2))}, true, "ACTIVE", "ACTIVE, agent connected"},
		{"draining", shapes.ContainerInstance{ContainerInstanceArn: instanceArn, Status: "DRAINING", AgentConnected: ptr(false)},
			false, "DRAINING", "DRAINING, agent disconnected"},
		{"unknown agent", shapes.ContainerInstance{ContainerInstanceArn: instanceArn, Status: "INACTIVE"},
			false, "INACTIVE", "INACTIVE, deregistered"},
		{"deregistered, agent on its way out", shapes.ContainerInstance{ContainerInstanceArn: instanceArn, Status: "INACTIVE", AgentConnected: ptr(true)},
			true, "INACTIVE", "INACTIVE, deregistered"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := ContainerInstanceStateChangeEvent(c.ci, clusterArn, at)
			if e.DetailType != ContainerInstanceStateChange || !reflect.DeepEqual(e.Resources, []string{instanceArn}) {
				t.Fatalf("event %+v", e)
			}
			d := detail(t, e)
			if d["agentConnected"] != c.connected || d["status"] != c.status || d["clusterArn"] != clusterArn ||
				d["containerInstanceArn"] != instanceArn || d["updatedAt"] != "2026-03-14T15:09:26.535Z" {
				t.Errorf("detail %v", d)
			}
			// Resource lists are present even when empty, as in ECS.
			for _, k := range []string{"registeredResources", "remainingResources", "attributes"} {
				if _, ok := d[k].([]any); !ok {
					t.Errorf("%s = %#v, want a list", k, d[k])
				}
			}
			if got := e.Summary(); got != c.summary {
				t.Errorf("summary %q, want %q", got, c.summary)
			}
		})
	}
}

func TestDaemonDeploymentStateChange(t *testing.T) {
	cases := []struct {
		status, eventType, eventName string
	}{
		{"PENDING", "INFO", "DAEMON_DEPLOYMENT_PENDING"},
		{"IN_PROGRESS", "INFO", "DAEMON_DEPLOYMENT_IN_PROGRESS"},
		{"SUCCESSFUL", "INFO", "DAEMON_DEPLOYMENT_SUCCESSFUL"},
		{"STOPPED", "INFO", "DAEMON_DEPLOYMENT_STOPPED"},
		{"STOP_REQUESTED", "INFO", "DAEMON_DEPLOYMENT_STOP_REQUESTED"},
		{"ROLLBACK_IN_PROGRESS", "INFO", "DAEMON_DEPLOYMENT_ROLLBACK_IN_PROGRESS"},
		{"ROLLBACK_SUCCESSFUL", "INFO", "DAEMON_DEPLOYMENT_ROLLBACK_SUCCESSFUL"},
		{"ROLLBACK_FAILED", "ERROR", "DAEMON_DEPLOYMENT_ROLLBACK_FAILED"},
	}
	for _, c := range cases {
		t.Run(c.status, func(t *testing.T) {
			e := DaemonDeploymentStateChangeEvent(DeploymentChange{Status: c.status, ClusterArn: clusterArn, DaemonArn: daemonArn,
				DaemonDeploymentArn: deployArn, TargetDaemonRevisionArn: revisionArn, UpdatedAt: at})
			if e.DetailType != DaemonDeploymentStateChange || !reflect.DeepEqual(e.Resources, []string{daemonArn}) {
				t.Fatalf("event %+v", e)
			}
			want := map[string]any{"eventType": c.eventType, "eventName": c.eventName, "clusterArn": clusterArn, "daemonArn": daemonArn,
				"daemonDeploymentArn": deployArn, "targetDaemonRevisionArn": revisionArn, "updatedAt": "2026-03-14T15:09:26.535897932Z"}
			if d := detail(t, e); !reflect.DeepEqual(d, want) {
				t.Errorf("detail %v\nwant   %v", d, want)
			}
			if got := e.Summary(); got != c.eventName+" AbCdEf" {
				t.Errorf("summary %q", got)
			}
		})
	}
	// A delete deployment has no target revision.
	e := DaemonDeploymentStateChangeEvent(DeploymentChange{Status: "SUCCESSFUL", DaemonArn: daemonArn, UpdatedAt: at})
	if _, ok := detail(t, e)["targetDaemonRevisionArn"]; ok {
		t.Errorf("delete deployment names a target: %s", e.Detail)
	}
}

func TestDaemonTaskStartImpaired(t *testing.T) {
	base := StartFailure{ClusterArn: clusterArn, ContainerInstanceArn: instanceArn, TaskArn: taskArn, DaemonArn: daemonArn,
		DaemonRevisionArn: revisionArn, DaemonTaskDefinitionArn: daemonTDArn, CapacityProviderName: "fleet-mi", CreatedAt: at,
		Reason: "CannotPullContainerError: pull access denied"}
	cases := []struct {
		name      string
		failure   string
		resources []string
		taskArn   any
		summary   string
	}{
		{"failed to run", TaskFailedToRun, []string{taskArn}, taskArn,
			"DAEMON_TASK_START_IMPAIRED TASK_FAILED_TO_RUN: CannotPullContainerError: pull access denied"},
		{"creation failed", TaskCreationFailed, []string{}, nil,
			"DAEMON_TASK_START_IMPAIRED TASK_CREATION_FAILED: CannotPullContainerError: pull access denied"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := base
			f.FailureType = c.failure
			e := DaemonTaskStartImpairedEvent(f)
			if e.DetailType != DaemonServiceAction || !reflect.DeepEqual(e.Resources, c.resources) {
				t.Fatalf("event %+v", e)
			}
			d := detail(t, e)
			if d["taskArn"] != c.taskArn {
				t.Errorf("taskArn %v, want %v", d["taskArn"], c.taskArn)
			}
			for k, v := range map[string]any{"eventType": "WARNING", "eventName": "DAEMON_TASK_START_IMPAIRED", "failureType": c.failure,
				"clusterArn": clusterArn, "containerInstanceArn": instanceArn, "daemonArn": daemonArn, "daemonRevisionArn": revisionArn,
				"daemonTaskDefinitionArn": daemonTDArn, "capacityProviderName": "fleet-mi", "createdAt": "2026-03-14T15:09:26.535Z",
				"reason": base.Reason} {
				if d[k] != v {
					t.Errorf("%s = %v, want %v", k, d[k], v)
				}
			}
			if got := e.Summary(); got != c.summary {
				t.Errorf("summary %q", got)
			}
			// Without a task the event is about its daemon.
			subject := daemonArn
			if len(c.resources) > 0 {
				subject = c.resources[0]
			}
			if got := e.Subject(); got != subject {
				t.Errorf("subject %q, want %q", got, subject)
			}
		})
	}
}

func TestMentions(t *testing.T) {
	failure := DaemonTaskStartImpairedEvent(StartFailure{FailureType: TaskCreationFailed, DaemonArn: daemonArn, ContainerInstanceArn: instanceArn})
	deploy := DaemonDeploymentStateChangeEvent(DeploymentChange{Status: "PENDING", DaemonArn: daemonArn, DaemonDeploymentArn: deployArn})
	task := TaskStateChangeEvent(shapes.Task{TaskArn: taskArn, Group: "daemon:monitoring"}, at)
	cases := []struct {
		name string
		e    Event
		ref  string
		want bool
	}{
		{"resource", deploy, daemonArn, true},
		{"detail only", failure, daemonArn, true},
		{"nested detail", task, taskArn, true},
		{"other daemon", deploy, daemonArn + "2", false},
		{"prefix of a value", failure, daemonArn[:20], false},
		{"member name", deploy, "daemonArn", false},
		{"empty", deploy, "", false},
	}
	for _, c := range cases {
		if got := c.e.Mentions(c.ref); got != c.want {
			t.Errorf("%s: Mentions(%q) = %v", c.name, c.ref, got)
		}
	}
}

// A failed instance launch is its own detail type and shape, about the
// capacity provider; it borrows nothing of a daemon's.
func TestInstanceLaunchImpaired(t *testing.T) {
	cpArn := "arn:aws:ecs:us-east-1:123456789012:capacity-provider/fleet-mi"
	e := InstanceLaunchImpairedEvent(LaunchFailure{ClusterArn: clusterArn, CapacityProviderArn: cpArn, CapacityProviderName: "fleet-mi",
		FailureType: "InsufficientInstanceCapacity", CreatedAt: at, Reason: "no capacity in us-east-1a"})
	if e.DetailType != CapacityProviderAction || e.DetailType == DaemonServiceAction || !reflect.DeepEqual(e.Resources, []string{cpArn}) {
		t.Fatalf("event %+v", e)
	}
	if !slices.Contains(DetailTypes, CapacityProviderAction) {
		t.Errorf("DetailTypes %v lacks %s", DetailTypes, CapacityProviderAction)
	}
	want := map[string]any{"eventType": "WARNING", "eventName": "MANAGED_INSTANCE_LAUNCH_IMPAIRED", "clusterArn": clusterArn,
		"capacityProviderArn": cpArn, "capacityProviderName": "fleet-mi", "failureType": "InsufficientInstanceCapacity",
		"createdAt": "2026-03-14T15:09:26.535Z", "reason": "no capacity in us-east-1a"}
	if d := detail(t, e); !reflect.DeepEqual(d, want) {
		t.Errorf("detail %v\nwant   %v", d, want)
	}
	if got := e.Summary(); got != "MANAGED_INSTANCE_LAUNCH_IMPAIRED InsufficientInstanceCapacity: no capacity in us-east-1a" {
		t.Errorf("summary %q", got)
	}
	if got := e.Subject(); got != cpArn {
		t.Errorf("subject %q", got)
	}
	if !e.Mentions(cpArn) || !e.Mentions("fleet-mi") {
		t.Error("the event does not mention its capacity provider")
	}
	// Without the provider's ARN the event is still about it, by name.
	e = InstanceLaunchImpairedEvent(LaunchFailure{ClusterArn: clusterArn, CapacityProviderName: "fleet-mi", FailureType: "LaunchFailed", CreatedAt: at})
	if len(e.Resources) != 0 || e.Summary() != "MANAGED_INSTANCE_LAUNCH_IMPAIRED LaunchFailed" {
		t.Errorf("event %+v, summary %q", e, e.Summary())
	}
}
