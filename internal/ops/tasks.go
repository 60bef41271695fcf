package ops

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/store"
)

func (s *Service) registerTasks(h *api.Handler) {
	api.Register(h, "RunTask", s.RunTask)
	api.Register(h, "StartTask", s.StartTask)
	api.Register(h, "StopTask", s.StopTask)
	api.Register(h, "DescribeTasks", s.DescribeTasks)
	api.Register(h, "ListTasks", s.ListTasks)
}

func (s *Service) RunTask(ctx context.Context, req *shapes.RunTaskRequest) (*shapes.RunTaskResponse, error) {
	cp := ""
	if len(req.CapacityProviderStrategy) > 0 {
		if req.LaunchType != "" {
			return nil, fault.Invalid("launchType", "give launchType or capacityProviderStrategy, not both")
		}
		if len(req.CapacityProviderStrategy) > 1 {
			return nil, fault.NotSupported("capacityProviderStrategy: Capstan places a task on one capacity provider; give one item")
		}
		name, err := s.ARNs.CapacityProviderName("capacityProviderStrategy[0].capacityProvider", req.CapacityProviderStrategy[0].CapacityProvider)
		if err != nil {
			return nil, err
		}
		cp = name
	}
	if req.LaunchType == "FARGATE" && cp == "" {
		cl, err := s.ActiveCluster(ctx, "cluster", req.Cluster)
		if err != nil {
			return nil, err
		}
		if cp, err = s.fargateCapacity(ctx, cl); err != nil {
			return nil, err
		}
	} else if req.LaunchType != "" && req.LaunchType != "EC2" {
		return nil, fault.NotSupported("launchType: Capstan runs EC2-style tasks on registered instances, and FARGATE ones on managed instances (got %s)", req.LaunchType)
	}
	count := 1
	if req.Count != nil {
		count = int(*req.Count)
		if count < 1 || count > 10 {
			return nil, fault.Invalid("count", "must be between 1 and 10 (got %d)", count)
		}
	}
	rules, err := fleet.ParsePlacement(req.PlacementStrategy, req.PlacementConstraints)
	if err != nil {
		return nil, err
	}
	tasks, failures, err := s.StartTasks(ctx, fleet.TaskRequest{Cluster: req.Cluster, TaskDefinition: req.TaskDefinition, Group: req.Group,
		StartedBy: req.StartedBy, Overrides: req.Overrides, Tags: req.Tags, Count: count, NetworkConfiguration: req.NetworkConfiguration, Rules: rules,
		CapacityProvider: cp, HostAccess: true, Fargate: req.LaunchType == "FARGATE",
		ExecuteCommand: req.EnableExecuteCommand != nil && *req.EnableExecuteCommand}) // the call was authorized, host access included
	if err != nil {
		return nil, err
	}
	return &shapes.RunTaskResponse{Tasks: launched(tasks), Failures: orEmpty(failures)}, nil
}

func (s *Service) StartTask(ctx context.Context, req *shapes.StartTaskRequest) (*shapes.StartTaskResponse, error) {
	if len(req.ContainerInstances) == 0 || len(req.ContainerInstances) > 10 {
		return nil, fault.Invalid("containerInstances", "must name 1 to 10 container instances")
	}
	tasks, failures, err := s.StartTasks(ctx, fleet.TaskRequest{Cluster: req.Cluster, TaskDefinition: req.TaskDefinition, Group: req.Group,
		StartedBy: req.StartedBy, Overrides: req.Overrides, Tags: req.Tags, Count: len(req.ContainerInstances),
		NetworkConfiguration: req.NetworkConfiguration, Instances: req.ContainerInstances, HostAccess: true,
		ExecuteCommand: req.EnableExecuteCommand != nil && *req.EnableExecuteCommand})
	if err != nil {
		return nil, err
	}
	return &shapes.StartTaskResponse{Tasks: launched(tasks), Failures: orEmpty(failures)}, nil
}

func (s *Service) StopTask(ctx context.Context, req *shapes.StopTaskRequest) (*shapes.StopTaskResponse, error) {
	if len(req.Reason) > 1024 {
		return nil, fault.Invalid("reason", "must be at most 1024 characters")
	}
	reason := req.Reason
	if reason == "" {
		reason = "Task stopped by user"
	}
	var out store.Task
	err := fleet.Retry(ctx, func() error {
		cl, err := s.ActiveCluster(ctx, "cluster", req.Cluster)
		if err != nil {
			return err
		}
		id, err := s.TaskID("task", cl.Value.ClusterName, req.Task)
		if err != nil {
			return err
		}
		it, err := store.Get[store.Task](ctx, s.Store, store.TaskKey(cl.Value.ClusterName, id))
		if errors.Is(err, store.ErrNotFound) {
			return fault.Invalid("", "The referenced task was not found.") // ECS's words
		}
		if err != nil {
			return err
		}
		if it.Value.DesiredStatus == "STOPPED" {
			out = it.Value
			return nil
		}
		tx := s.Store.Txn()
		if err := s.StopTaskTxn(ctx, tx, it, "UserInitiated", reason); err != nil {
			return err
		}
		if _, err := tx.Commit(ctx); err != nil {
			return err
		}
		cur, err := store.Get[store.Task](ctx, s.Store, it.Key)
		out = cur.Value
		return err
	})
	if err != nil {
		return nil, err
	}
	v := s.TaskView(out, false)
	fillTask(&v)
	return &shapes.StopTaskResponse{Task: &v}, nil
}

func (s *Service) DescribeTasks(ctx context.Context, req *shapes.DescribeTasksRequest) (*shapes.DescribeTasksResponse, error) {
	cl, err := s.ActiveCluster(ctx, "cluster", req.Cluster)
	if err != nil {
		return nil, err
	}
	if len(req.Tasks) == 0 {
		return nil, fault.Invalid("", "Tasks cannot be empty.") // ECS's words
	}
	if len(req.Tasks) > 100 {
		return nil, fault.Invalid("tasks", "must name 1 to 100 tasks")
	}
	out := &shapes.DescribeTasksResponse{Tasks: []shapes.Task{}, Failures: []shapes.Failure{}}
	for i, ref := range req.Tasks {
		if s.foreignARN(ref, "task") {
			out.Failures = append(out.Failures, shapes.Failure{Arn: ref, Reason: "MISSING"})
			continue
		}
		id, err := s.TaskID(fieldIndex("tasks", i), cl.Value.ClusterName, ref)
		if err != nil {
			return nil, err
		}
		it, err := store.Get[store.Task](ctx, s.Store, store.TaskKey(cl.Value.ClusterName, id))
		if errors.Is(err, store.ErrNotFound) {
			out.Failures = append(out.Failures, shapes.Failure{Arn: s.ARNs.Task(cl.Value.ClusterName, id), Reason: "MISSING"})
			continue
		}
		if err != nil {
			return nil, fleet.StoreErr(err)
		}
		v := s.TaskView(it.Value, slices.Contains(req.Include, "TAGS"))
		fillTask(&v)
		out.Tasks = append(out.Tasks, v)
	}
	return out, nil
}

func (s *Service) ListTasks(ctx context.Context, req *shapes.ListTasksRequest) (*shapes.ListTasksResponse, error) {
	cl, err := s.ActiveCluster(ctx, "cluster", req.Cluster)
	if err != nil {
		return nil, err
	}
	cluster := cl.Value.ClusterName
	instance := ""
	if req.ContainerInstance != "" {
		if instance, err = s.InstanceID("containerInstance", cluster, req.ContainerInstance); err != nil {
			return nil, err
		}
	}
	desired := req.DesiredStatus
	if desired == "" {
		desired = "RUNNING"
	}
	service := ""
	if req.ServiceName != "" {
		if service, err = s.listedService(ctx, cluster, req.ServiceName); err != nil {
			return nil, err
		}
	}
	if req.LaunchType != "" && req.LaunchType != "EC2" {
		return &shapes.ListTasksResponse{TaskArns: []string{}}, nil
	}
	scope := store.TaskPrefix(cluster) + "\x00" + requestHash([]any{instance, req.Family, req.StartedBy, desired, req.DaemonName, service})
	p, err := fleet.NewPage(req.MaxResults, req.NextToken, scope, 100)
	if err != nil {
		return nil, err
	}
	match := func(t store.Task) bool {
		switch {
		case instance != "" && t.InstanceID != instance,
			req.StartedBy != "" && t.StartedBy != req.StartedBy,
			req.Family != "" && !strings.Contains(t.TaskDefinitionArn, ":task-definition/"+req.Family+":"),
			req.DaemonName != "" && t.Group != "daemon:"+req.DaemonName,
			service != "" && t.Group != "service:"+service,
			!fleet.DesiredMatches(desired, t):
			return false
		}
		return true
	}
	out := &shapes.ListTasksResponse{TaskArns: []string{}}
	if instance != "" {
		return s.ListInstanceTasks(ctx, cluster, instance, p, scope, match, out)
	}
	if req.Family == "" {
		// Everything else the filters ask is in the fleet view.
		viewMatch := func(t *fleet.IndexedTask) bool {
			switch {
			case req.StartedBy != "" && t.StartedBy != req.StartedBy,
				req.DaemonName != "" && t.Group != "daemon:"+req.DaemonName,
				service != "" && t.Group != "service:"+service:
				return false
			case desired == "PENDING":
				return t.DesiredStatus == "RUNNING" && t.Last != "RUNNING"
			}
			return t.DesiredStatus == desired
		}
		return s.ListTasksByView(ctx, cluster, p, scope, viewMatch, match, out)
	}
	after := p.After
	for {
		items, more, err := store.List[store.Task](ctx, s.Store, store.TaskPrefix(cluster), after, p.Limit-len(out.TaskArns))
		if err != nil {
			return nil, fleet.StoreErr(err)
		}
		for _, it := range items {
			after = it.Key
			if match(it.Value) {
				out.TaskArns = append(out.TaskArns, it.Value.TaskArn)
			}
		}
		if !more || len(out.TaskArns) == p.Limit {
			out.NextToken = fleet.NextToken(scope, after, more)
			return out, nil
		}
	}
}

// launched is the tasks RunTask and StartTask return, with their tags
// and ECS's empty lists.
func launched(tasks []shapes.Task) []shapes.Task {
	out := make([]shapes.Task, len(tasks))
	for i, t := range tasks {
		fillTask(&t)
		out[i] = t
	}
	return out
}
