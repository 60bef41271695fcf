package fleet

import (
	"cmp"
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/store"
	"github.com/capstanhq/capstan/internal/taskdef"
)

func (a ARNs) Task(cluster, id string) string { return a.Base() + "task/" + cluster + "/" + id }

func (a ARNs) container(cluster, task, id string) string {
	return a.Base() + "container/" + cluster + "/" + task + "/" + id
}

// taskID resolves a task ARN or ID within a cluster.
func (s *State) TaskID(field, cluster, ref string) (string, error) {
	id := ref
	if strings.HasPrefix(ref, "arn:") {
		typ, path, ok := s.ARNs.Resource(ref)
		c, i, ok2 := strings.Cut(path, "/")
		if !ok || !ok2 || typ != "task" || !s.ARNs.InAccount(ref) {
			return "", fault.Invalid(field, "%q is not a task ARN (%s)", Clip(ref), s.ARNs.Task("CLUSTER", "ID"))
		}
		if c != cluster {
			return "", fault.Invalid(field, "task %s is not in cluster %q", Clip(ref), cluster)
		}
		id = i
	}
	if !instanceIDPattern.MatchString(id) {
		return "", fault.Invalid(field, "%q is not a task ID or ARN", Clip(ref))
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
			return fault.Invalid(f+".name", "task definition has no container %q", Clip(o.Name))
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
type TaskRequest struct {
	Cluster, TaskDefinition, Group, StartedBy string
	Overrides                                 *shapes.TaskOverride
	Tags                                      []shapes.Tag
	Count                                     int
	NetworkConfiguration                      *shapes.NetworkConfiguration
	// instances, for StartTask: place on exactly these.
	Instances []string
	Rules     placementRules
	// owner, for a service's tasks: the service record the launch was
	// decided on, which must be unchanged. Its task definition may be
	// INACTIVE, as ECS allows.
	owner *Guard
	// capacityProvider, when set, places on that managed-instances
	// provider's instances only; a task that finds no room is recorded
	// PROVISIONING and placed when the instances controller has made room.
	CapacityProvider string
	// HostAccess grants the tasks the host access their definition asks
	// for; only an authorized API call sets it.
	HostAccess bool
	// Fargate is launchType FARGATE: the definition must be compatible.
	Fargate bool
	// ExecuteCommand is the call's enableExecuteCommand: ExecuteCommand
	// serves only tasks started with it.
	ExecuteCommand bool
}

const noInstances = "No Container Instances were found in your cluster."

var errNoInstances = fault.Invalid("", noInstances) // ECS's words, whole

// startTasks places and records tasks; everything is written in one
// transaction with the instances' new remaining resources.
func (s *State) StartTasks(ctx context.Context, r TaskRequest) ([]shapes.Task, []shapes.Failure, error) {
	if len(r.StartedBy) > 36 {
		return nil, nil, fault.Invalid("startedBy", "must be at most 36 characters")
	}
	if len(r.Group) > 255 {
		return nil, nil, fault.Invalid("group", "must be at most 255 characters")
	}
	if err := taskdef.CheckTags("tags", r.Tags); err != nil {
		return nil, nil, err
	}
	// What committed chunks wrote stays written across retries: a retry
	// places only what is left.
	var tasks []shapes.Task
	var failures []shapes.Failure
	committed := []shapes.Task{}
	err := Retry(ctx, func() error {
		tasks, failures = []shapes.Task{}, []shapes.Failure{}
		left := r.Count - len(committed)
		cl, err := s.ActiveCluster(ctx, "cluster", r.Cluster)
		if err != nil {
			return err
		}
		cluster := cl.Value.ClusterName
		// Placements of other processes, and other writers of instance
		// records, are still caught by the revision checks.
		mu, _ := s.placing.LoadOrStore(cluster, new(sync.Mutex))
		mu.(*sync.Mutex).Lock()
		defer mu.(*sync.Mutex).Unlock()
		lookup := s.ActiveTaskDefinition
		if r.owner != nil {
			if err := s.ownerUnchanged(ctx, *r.owner); err != nil {
				return err
			}
			lookup = s.serviceTaskDefinition
		}
		td, err := lookup(ctx, "taskDefinition", r.TaskDefinition)
		if err != nil {
			return err
		}
		def := td.Value.TaskDefinition
		if err := checkOverrides(def, r.Overrides); err != nil {
			return err
		}
		if err := CheckNetworkConfiguration(def.NetworkMode, r.NetworkConfiguration, r.owner == nil); err != nil {
			return err
		}
		if r.Fargate && !slices.Contains(def.Compatibilities, "FARGATE") {
			return &fault.Error{Kind: fault.InvalidParameter, Message: "Task definition does not support launch_type FARGATE."}
		}
		n, err := taskNeed(def, r.Overrides)
		if err != nil {
			return err
		}
		rules := r.Rules
		if r.Instances == nil {
			// The scheduler honours the definition's constraints too;
			// StartTask, naming its instances, does not (as ECS).
			if rules, err = withDefinitionConstraints(r.Rules, def.PlacementConstraints); err != nil {
				return err
			}
		}
		group := r.Group
		if group == "" {
			group = "family:" + def.Family
		}
		var room need
		if r.Instances == nil && rules.narrowsByRoom() {
			room = need{cpu: n.cpu, mem: n.mem}
		}
		cands, err := s.candidates(ctx, cluster, group, r.Instances, room)
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
			_, why := place(append(slices.Clip(pool), short...), n, rules, rnd)
			return why
		}
		if r.CapacityProvider != "" {
			cp, err := s.ClusterCapacityProvider(ctx, "capacityProviderStrategy[0].capacityProvider", r.CapacityProvider, cluster)
			if err != nil {
				return err
			}
			if !slices.Contains(cl.Value.CapacityProviders, cp.Value.Name) {
				return fault.Invalid("capacityProviderStrategy[0].capacityProvider", "capacity provider %q is not associated with cluster %q", cp.Value.Name, cluster)
			}
			cands = slices.DeleteFunc(cands, func(c *candidate) bool { return c.cp != r.CapacityProvider })
		} else if len(cands) == 0 {
			if short, err := s.shortOfRoom(ctx, cluster, group, room); err != nil || len(short) == 0 {
				if err == nil && r.owner == nil {
					// To RunTask, ACTIVE instances whose agents are away are
					// failures of the call, as ECS reports them, not an error.
					if failures, err = s.agentFailures(ctx, cluster); err == nil && len(failures) > 0 {
						return nil
					}
				}
				return cmp.Or(err, error(errNoInstances))
			}
		}
		if fargateOnly(def) {
			// FARGATE definitions run on managed instances, not on
			// instances registered by hand.
			cands = slices.DeleteFunc(cands, func(c *candidate) bool { return c.cp == "" })
		}
		// instances are the records of instances placed on, read as the
		// placement view saw them (or as this call last wrote them).
		instances := map[string]store.Item[store.ContainerInstance]{}
		// The view was read after this process's writes: the records are
		// read without waiting again (a busy server writes all the time),
		// and one newer than the view is a conflict anyway.
		rctx, err := s.Store.ReadOnly(ctx)
		if err != nil {
			return err
		}
		instanceOf := func(c *candidate) (store.Item[store.ContainerInstance], error) {
			if it, ok := instances[c.id]; ok {
				return it, nil
			}
			it, err := store.Get[store.ContainerInstance](rctx, s.Store, store.ContainerInstanceKey(cluster, c.id))
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
			tx := s.Store.Txn().Unchanged(cl.Key, cl.Rev).Unchanged(td.Key, td.Rev)
			if r.owner != nil {
				tx.Unchanged(r.owner.Key, r.owner.Rev)
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
				ci.RemainingResources = rem.Shapes()
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
			if r.Instances == nil {
				picker = newSpreadPicker(cands, n, rules, rnd)
			}
			for i := range left {
				if r.Count > startChunk && len(chunk) == s.chunkSize() {
					if err := commit(); err != nil {
						return err
					}
				}
				pool := cands
				if r.Instances != nil {
					pool = []*candidate{cands[i]}
				}
				var c *candidate
				why := "no instance of the capacity provider yet"
				switch {
				case len(pool) > 0 && picker != nil:
					c = picker.next()
				case len(pool) > 0:
					c, why = place(pool, n, rules, rnd)
				}
				if c == nil && r.CapacityProvider == "" && r.Instances == nil {
					why = whyNot(pool, rnd)
				}
				if c == nil && r.CapacityProvider != "" {
					// Waits for capacity: the instances controller provisions it.
					t, _ := s.newTask(cluster, cl.Value.ClusterArn, store.ContainerInstance{}, td.Value, group, r, n)
					t.CapacityProviderName = r.CapacityProvider
					t.StoppedReason = ""
					tx.Create(store.TaskKey(cluster, t.ID), t)
					chunk = append(chunk, s.TaskView(t, true))
					continue
				}
				if c == nil {
					f := shapes.Failure{Reason: why}
					if r.owner == nil {
						f = placementFailure(why)
					}
					if r.Instances != nil {
						f.Arn = s.ARNs.ContainerInstance(cluster, pool[0].id)
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
				chunk = append(chunk, s.TaskView(t, true))
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
func (s *State) chunkSize() int { return max(startChunk, (s.Store.MaxTxnOps()-8)/3) }

// candidates are the instances that can take new tasks: ACTIVE, with a
// connected agent (or exactly the named ones for StartTask), from the
// fleet view. Unnamed instances with less free CPU or memory than room
// are left out: no task of the call fits there, and in a full fleet
// counting each one's group tasks was most of a placement (a rollout's
// waiting tasks meet thousands of full instances and a few new ones).
func (s *State) candidates(ctx context.Context, cluster, group string, named []string, room need) ([]*candidate, error) {
	return s.instancesByRoom(ctx, cluster, group, named, room, true)
}

// shortOfRoom are the instances candidates leaves out for room, for the
// reasons a task did not fit.
func (s *State) shortOfRoom(ctx context.Context, cluster, group string, room need) ([]*candidate, error) {
	if room.cpu <= 0 && room.mem <= 0 {
		return nil, nil
	}
	return s.instancesByRoom(ctx, cluster, group, nil, room, false)
}

func (s *State) instancesByRoom(ctx context.Context, cluster, group string, named []string, room need, fitting bool) ([]*candidate, error) {
	ids := make([]string, len(named))
	for i, ref := range named {
		id, err := s.InstanceID(fieldIndex("containerInstances", i), cluster, ref)
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
			if t := c.tasks[id]; t != nil && t.Group == group {
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
func (s *State) newTask(cluster, clusterArn string, ci store.ContainerInstance, td store.TaskDefinition, group string, r TaskRequest, n need) (store.Task, protocol.Task) {
	id := NewInstanceID()
	now := s.Now()
	t := store.Task{ID: id, Cluster: cluster, InstanceID: ci.ID, Kind: protocol.KindStandalone,
		Reserved: &store.Reservation{CPU: n.cpu, Memory: n.mem, Ports: n.ports}}
	if strings.HasPrefix(r.StartedBy, "ecs-svc/") {
		t.Kind = protocol.KindService
	}
	t.TaskArn = s.ARNs.Task(cluster, id)
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
	t.StartedBy = r.StartedBy
	t.Tags = r.Tags
	t.EnableExecuteCommand = ptr(r.ExecuteCommand)
	t.Version = ptr(int64(1))
	t.Cpu = strconv.Itoa(n.cpu)
	t.Memory = strconv.Itoa(n.mem)
	t.AvailabilityZone = "local"
	t.Overrides = r.Overrides
	if t.Overrides == nil {
		t.Overrides = &shapes.TaskOverride{ContainerOverrides: []shapes.ContainerOverride{}}
	}
	for _, c := range td.ContainerDefinitions {
		sc := shapes.Container{ContainerArn: s.ARNs.container(cluster, id, NewInstanceID()), TaskArn: t.TaskArn,
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
		Group: group, StartedBy: r.StartedBy, DesiredStatus: "RUNNING", Definition: td.TaskDefinition, Overrides: r.Overrides,
		Tags: r.Tags, HostAccess: r.HostAccess, CreatedAt: now, Version: 1}
	t.HostAccess = r.HostAccess
	t.Attachments = taskAttachments(t.TaskArn, td.NetworkMode, r.NetworkConfiguration)
	return t, desired
}

// taskView is the API view of a stored task.
func (s *State) TaskView(t store.Task, tags bool) shapes.Task {
	v := t.Task
	if !tags {
		v.Tags = nil
	}
	if v.Containers == nil {
		v.Containers = []shapes.Container{}
	}
	return v
}

// stopTaskTxn sets a task's desired status to STOPPED in tx, both on the
// task and on the desired entry its agent reads. A task whose instance is
// gone is stopped outright.
func (s *State) StopTaskTxn(ctx context.Context, tx *store.Txn, it store.Item[store.Task], code, reason string) error {
	t := it.Value
	t.DesiredStatus = "STOPPED"
	if t.StopCode == "" {
		t.StopCode, t.StoppedReason = code, reason
	}
	*t.Version++
	dkey := store.DesiredKey(t.Cluster, t.InstanceID, t.ID)
	d, err := store.Get[protocol.Task](ctx, s.Store, dkey)
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

func (s *State) markStopped(t *store.Task) {
	now := shapes.At(s.Now())
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
	t.Attachments = deletedAttachments(t.Attachments)
}

// ECS answers a reference to a task definition it cannot find with a
// ClientException, not a NotFound.
func unknownTaskDefinition(field, format string, args ...any) error {
	return fault.ClientError(field+": "+format, args...)
}

// taskDefinition resolves a family (its latest ACTIVE revision),
// family:revision or ARN to the stored revision, in any status.
func (s *State) TaskDefinition(ctx context.Context, field, ref string) (store.Item[store.TaskDefinition], error) {
	family, rev, err := s.ARNs.FamilyRevision(field, "task-definition", ref)
	if err != nil {
		return store.Item[store.TaskDefinition]{}, err
	}
	key := store.TaskDefinitionKey(family, rev)
	if rev == 0 {
		if key, err = s.LatestActive(ctx, store.TaskDefinitionPrefix(family)); err != nil {
			return store.Item[store.TaskDefinition]{}, err
		}
		if key == "" {
			return store.Item[store.TaskDefinition]{}, unknownTaskDefinition(field, "task definition family %q has no ACTIVE revision", family)
		}
	}
	it, err := store.Get[store.TaskDefinition](ctx, s.Store, key)
	if errors.Is(err, store.ErrNotFound) {
		return it, unknownTaskDefinition(field, "task definition %s:%d does not exist", family, rev)
	}
	return it, StoreErr(err)
}
