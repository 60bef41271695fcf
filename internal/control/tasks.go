package control

import (
	"cmp"
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/store"
	"github.com/capstanhq/capstan/internal/taskdef"
)

func (s *Service) registerTasks(h *api.Handler) {
	api.Register(h, "RunTask", s.RunTask)
	api.Register(h, "StartTask", s.StartTask)
	api.Register(h, "StopTask", s.StopTask)
	api.Register(h, "DescribeTasks", s.DescribeTasks)
	api.Register(h, "ListTasks", s.ListTasks)
}

func (a arns) task(cluster, id string) string { return a.base() + "task/" + cluster + "/" + id }
func (a arns) container(cluster, task, id string) string {
	return a.base() + "container/" + cluster + "/" + task + "/" + id
}

// taskID resolves a task ARN or ID within a cluster.
func (s *Service) taskID(field, cluster, ref string) (string, error) {
	id := ref
	if strings.HasPrefix(ref, "arn:") {
		typ, path, ok := s.arns.resource(ref)
		c, i, ok2 := strings.Cut(path, "/")
		if !ok || !ok2 || typ != "task" || !s.arns.inAccount(ref) {
			return "", fault.Invalid(field, "%q is not a task ARN (%s)", clip(ref), s.arns.task("CLUSTER", "ID"))
		}
		if c != cluster {
			return "", fault.Invalid(field, "task %s is not in cluster %q", clip(ref), cluster)
		}
		id = i
	}
	if !instanceIDPattern.MatchString(id) {
		return "", fault.Invalid(field, "%q is not a task ID or ARN", clip(ref))
	}
	return id, nil
}

// taskNeed is what a task reserves on its instance: the task-level size
// when set, else the sum of its containers, after overrides.
func taskNeed(td shapes.TaskDefinition, ov *shapes.TaskOverride) (need, error) {
	var n need
	cpu, mem := td.Cpu, td.Memory
	if ov != nil {
		if ov.Cpu != "" {
			cpu = ov.Cpu
		}
		if ov.Memory != "" {
			mem = ov.Memory
		}
	}
	if cpu != "" {
		c, err := taskdef.ParseCPU(cpu)
		if err != nil {
			return n, fault.Invalid("overrides.cpu", "%v", err)
		}
		n.cpu = c
	}
	if mem != "" {
		m, err := taskdef.ParseMemory(mem)
		if err != nil {
			return n, fault.Invalid("overrides.memory", "%v", err)
		}
		n.mem = m
	}
	sumCPU, sumMem := 0, 0
	for _, c := range td.ContainerDefinitions {
		cc, cm, cr := c.Cpu, c.Memory, c.MemoryReservation
		if ov != nil {
			for _, o := range ov.ContainerOverrides {
				if o.Name == c.Name {
					if o.Cpu != nil {
						cc = o.Cpu
					}
					if o.Memory != nil {
						cm = o.Memory
					}
					if o.MemoryReservation != nil {
						cr = o.MemoryReservation
					}
				}
			}
		}
		if cc != nil {
			sumCPU += int(*cc)
		}
		switch {
		case cr != nil:
			sumMem += int(*cr)
		case cm != nil:
			sumMem += int(*cm)
		}
		for _, pm := range c.PortMappings {
			host := 0
			if pm.HostPort != nil {
				host = int(*pm.HostPort)
			}
			if td.NetworkMode == "host" && pm.ContainerPort != nil {
				host = int(*pm.ContainerPort)
			}
			if host > 0 {
				proto := pm.Protocol
				if proto == "" {
					proto = "tcp"
				}
				n.ports = append(n.ports, proto+"/"+strconv.Itoa(host))
			}
		}
	}
	if cpu == "" {
		n.cpu = sumCPU
	}
	if mem == "" {
		n.mem = sumMem
	}
	return n, nil
}

func checkOverrides(td shapes.TaskDefinition, ov *shapes.TaskOverride) error {
	if ov == nil {
		return nil
	}
	for i, o := range ov.ContainerOverrides {
		f := fieldIndex("overrides.containerOverrides", i)
		if !slices.ContainsFunc(td.ContainerDefinitions, func(c shapes.ContainerDefinition) bool { return c.Name == o.Name }) {
			return fault.Invalid(f+".name", "task definition has no container %q", clip(o.Name))
		}
		if len(o.EnvironmentFiles) > 0 || len(o.ResourceRequirements) > 0 {
			return fault.NotSupported("%s: environmentFiles and resourceRequirements overrides are not supported", f)
		}
	}
	if len(ov.InferenceAcceleratorOverrides) > 0 || ov.EphemeralStorage != nil {
		return fault.NotSupported("overrides: inference accelerators and ephemeral storage are not supported")
	}
	return nil
}

// taskRequest is what RunTask and StartTask share.
type taskRequest struct {
	cluster, taskDefinition, group, startedBy string
	overrides                                 *shapes.TaskOverride
	tags                                      []shapes.Tag
	count                                     int
	networkConfiguration                      *shapes.NetworkConfiguration
	// instances, for StartTask: place on exactly these.
	instances []string
	rules     placementRules
	// owner, for a service's tasks: the service record the launch was
	// decided on, which must be unchanged. Its task definition may be
	// INACTIVE, as ECS allows.
	owner *guard
	// capacityProvider, when set, places on that managed-instances
	// provider's instances only; a task that finds no room is recorded
	// PROVISIONING and placed when the instances controller has made room.
	capacityProvider string
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
		name, err := s.arns.capacityProviderName("capacityProviderStrategy[0].capacityProvider", req.CapacityProviderStrategy[0].CapacityProvider)
		if err != nil {
			return nil, err
		}
		cp = name
	}
	if req.LaunchType != "" && req.LaunchType != "EC2" {
		return nil, fault.NotSupported("launchType: Capstan runs EC2-style tasks on registered instances (got %s)", req.LaunchType)
	}
	count := 1
	if req.Count != nil {
		count = int(*req.Count)
		if count < 1 || count > 10 {
			return nil, fault.Invalid("count", "must be between 1 and 10 (got %d)", count)
		}
	}
	rules, err := parsePlacement(req.PlacementStrategy, req.PlacementConstraints)
	if err != nil {
		return nil, err
	}
	tasks, failures, err := s.startTasks(ctx, taskRequest{cluster: req.Cluster, taskDefinition: req.TaskDefinition, group: req.Group,
		startedBy: req.StartedBy, overrides: req.Overrides, tags: req.Tags, count: count, networkConfiguration: req.NetworkConfiguration, rules: rules,
		capacityProvider: cp})
	if err != nil {
		return nil, err
	}
	return &shapes.RunTaskResponse{Tasks: tasks, Failures: failures}, nil
}

func (s *Service) StartTask(ctx context.Context, req *shapes.StartTaskRequest) (*shapes.StartTaskResponse, error) {
	if len(req.ContainerInstances) == 0 || len(req.ContainerInstances) > 10 {
		return nil, fault.Invalid("containerInstances", "must name 1 to 10 container instances")
	}
	tasks, failures, err := s.startTasks(ctx, taskRequest{cluster: req.Cluster, taskDefinition: req.TaskDefinition, group: req.Group,
		startedBy: req.StartedBy, overrides: req.Overrides, tags: req.Tags, count: len(req.ContainerInstances),
		networkConfiguration: req.NetworkConfiguration, instances: req.ContainerInstances})
	if err != nil {
		return nil, err
	}
	return &shapes.StartTaskResponse{Tasks: tasks, Failures: failures}, nil
}

const noInstances = "No Container Instances were found in your cluster."

var errNoInstances = fault.Invalid("cluster", noInstances)

// startTasks places and records tasks; everything is written in one
// transaction with the instances' new remaining resources.
func (s *Service) startTasks(ctx context.Context, r taskRequest) ([]shapes.Task, []shapes.Failure, error) {
	if r.networkConfiguration != nil {
		return nil, nil, fault.NotSupported("networkConfiguration: the awsvpc network mode is not supported; use bridge, host or none")
	}
	if len(r.startedBy) > 36 {
		return nil, nil, fault.Invalid("startedBy", "must be at most 36 characters")
	}
	if len(r.group) > 255 {
		return nil, nil, fault.Invalid("group", "must be at most 255 characters")
	}
	if err := taskdef.CheckTags("tags", r.tags); err != nil {
		return nil, nil, err
	}
	// What committed chunks wrote stays written across retries: a retry
	// places only what is left.
	var tasks []shapes.Task
	var failures []shapes.Failure
	committed := []shapes.Task{}
	err := retry(ctx, func() error {
		tasks, failures = []shapes.Task{}, []shapes.Failure{}
		left := r.count - len(committed)
		cl, err := s.activeCluster(ctx, "cluster", r.cluster)
		if err != nil {
			return err
		}
		cluster := cl.Value.ClusterName
		// Placements of other processes, and other writers of instance
		// records, are still caught by the revision checks.
		mu, _ := s.placing.LoadOrStore(cluster, new(sync.Mutex))
		mu.(*sync.Mutex).Lock()
		defer mu.(*sync.Mutex).Unlock()
		lookup := s.activeTaskDefinition
		if r.owner != nil {
			if err := s.ownerUnchanged(ctx, *r.owner); err != nil {
				return err
			}
			lookup = s.serviceTaskDefinition
		}
		td, err := lookup(ctx, "taskDefinition", r.taskDefinition)
		if err != nil {
			return err
		}
		def := td.Value.TaskDefinition
		if err := checkOverrides(def, r.overrides); err != nil {
			return err
		}
		n, err := taskNeed(def, r.overrides)
		if err != nil {
			return err
		}
		group := r.group
		if group == "" {
			group = "family:" + def.Family
		}
		var room need
		if r.instances == nil && r.rules.narrowsByRoom() {
			room = need{cpu: n.cpu, mem: n.mem}
		}
		cands, err := s.candidates(ctx, cluster, group, r.instances, room)
		if err != nil {
			return err
		}
		// Why a task fits nowhere also counts the instances left out for
		// room; read only then.
		var short []*candidate
		whyNot := func(pool []*candidate, rnd *rand.Rand) string {
			if short == nil {
				var err error
				if short, err = s.shortOfRoom(ctx, cluster, group, room); err != nil {
					return err.Error()
				}
				short = slices.Clip(short)
			}
			_, why := place(append(slices.Clip(pool), short...), n, r.rules, rnd)
			return why
		}
		if r.capacityProvider != "" {
			cp, err := s.clusterCapacityProvider(ctx, "capacityProviderStrategy[0].capacityProvider", r.capacityProvider, cluster)
			if err != nil {
				return err
			}
			if !slices.Contains(cl.Value.CapacityProviders, cp.Value.Name) {
				return fault.Invalid("capacityProviderStrategy[0].capacityProvider", "capacity provider %q is not associated with cluster %q", cp.Value.Name, cluster)
			}
			cands = slices.DeleteFunc(cands, func(c *candidate) bool { return c.cp != r.capacityProvider })
		} else if len(cands) == 0 {
			if short, err := s.shortOfRoom(ctx, cluster, group, room); err != nil || len(short) == 0 {
				return cmp.Or(err, error(errNoInstances))
			}
		}
		// instances are the records of instances placed on, read as the
		// placement view saw them (or as this call last wrote them).
		instances := map[string]store.Item[store.ContainerInstance]{}
		// The view was read after this process's writes: the records are
		// read without waiting again (a busy server writes all the time),
		// and one newer than the view is a conflict anyway.
		rctx, err := s.st.ReadOnly(ctx)
		if err != nil {
			return err
		}
		instanceOf := func(c *candidate) (store.Item[store.ContainerInstance], error) {
			if it, ok := instances[c.id]; ok {
				return it, nil
			}
			it, err := store.Get[store.ContainerInstance](rctx, s.st, store.ContainerInstanceKey(cluster, c.id))
			if err != nil {
				return it, err
			}
			if it.Rev != c.rev {
				return it, store.ErrConflict // changed since the view was read
			}
			instances[c.id] = it
			return it, nil
		}
		newTx := func() *store.Txn {
			tx := s.st.Txn().Unchanged(cl.Key, cl.Rev).Unchanged(td.Key, td.Rev)
			if r.owner != nil {
				tx.Unchanged(r.owner.key, r.owner.rev)
			}
			return tx
		}
		tx := newTx()
		var chunk []shapes.Task
		touched := map[*candidate]bool{}
		// A chunk commits while the next is placed: placing is CPU and a
		// commit mostly waits for etcd. The next chunk's instance updates
		// are added only after the previous commit, whose revisions they
		// check.
		var inflight chan chunkCommit
		settle := func() error {
			if inflight == nil {
				return nil
			}
			r := <-inflight
			inflight = nil
			if r.err != nil {
				return r.err
			}
			for c := range r.touched {
				it := instances[c.id]
				it.Rev = r.rev
				instances[c.id] = it
			}
			committed = append(committed, r.chunk...)
			return nil
		}
		// commit writes the tasks placed so far with their instances' new
		// remaining resources; the instances' new revisions are kept for
		// the next chunk once it has committed.
		commit := func() error {
			if err := settle(); err != nil {
				return err
			}
			for c := range touched {
				it := instances[c.id]
				ci := it.Value
				rem := readResources(ci.RemainingResources)
				rem.cpu, rem.memory = c.cpu, c.mem
				for p := range c.extra {
					if !slices.Contains(rem.ports, p) {
						rem.ports = append(rem.ports, p)
					}
				}
				slices.Sort(rem.ports)
				ci.RemainingResources = rem.shapes()
				v := *ci.Version + 1
				ci.Version = &v
				tx.Update(it.Key, it.Rev, ci)
				it.Value = ci
				instances[c.id] = it
			}
			done := make(chan chunkCommit, 1)
			go func(tx *store.Txn, r chunkCommit) {
				r.rev, r.err = tx.Commit(ctx)
				done <- r
			}(tx, chunkCommit{chunk: chunk, touched: touched})
			inflight = done
			chunk, touched, tx = nil, map[*candidate]bool{}, newTx()
			if !overlapChunks {
				return settle()
			}
			return nil
		}
		err = func() error {
			rnd := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
			var picker *spreadPicker
			if r.instances == nil {
				picker = newSpreadPicker(cands, n, r.rules, rnd)
			}
			for i := range left {
				if r.count > startChunk && len(chunk) == s.chunkSize() {
					if err := commit(); err != nil {
						return err
					}
				}
				pool := cands
				if r.instances != nil {
					pool = []*candidate{cands[i]}
				}
				var c *candidate
				why := "no instance of the capacity provider yet"
				switch {
				case len(pool) > 0 && picker != nil:
					c = picker.next()
				case len(pool) > 0:
					c, why = place(pool, n, r.rules, rnd)
				}
				if c == nil && r.capacityProvider == "" && r.instances == nil {
					why = whyNot(pool, rnd)
				}
				if c == nil && r.capacityProvider != "" {
					// Waits for capacity: the instances controller provisions it.
					t, _ := s.newTask(cluster, cl.Value.ClusterArn, store.ContainerInstance{}, td.Value, group, r, n)
					t.CapacityProviderName = r.capacityProvider
					t.StoppedReason = ""
					tx.Create(store.TaskKey(cluster, t.ID), t)
					chunk = append(chunk, s.taskView(t, true))
					continue
				}
				if c == nil {
					f := shapes.Failure{Reason: why}
					if r.instances != nil {
						f.Arn = s.arns.containerInstance(cluster, pool[0].id)
					}
					failures = append(failures, f)
					continue
				}
				ci, err := instanceOf(c)
				if err != nil {
					return err
				}
				c.cpu -= n.cpu
				c.mem -= n.mem
				for _, p := range n.ports {
					c.take(p)
				}
				c.groupTasks++
				touched[c] = true
				t, desired := s.newTask(cluster, cl.Value.ClusterArn, ci.Value, td.Value, group, r, n)
				tx.Create(store.TaskKey(cluster, t.ID), t)
				tx.Create(store.DesiredKey(cluster, c.id, t.ID), desired)
				chunk = append(chunk, s.taskView(t, true))
			}
			return commit()
		}()
		// Whatever ended the loop, a chunk in flight counts once it commits.
		if serr := settle(); err == nil {
			err = serr
		}
		return err
	})
	tasks = append(committed, tasks...)
	if err != nil && len(committed) == 0 {
		return nil, nil, err
	}
	// Chunks that committed are started tasks even if a later one failed;
	// the caller tries the rest again.
	return tasks, failures, nil
}

// overlapChunks places the next chunk while the previous commits
// (BenchmarkStartTasks turns it off to compare).
var overlapChunks = true

// chunkCommit is one chunk's transaction in flight and what it wrote.
type chunkCommit struct {
	chunk   []shapes.Task
	touched map[*candidate]bool
	rev     int64
	err     error
}

// startChunk is how many tasks one transaction writes when a request
// starts more (services at scale): a start writes the task, its desired
// entry and at most one instance, so 40 stays within etcd's default of 128
// operations per transaction; the embedded member takes more. Requests of
// up to startChunk tasks (RunTask, StartTask) commit all or nothing.
const startChunk = 40

// chunkSize is how many tasks one transaction of a bigger request writes.
func (s *Service) chunkSize() int { return max(startChunk, (s.st.MaxTxnOps()-8)/3) }

// candidates are the instances that can take new tasks: ACTIVE, with a
// connected agent (or exactly the named ones for StartTask), from the
// fleet view. Unnamed instances with less free CPU or memory than room
// are left out: no task of the call fits there, and in a full fleet
// counting each one's group tasks was most of a placement (a rollout's
// waiting tasks meet thousands of full instances and a few new ones).
func (s *Service) candidates(ctx context.Context, cluster, group string, named []string, room need) ([]*candidate, error) {
	return s.instancesByRoom(ctx, cluster, group, named, room, true)
}

// shortOfRoom are the instances candidates leaves out for room, for the
// reasons a task did not fit.
func (s *Service) shortOfRoom(ctx context.Context, cluster, group string, room need) ([]*candidate, error) {
	if room.cpu <= 0 && room.mem <= 0 {
		return nil, nil
	}
	return s.instancesByRoom(ctx, cluster, group, nil, room, false)
}

func (s *Service) instancesByRoom(ctx context.Context, cluster, group string, named []string, room need, fitting bool) ([]*candidate, error) {
	ids := make([]string, len(named))
	for i, ref := range named {
		id, err := s.instanceID(fieldIndex("containerInstances", i), cluster, ref)
		if err != nil {
			return nil, err
		}
		ids[i] = id
	}
	v, err := s.fleetView(ctx)
	if err != nil {
		return nil, err
	}
	defer v.done()
	c := v.cluster(cluster)
	cand := func(fi *fleetInstance) *candidate {
		cd := &candidate{id: fi.id, cp: fi.cp, rev: fi.rev, cpu: fi.cpu, mem: fi.mem, ports: fi.ports, attributes: fi.attributes, tasks: len(fi.desired)}
		for id := range fi.desired {
			if t := c.tasks[id]; t != nil && t.group == group {
				cd.groupTasks++
			}
		}
		return cd
	}
	var cands []*candidate
	if named != nil {
		for i, id := range ids {
			fi := c.instances[id]
			if fi == nil || !fi.rec || fi.status != "ACTIVE" {
				return nil, fault.Invalid(fieldIndex("containerInstances", i), "container instance %s is not ACTIVE in cluster %q", id, cluster)
			}
			cands = append(cands, cand(fi))
		}
		return cands, nil
	}
	for _, fi := range c.instances {
		if fi.rec && fi.status == "ACTIVE" && fi.connected && (fi.cpu >= room.cpu && fi.mem >= room.mem) == fitting {
			cands = append(cands, cand(fi))
		}
	}
	// Instance ID order, so that what only the random tie-break decides
	// does not also depend on map order.
	slices.SortFunc(cands, func(a, b *candidate) int { return strings.Compare(a.id, b.id) })
	return cands, nil
}

// newTask builds the task record and the desired entry its agent reads.
func (s *Service) newTask(cluster, clusterArn string, ci store.ContainerInstance, td store.TaskDefinition, group string, r taskRequest, n need) (store.Task, protocol.Task) {
	id := newInstanceID()
	now := s.now()
	t := store.Task{ID: id, Cluster: cluster, InstanceID: ci.ID, Kind: protocol.KindStandalone,
		Reserved: &store.Reservation{CPU: n.cpu, Memory: n.mem, Ports: n.ports}}
	if strings.HasPrefix(r.startedBy, "ecs-svc/") {
		t.Kind = protocol.KindService
	}
	t.TaskArn = s.arns.task(cluster, id)
	t.ClusterArn = clusterArn
	t.ContainerInstanceArn = ci.ContainerInstanceArn
	t.TaskDefinitionArn = td.TaskDefinitionArn
	t.LastStatus = "PROVISIONING"
	t.DesiredStatus = "RUNNING"
	t.HealthStatus = "UNKNOWN" // as ECS shows a new task; agents report the same
	t.CreatedAt = shapes.At(now)
	t.LaunchType = "EC2"
	t.CapacityProviderName = ci.CapacityProviderName
	t.Group = group
	t.StartedBy = r.startedBy
	t.Tags = r.tags
	t.Version = ptr(int64(1))
	t.Cpu = strconv.Itoa(n.cpu)
	t.Memory = strconv.Itoa(n.mem)
	t.AvailabilityZone = "local"
	t.Overrides = r.overrides
	if t.Overrides == nil {
		t.Overrides = &shapes.TaskOverride{ContainerOverrides: []shapes.ContainerOverride{}}
	}
	for _, c := range td.ContainerDefinitions {
		sc := shapes.Container{ContainerArn: s.arns.container(cluster, id, newInstanceID()), TaskArn: t.TaskArn,
			Name: c.Name, Image: c.Image, LastStatus: "PENDING", NetworkBindings: []shapes.NetworkBinding{}}
		if c.Cpu != nil {
			sc.Cpu = strconv.Itoa(int(*c.Cpu))
		}
		if c.Memory != nil {
			sc.Memory = strconv.Itoa(int(*c.Memory))
		}
		if c.MemoryReservation != nil {
			sc.MemoryReservation = strconv.Itoa(int(*c.MemoryReservation))
		}
		t.Containers = append(t.Containers, sc)
	}
	desired := protocol.Task{Arn: t.TaskArn, ClusterArn: clusterArn, ContainerInstanceArn: ci.ContainerInstanceArn, Kind: t.Kind,
		Group: group, StartedBy: r.startedBy, DesiredStatus: "RUNNING", Definition: td.TaskDefinition, Overrides: r.overrides,
		Tags: r.tags, CreatedAt: now, Version: 1}
	return t, desired
}

// taskView is the API view of a stored task.
func (s *Service) taskView(t store.Task, tags bool) shapes.Task {
	v := t.Task
	if !tags {
		v.Tags = nil
	}
	if v.Containers == nil {
		v.Containers = []shapes.Container{}
	}
	return v
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
	err := retry(ctx, func() error {
		cl, err := s.activeCluster(ctx, "cluster", req.Cluster)
		if err != nil {
			return err
		}
		id, err := s.taskID("task", cl.Value.ClusterName, req.Task)
		if err != nil {
			return err
		}
		it, err := store.Get[store.Task](ctx, s.st, store.TaskKey(cl.Value.ClusterName, id))
		if errors.Is(err, store.ErrNotFound) {
			return fault.Invalid("task", "task %s not found in cluster %q", id, cl.Value.ClusterName)
		}
		if err != nil {
			return err
		}
		if it.Value.DesiredStatus == "STOPPED" {
			out = it.Value
			return nil
		}
		tx := s.st.Txn()
		if err := s.stopTaskTxn(ctx, tx, it, "UserInitiated", reason); err != nil {
			return err
		}
		if _, err := tx.Commit(ctx); err != nil {
			return err
		}
		cur, err := store.Get[store.Task](ctx, s.st, it.Key)
		out = cur.Value
		return err
	})
	if err != nil {
		return nil, err
	}
	v := s.taskView(out, false)
	return &shapes.StopTaskResponse{Task: &v}, nil
}

// stopTaskTxn sets a task's desired status to STOPPED in tx, both on the
// task and on the desired entry its agent reads. A task whose instance is
// gone is stopped outright.
func (s *Service) stopTaskTxn(ctx context.Context, tx *store.Txn, it store.Item[store.Task], code, reason string) error {
	t := it.Value
	t.DesiredStatus = "STOPPED"
	if t.StopCode == "" {
		t.StopCode, t.StoppedReason = code, reason
	}
	*t.Version++
	dkey := store.DesiredKey(t.Cluster, t.InstanceID, t.ID)
	d, err := store.Get[protocol.Task](ctx, s.st, dkey)
	switch {
	case errors.Is(err, store.ErrNotFound):
		// No agent will act on it: it is stopped now.
		s.markStopped(&t)
	case err != nil:
		return err
	default:
		dt := d.Value
		dt.DesiredStatus, dt.StopCode, dt.StoppedReason = "STOPPED", t.StopCode, t.StoppedReason
		dt.Version++
		tx.Update(dkey, d.Rev, dt)
	}
	tx.Update(it.Key, it.Rev, t)
	return nil
}

func (s *Service) markStopped(t *store.Task) {
	now := shapes.At(s.now())
	t.LastStatus = "STOPPED"
	if t.StoppedAt.IsZero() {
		t.StoppedAt = now
	}
	if t.StoppingAt.IsZero() {
		t.StoppingAt = now
	}
	for i := range t.Containers {
		if t.Containers[i].LastStatus != "STOPPED" {
			t.Containers[i].LastStatus = "STOPPED"
		}
	}
}

func (s *Service) DescribeTasks(ctx context.Context, req *shapes.DescribeTasksRequest) (*shapes.DescribeTasksResponse, error) {
	cl, err := s.activeCluster(ctx, "cluster", req.Cluster)
	if err != nil {
		return nil, err
	}
	if len(req.Tasks) == 0 || len(req.Tasks) > 100 {
		return nil, fault.Invalid("tasks", "must name 1 to 100 tasks")
	}
	out := &shapes.DescribeTasksResponse{Tasks: []shapes.Task{}, Failures: []shapes.Failure{}}
	for i, ref := range req.Tasks {
		id, err := s.taskID(fieldIndex("tasks", i), cl.Value.ClusterName, ref)
		if err != nil {
			return nil, err
		}
		it, err := store.Get[store.Task](ctx, s.st, store.TaskKey(cl.Value.ClusterName, id))
		if errors.Is(err, store.ErrNotFound) {
			out.Failures = append(out.Failures, shapes.Failure{Arn: s.arns.task(cl.Value.ClusterName, id), Reason: "MISSING"})
			continue
		}
		if err != nil {
			return nil, storeErr(err)
		}
		out.Tasks = append(out.Tasks, s.taskView(it.Value, slices.Contains(req.Include, "TAGS")))
	}
	return out, nil
}

func (s *Service) ListTasks(ctx context.Context, req *shapes.ListTasksRequest) (*shapes.ListTasksResponse, error) {
	cl, err := s.activeCluster(ctx, "cluster", req.Cluster)
	if err != nil {
		return nil, err
	}
	cluster := cl.Value.ClusterName
	instance := ""
	if req.ContainerInstance != "" {
		if instance, err = s.instanceID("containerInstance", cluster, req.ContainerInstance); err != nil {
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
	p, err := newPage(req.MaxResults, req.NextToken, scope, 100)
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
			!desiredMatches(desired, t):
			return false
		}
		return true
	}
	out := &shapes.ListTasksResponse{TaskArns: []string{}}
	if instance != "" {
		return s.listInstanceTasks(ctx, cluster, instance, p, scope, match, out)
	}
	if req.Family == "" {
		// Everything else the filters ask is in the fleet view.
		viewMatch := func(t *fleetTask) bool {
			switch {
			case req.StartedBy != "" && t.startedBy != req.StartedBy,
				req.DaemonName != "" && t.group != "daemon:"+req.DaemonName,
				service != "" && t.group != "service:"+service:
				return false
			case desired == "PENDING":
				return t.desiredStatus == "RUNNING" && t.last != "RUNNING"
			}
			return t.desiredStatus == desired
		}
		return s.listTasksByView(ctx, cluster, p, scope, viewMatch, match, out)
	}
	after := p.after
	for {
		items, more, err := store.List[store.Task](ctx, s.st, store.TaskPrefix(cluster), after, p.limit-len(out.TaskArns))
		if err != nil {
			return nil, storeErr(err)
		}
		for _, it := range items {
			after = it.Key
			if match(it.Value) {
				out.TaskArns = append(out.TaskArns, it.Value.TaskArn)
			}
		}
		if !more || len(out.TaskArns) == p.limit {
			out.NextToken = nextToken(scope, after, more)
			return out, nil
		}
	}
}

// listTasksByView is ListTasks for filters the fleet view answers: the
// cluster's task keys are walked in order and each task is matched on its
// view entry, so a page costs no decoding. Decoding every record on the
// way to a page of running tasks among thousands stopped was most of
// ListTasks' cost in a rollout. A task the view does not know yet is read.
func (s *Service) listTasksByView(ctx context.Context, cluster string, p page, scope string, viewMatch func(*fleetTask) bool,
	match func(store.Task) bool, out *shapes.ListTasksResponse) (*shapes.ListTasksResponse, error) {
	prefix := store.TaskPrefix(cluster)
	arns, next, err := s.pageByView(ctx, prefix, p, scope, func(v fleetView, id string) (string, verdict) {
		switch t := v.cluster(cluster).tasks[id]; {
		case t == nil:
			return "", unknown
		case viewMatch(t):
			return s.arns.task(cluster, id), yes
		}
		return "", no
	}, func(key string) (string, bool, error) {
		it, err := store.Get[store.Task](ctx, s.st, key)
		if err != nil {
			return "", false, err
		}
		return it.Value.TaskArn, match(it.Value), nil
	})
	if err != nil {
		return nil, storeErr(err)
	}
	out.TaskArns, out.NextToken = arns, next
	return out, nil
}

// verdict is what the fleet view says of one record for a list.
type verdict uint8

const (
	no verdict = iota
	yes
	unknown // not in the view yet: read the record
)

// pageByView pages the keys under prefix after p.after, in key order,
// deciding each in the fleet view (judge, under its read lock, with the
// key's ID after prefix) and reading only the records the view does not
// know yet (read: the ARN and whether it matches; a record gone since is
// left out). It returns the page's ARNs (never nil: an empty page is an
// empty list) and the next token.
func (s *Service) pageByView(ctx context.Context, prefix string, p page, scope string,
	judge func(v fleetView, id string) (string, verdict), read func(key string) (string, bool, error)) ([]string, string, error) {
	arns := []string{}
	after := p.after
	for {
		keys, more, err := store.Keys(ctx, s.st, prefix, after, max(2*(p.limit-len(arns)), 64))
		if err != nil {
			return nil, "", err
		}
		found := make([]string, len(keys))
		verdicts := make([]verdict, len(keys))
		v, err := s.fleetView(ctx)
		if err != nil {
			return nil, "", err
		}
		for i, k := range keys {
			found[i], verdicts[i] = judge(v, k[len(prefix):])
		}
		v.done()
		for i, k := range keys {
			if len(arns) == p.limit {
				return arns, nextToken(scope, after, true), nil
			}
			after = k
			switch verdicts[i] {
			case yes:
				arns = append(arns, found[i])
			case unknown:
				arn, ok, err := read(k)
				if errors.Is(err, store.ErrNotFound) {
					continue
				}
				if err != nil {
					return nil, "", err
				}
				if ok {
					arns = append(arns, arn)
				}
			}
		}
		if !more || len(arns) == p.limit {
			return arns, nextToken(scope, after, more), nil
		}
	}
}

// listInstanceTasks is ListTasks for one container instance: its tasks are
// found in the fleet view and only they are read, in key order as the
// scan of the cluster's records would list them. That scan decoded every
// task of the cluster (30,000 at 5,000 instances) for an instance's few.
func (s *Service) listInstanceTasks(ctx context.Context, cluster, instance string, p page, scope string, match func(store.Task) bool,
	out *shapes.ListTasksResponse) (*shapes.ListTasksResponse, error) {
	v, err := s.fleetView(ctx)
	if err != nil {
		return nil, storeErr(err)
	}
	var keys []string
	for id, t := range v.cluster(cluster).tasks {
		if t.instance != instance {
			continue
		}
		if key := store.TaskKey(cluster, id); key > p.after {
			keys = append(keys, key)
		}
	}
	v.done()
	slices.Sort(keys)
	last := p.after
	for i, key := range keys {
		if len(out.TaskArns) == p.limit {
			out.NextToken = nextToken(scope, last, i < len(keys))
			return out, nil
		}
		last = key
		it, err := store.Get[store.Task](ctx, s.st, key)
		if errors.Is(err, store.ErrNotFound) {
			continue // gone since the view was read
		}
		if err != nil {
			return nil, storeErr(err)
		}
		if match(it.Value) {
			out.TaskArns = append(out.TaskArns, it.Value.TaskArn)
		}
	}
	return out, nil
}

// desiredMatches applies ListTasks' desiredStatus filter; PENDING means
// desired RUNNING but not yet running.
func desiredMatches(filter string, t store.Task) bool {
	switch filter {
	case "PENDING":
		return t.DesiredStatus == "RUNNING" && t.LastStatus != "RUNNING"
	default:
		return t.DesiredStatus == filter
	}
}

// activeTaskDefinition resolves a task definition new tasks may use.
func (s *Service) activeTaskDefinition(ctx context.Context, field, ref string) (store.Item[store.TaskDefinition], error) {
	it, err := s.taskDefinition(ctx, field, ref)
	if err != nil {
		return it, err
	}
	if it.Value.Status != "ACTIVE" {
		return it, fault.ClientError("%s: task definition %s is %s; new tasks need an ACTIVE revision", field, it.Value.TaskDefinitionArn, it.Value.Status)
	}
	return it, nil
}
