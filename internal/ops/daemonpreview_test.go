package ops

import (
	"slices"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/store"
)

func TestDiffSpecs(t *testing.T) {
	on := &shapes.DaemonAlarmConfiguration{AlarmNames: []string{"errors"}, Enable: ptr(true)}
	cur := store.DaemonSpec{TaskDefinitionArn: "td:1", CapacityProviderArns: []string{"a", "b"},
		DeploymentConfiguration: shapes.DaemonDeploymentConfiguration{DrainPercent: ptr(50.0), BakeTimeInMinutes: ptr(int32(2)), Alarms: on},
		Critical:                false, PropagateTags: "DAEMON", EnableECSManagedTags: true}
	defaults := store.DaemonSpec{TaskDefinitionArn: "td:1", CapacityProviderArns: []string{"b", "a"},
		DeploymentConfiguration: shapes.DaemonDeploymentConfiguration{DrainPercent: ptr(25.0), BakeTimeInMinutes: ptr(int32(0))},
		Critical:                true, PropagateTags: "NONE"}
	settings := func(cs []SettingChange) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Setting)
		}
		return out
	}
	tests := []struct {
		name            string
		next            store.DaemonSpec
		req             shapes.UpdateDaemonRequest
		changes, resets []string
	}{
		{name: "everything omitted resets, provider order is no change", next: defaults,
			changes: []string{settingDrain, settingBake, settingAlarms, settingCritical, settingPropagate, settingManagedTags},
			resets:  []string{settingDrain, settingBake, settingAlarms, settingCritical, settingPropagate, settingManagedTags}},
		{name: "given explicitly is a change, not a reset", next: defaults,
			req: shapes.UpdateDaemonRequest{Critical: ptr(true), PropagateTags: "NONE", EnableECSManagedTags: ptr(false),
				DeploymentConfiguration: &shapes.DaemonDeploymentConfiguration{DrainPercent: ptr(25.0), BakeTimeInMinutes: ptr(int32(0)),
					Alarms: &shapes.DaemonAlarmConfiguration{Enable: ptr(false)}}},
			changes: []string{settingDrain, settingBake, settingAlarms, settingCritical, settingPropagate, settingManagedTags}},
		{name: "same settings, new task definition and provider", next: func() store.DaemonSpec {
			n := cur
			n.TaskDefinitionArn, n.CapacityProviderArns = "td:2", []string{"b", "c"}
			n.DeploymentConfiguration.Alarms = &shapes.DaemonAlarmConfiguration{AlarmNames: []string{"errors"}, Enable: ptr(true)}
			return n
		}(), changes: []string{settingTaskDefinition, settingCapacity}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			changes, resets := diffSpecs(cur, tt.next, &tt.req)
			if got := settings(changes); !slices.Equal(got, tt.changes) {
				t.Errorf("changes %v, want %v", got, tt.changes)
			}
			if got := settings(resets); !slices.Equal(got, tt.resets) {
				t.Errorf("resets %v, want %v", got, tt.resets)
			}
			for _, c := range changes {
				if c.Setting == settingCapacity && (!slices.Equal(c.Added, []string{"c"}) || !slices.Equal(c.Removed, []string{"a"})) {
					t.Errorf("capacity providers: added %v removed %v", c.Added, c.Removed)
				}
			}
		})
	}
}

func TestPlanBatches(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	inst := func(arn string, at time.Duration, cpu int64) PlannedInstance {
		return PlannedInstance{ContainerInstanceArn: arn, RegisteredAt: shapes.At(t0.Add(at)), CPU: cpu, Memory: 2 * cpu}
	}
	byHand := inst("e", 4*time.Second, 500)
	byHand.InPlace = true // changed in place: no extra capacity
	insts := []PlannedInstance{inst("d", 3*time.Second, 100), inst("c", 0, 200), inst("b", time.Second, 300), inst("a", time.Second, 400), byHand}
	bs := planBatches(insts, 2)
	var order []string
	for _, b := range bs {
		for _, in := range b.Instances {
			order = append(order, in.ContainerInstanceArn)
		}
	}
	if !slices.Equal(order, []string{"c", "a", "b", "d", "e"}) || len(bs) != 3 {
		t.Fatalf("order %v in %d batches", order, len(bs))
	}
	if bs[0].ExtraCPU != 600 || bs[0].ExtraMemory != 1200 || bs[2].ExtraCPU != 0 || len(bs[2].Instances) != 1 {
		t.Fatalf("extra capacity: %+v", bs)
	}
	if got := planBatches(nil, 1); got == nil || len(got) != 0 {
		t.Fatalf("no instances: %#v", got)
	}
}
