package deployments

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/events"
	"github.com/capstanhq/capstan/internal/store"
)

func TestEmitTransition(t *testing.T) {
	created := time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC)
	now := created.Add(time.Minute)
	cases := []struct {
		from, to string
		want     []string
	}{
		{"PENDING", "IN_PROGRESS", []string{"DAEMON_DEPLOYMENT_PENDING", "DAEMON_DEPLOYMENT_IN_PROGRESS"}},
		{"PENDING", "STOPPED", []string{"DAEMON_DEPLOYMENT_PENDING", "DAEMON_DEPLOYMENT_STOPPED"}},
		{"IN_PROGRESS", "SUCCESSFUL", []string{"DAEMON_DEPLOYMENT_SUCCESSFUL"}},
		{"ROLLBACK_IN_PROGRESS", "ROLLBACK_FAILED", []string{"DAEMON_DEPLOYMENT_ROLLBACK_FAILED"}},
		{"IN_PROGRESS", "IN_PROGRESS", nil},
	}
	for _, c := range cases {
		var names, clusters, times []string
		r := &Reconciler{Now: func() time.Time { return now }, Emit: func(_ context.Context, cluster string, ev events.Event) {
			d := struct{ EventName, UpdatedAt string }{}
			if err := json.Unmarshal(ev.Detail, &d); err != nil {
				t.Fatal(err)
			}
			names, clusters, times = append(names, d.EventName), append(clusters, cluster), append(times, d.UpdatedAt)
		}}
		from := deployment(c.from)
		from.Cluster, from.CreatedAt = "fleet", shapes.At(created)
		to := from
		to.Status = c.to
		r.emitTransition(context.Background(), from, to)
		if !slices.Equal(names, c.want) {
			t.Errorf("%s -> %s: %v, want %v", c.from, c.to, names, c.want)
			continue
		}
		for i := range names {
			if clusters[i] != "fleet" {
				t.Errorf("%s -> %s: cluster %q", c.from, c.to, clusters[i])
			}
		}
		// A PENDING event is dated when the deployment was created.
		if len(names) == 2 && (times[0] != "2026-11-30T11:00:00.000000000Z" || times[1] != "2026-11-30T11:01:00.000000000Z") {
			t.Errorf("%s -> %s: times %v", c.from, c.to, times)
		}
	}
	// Without an emitter nothing happens.
	(&Reconciler{Now: time.Now}).emitTransition(context.Background(), deployment("PENDING"), deployment("IN_PROGRESS"))
}

// deployment is a daemon deployment in status with one source revision.
func deployment(status string) store.DaemonDeployment {
	d := store.DaemonDeployment{}
	d.Status = status
	d.TargetRevisionArn = "arn:rev/new"
	d.SourceRevisionArns = []string{"arn:rev/old"}
	return d
}
