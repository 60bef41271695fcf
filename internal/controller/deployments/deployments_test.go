package deployments

import (
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/store"
)

func deployment(status string) store.DaemonDeployment {
	d := store.DaemonDeployment{}
	d.Status = status
	d.CircuitBreaker = &shapes.DaemonCircuitBreaker{Status: "MONITORING", Threshold: ptr(int32(3)), FailureCount: ptr(int32(0))}
	d.Alarms = &shapes.DaemonDeploymentAlarms{Status: "MONITORING"}
	return d
}

func TestStep(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name      string
		status    string
		current   bool
		instances int
		want      string
		changed   bool
		breaker   string
	}{
		{"pending starts", "PENDING", true, 0, "IN_PROGRESS", true, "MONITORING"},
		{"empty capacity completes", "IN_PROGRESS", true, 0, "SUCCESSFUL", true, "MONITORING_COMPLETE"},
		{"instances still to change wait", "IN_PROGRESS", true, 4, "IN_PROGRESS", false, "MONITORING"},
		{"superseded pending stops", "PENDING", false, 0, "STOPPED", true, "MONITORING_COMPLETE"},
		{"superseded running stops", "IN_PROGRESS", false, 3, "STOPPED", true, "MONITORING_COMPLETE"},
		{"finished stays", "SUCCESSFUL", false, 0, "SUCCESSFUL", false, "MONITORING"},
		{"stopped stays", "STOPPED", true, 0, "STOPPED", false, "MONITORING"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, changed := Step(deployment(tc.status), tc.current, tc.instances, tc.instances, now)
			if got.Status != tc.want || changed != tc.changed || got.CircuitBreaker.Status != tc.breaker {
				t.Fatalf("got %s changed=%v breaker=%s, want %s changed=%v breaker=%s",
					got.Status, changed, got.CircuitBreaker.Status, tc.want, tc.changed, tc.breaker)
			}
			switch got.Status {
			case "IN_PROGRESS":
				if changed && !got.StartedAt.Equal(now) {
					t.Fatalf("startedAt %v", got.StartedAt)
				}
			case "SUCCESSFUL":
				if changed && (!got.FinishedAt.Equal(now) || got.StatusReason == "") {
					t.Fatalf("finishedAt %v reason %q", got.FinishedAt, got.StatusReason)
				}
			case "STOPPED":
				if changed && (!got.StoppedAt.Equal(now) || got.StatusReason == "") {
					t.Fatalf("stoppedAt %v reason %q", got.StoppedAt, got.StatusReason)
				}
			}
		})
	}
}

func TestBreakerThreshold(t *testing.T) {
	for n, want := range map[int]int{0: 3, 1: 3, 5: 3, 6: 3, 7: 4, 10: 5, 100: 50, 399: 200, 5000: 200} {
		if got := BreakerThreshold(n); got != want {
			t.Errorf("BreakerThreshold(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestStepCompletesWhenNothingRemains(t *testing.T) {
	got, changed := Step(deployment("IN_PROGRESS"), true, 3, 0, time.Now())
	if !changed || got.Status != "SUCCESSFUL" {
		t.Fatalf("3 instances all on target: %s", got.Status)
	}
	got, changed = Step(deployment("IN_PROGRESS"), true, 3, 1, time.Now())
	if changed || got.Status != "IN_PROGRESS" {
		t.Fatalf("one instance left: %s", got.Status)
	}
}
