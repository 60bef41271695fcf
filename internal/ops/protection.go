package ops

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/store"
)

// Task scale-in protection is kept on the task record
// (store.Task.ProtectedUntil); the services controller's plan
// (servicedeploy.Decide) leaves protected tasks alone on scale-in and on
// draining instances, so a drained instance stays until they end.

func (s *Service) registerProtection(h *api.Handler) {
	api.Register(h, "GetTaskProtection", s.GetTaskProtection)
	api.Register(h, "UpdateTaskProtection", s.UpdateTaskProtection)
}

const (
	defaultProtectionMinutes = 120
	maxProtectionMinutes     = 2880 // 48 hours, as ECS
)

// protectedView is the API view of a task's protection at now.
func (s *Service) protectedView(t store.Task, now time.Time) shapes.ProtectedTask {
	on := now.Before(t.ProtectedUntil)
	v := shapes.ProtectedTask{TaskArn: t.TaskArn, ProtectionEnabled: &on}
	if on {
		v.ExpirationDate = shapes.At(t.ProtectedUntil)
	}
	return v
}

// protectionTasks reads the tasks named, answering a failure for each
// one that is unknown. each is called with the ones found.
func (s *Service) protectionTasks(ctx context.Context, cluster string, refs []string, each func(i int, it store.Item[store.Task]) *shapes.Failure) ([]shapes.Failure, error) {
	failures := []shapes.Failure{}
	for i, ref := range refs {
		id, err := s.TaskID(fieldIndex("tasks", i), cluster, ref)
		if err != nil {
			return nil, err
		}
		it, err := store.Get[store.Task](ctx, s.Store, store.TaskKey(cluster, id))
		if errors.Is(err, store.ErrNotFound) {
			failures = append(failures, shapes.Failure{Arn: ref, Reason: "MISSING"})
			continue
		}
		if err != nil {
			return nil, fleet.StoreErr(err)
		}
		if f := each(i, it); f != nil {
			failures = append(failures, *f)
		}
	}
	return failures, nil
}

func (s *Service) GetTaskProtection(ctx context.Context, req *shapes.GetTaskProtectionRequest) (*shapes.GetTaskProtectionResponse, error) {
	if req.Cluster == "" {
		return nil, fault.Invalid("cluster", "is required")
	}
	if len(req.Tasks) > 100 {
		return nil, fault.Invalid("tasks", "at most 100 tasks per call (got %d)", len(req.Tasks))
	}
	cl, err := s.ActiveCluster(ctx, "cluster", req.Cluster)
	if err != nil {
		return nil, err
	}
	out := &shapes.GetTaskProtectionResponse{ProtectedTasks: []shapes.ProtectedTask{}}
	now := s.Now()
	out.Failures, err = s.protectionTasks(ctx, cl.Value.ClusterName, req.Tasks, func(_ int, it store.Item[store.Task]) *shapes.Failure {
		out.ProtectedTasks = append(out.ProtectedTasks, s.protectedView(it.Value, now))
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// UpdateTaskProtection turns protection on (for expiresInMinutes, 120 by
// default) or off for service tasks that have not stopped; other tasks
// answer TASK_NOT_VALID failures, as ECS.
func (s *Service) UpdateTaskProtection(ctx context.Context, req *shapes.UpdateTaskProtectionRequest) (*shapes.UpdateTaskProtectionResponse, error) {
	if req.Cluster == "" {
		return nil, fault.Invalid("cluster", "is required")
	}
	if len(req.Tasks) == 0 {
		return nil, fault.Invalid("tasks", "at least one task is required")
	}
	if len(req.Tasks) > 10 {
		return nil, fault.Invalid("tasks", "at most 10 tasks per call (got %d)", len(req.Tasks))
	}
	if req.ProtectionEnabled == nil {
		return nil, fault.Invalid("protectionEnabled", "is required")
	}
	minutes := int32(defaultProtectionMinutes)
	if req.ExpiresInMinutes != nil {
		minutes = *req.ExpiresInMinutes
		if minutes < 1 || minutes > maxProtectionMinutes {
			return nil, fault.Invalid("expiresInMinutes", "must be between 1 and %d (got %d)", maxProtectionMinutes, minutes)
		}
	}
	cl, err := s.ActiveCluster(ctx, "cluster", req.Cluster)
	if err != nil {
		return nil, err
	}
	cluster := cl.Value.ClusterName
	out := &shapes.UpdateTaskProtectionResponse{}
	err = fleet.Retry(ctx, func() error {
		out.ProtectedTasks = []shapes.ProtectedTask{}
		now := s.Now()
		var stores []store.Item[store.Task]
		failures, err := s.protectionTasks(ctx, cluster, req.Tasks, func(i int, it store.Item[store.Task]) *shapes.Failure {
			t := it.Value
			switch {
			case !strings.HasPrefix(t.Group, "service:"):
				return &shapes.Failure{Arn: req.Tasks[i], Reason: "TASK_NOT_VALID", Detail: "The task is not part of a service."}
			case t.LastStatus == "STOPPED" || t.DesiredStatus == "STOPPED":
				return &shapes.Failure{Arn: req.Tasks[i], Reason: "TASK_NOT_VALID", Detail: "The task is stopped or stopping."}
			}
			if *req.ProtectionEnabled {
				it.Value.ProtectedUntil = now.Add(time.Duration(minutes) * time.Minute).UTC().Truncate(time.Millisecond)
			} else {
				it.Value.ProtectedUntil = time.Time{}
			}
			stores = append(stores, it)
			return nil
		})
		if err != nil {
			return err
		}
		out.Failures = failures
		if len(stores) == 0 {
			return nil
		}
		tx := s.Store.Txn()
		for _, it := range stores {
			tx.Update(it.Key, it.Rev, it.Value)
		}
		if _, err := tx.Commit(ctx); err != nil {
			return err
		}
		for _, it := range stores {
			out.ProtectedTasks = append(out.ProtectedTasks, s.protectedView(it.Value, now))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
