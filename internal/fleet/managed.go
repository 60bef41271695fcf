package fleet

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/store"
)

// ManagedInstancePrefix lists a cluster's provisioned instances.
func ManagedInstancePrefix(cluster string) string { return "managedinstances/" + cluster + "/" }

// ManagedInstanceKey is one provisioned instance.
func ManagedInstanceKey(cluster, id string) string { return ManagedInstancePrefix(cluster) + id }

// ManagedInstance is an instance Capstan provisioned for a capacity
// provider. It exists from the launch decision until the instance is
// terminated.
type ManagedInstance struct {
	ID               string    `json:"id"`
	Cluster          string    `json:"cluster"`
	CapacityProvider string    `json:"capacityProvider"`
	Provisioner      string    `json:"provisioner"`
	Handle           string    `json:"handle,omitempty"`
	AccessKeyID      string    `json:"accessKeyId"`
	CPU              int       `json:"cpu"`
	MemoryMiB        int       `json:"memoryMiB"`
	LaunchedAt       time.Time `json:"launchedAt"`
	// IdleSince is when the instance last had no application task.
	IdleSince time.Time `json:"idleSince,omitzero"`
	// Requested instances are launch requests made by a daemon rollout
	// (to replace instance Replaces); the instances controller launches
	// them and sets Handle.
	Requested bool   `json:"requested,omitempty"`
	Replaces  string `json:"replaces,omitempty"`
	// Terminating is set once the instance is being removed.
	Terminating bool   `json:"terminating,omitempty"`
	Reason      string `json:"reason,omitempty"`
}

// ManagedInstances lists the provisioned instances of a capacity provider.
// The records are shared with later calls: callers must not change them.
func (s *State) ManagedInstances(ctx context.Context, cluster, cp string) ([]*store.Item[ManagedInstance], error) {
	items, err := s.managedMemo.List(ctx, s.Store, ManagedInstancePrefix(cluster))
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(items, func(it *store.Item[ManagedInstance]) bool { return it.Value.CapacityProvider != cp }), nil
}

// NewManagedInstance records a launch decision with its agent credential,
// before the provisioner is asked, so a crash in between leaves a record
// the controller can clean up.
func (s *State) NewManagedInstance(ctx context.Context, m ManagedInstance) (ManagedInstance, store.AgentCredential, error) {
	cred := s.MintAgentCredential(m.Cluster, "managed instance "+m.ID)
	cred.CapacityProvider = m.CapacityProvider
	cred.Managed = true
	m.AccessKeyID = cred.AccessKeyID
	m.LaunchedAt = s.Now()
	// Grouped: a pass launches hundreds side by side.
	_, err := s.Store.Txn().Create(ManagedInstanceKey(m.Cluster, m.ID), m).Create(store.CredentialKey(cred.AccessKeyID), cred).CommitGrouped(ctx)
	return m, cred, StoreErr(err)
}

// UpdateManagedInstance rewrites a managed instance record.
func (s *State) UpdateManagedInstance(ctx context.Context, it store.Item[ManagedInstance]) error {
	_, err := s.Store.Txn().Update(ManagedInstanceKey(it.Value.Cluster, it.Value.ID), it.Rev, it.Value).Commit(ctx)
	return StoreErr(err)
}

// ForgetManagedInstance removes a terminated instance's record and credential.
func (s *State) ForgetManagedInstance(ctx context.Context, it store.Item[ManagedInstance]) error {
	tx := s.Store.Txn().Delete(ManagedInstanceKey(it.Value.Cluster, it.Value.ID), it.Rev)
	if c, err := store.Get[store.AgentCredential](ctx, s.Store, store.CredentialKey(it.Value.AccessKeyID)); err == nil {
		tx.Delete(c.Key, c.Rev)
	}
	_, err := tx.Commit(ctx)
	return StoreErr(err)
}

// InstanceOf returns the container instance a managed instance registered
// as (through its credential), if it has.
func (s *State) InstanceOf(ctx context.Context, m ManagedInstance) (store.ContainerInstance, bool, error) {
	b, ok, err := s.RegisteredAs(ctx, m)
	if !ok || err != nil {
		return store.ContainerInstance{}, false, err
	}
	ci, err := store.Get[store.ContainerInstance](ctx, s.Store, store.ContainerInstanceKey(m.Cluster, b.ID))
	if errors.Is(err, store.ErrNotFound) {
		return store.ContainerInstance{}, false, nil
	}
	return ci.Value, err == nil, err
}

// InstanceStatus is a container instance's status from the fleet view (ok
// false: no such record). Each session asks whenever its instance's record
// changes, and placements rewrite it all the time.
func (s *State) InstanceStatus(ctx context.Context, cluster, id string) (status string, ok bool, err error) {
	v, err := s.fleetView(ctx)
	if err != nil {
		return "", false, err
	}
	defer v.done()
	fi := v.cluster(cluster).instances[id]
	if fi == nil || !fi.rec {
		return "", false, nil
	}
	return fi.status, true, nil
}

// InstanceBrief is what the fleet view holds of a container instance.
type InstanceBrief struct {
	Cluster, ID, Arn, Status string
	CapacityProvider         string // name
	// Managed: Capstan provisioned it.
	Managed      bool
	RegisteredAt time.Time
	// CPU and Memory are the units and MiB left.
	CPU, Memory int
	Connected   bool
	// Busy: an application task not yet STOPPED is in its manifest.
	Busy bool
}

// RegisteredAs is InstanceOf from the fleet view: the instances
// controller looks at every managed instance on every pass, and decoding
// its credential and container instance records each time was a
// twentieth of a replacement rollout's work at 5,000 instances.
func (s *State) RegisteredAs(ctx context.Context, m ManagedInstance) (InstanceBrief, bool, error) {
	regs, err := s.Registrations(ctx, []*ManagedInstance{&m})
	if err != nil {
		return InstanceBrief{}, false, err
	}
	return regs[0], regs[0].ID != "", nil
}

// Registrations is RegisteredAs for many managed instances in one read of
// the fleet view: what each of ms registered as, in order (ID "": not
// registered). Each read of the view waits behind the cache's next change;
// a pass over thousands of instances read one by one waited seconds.
func (s *State) Registrations(ctx context.Context, ms []*ManagedInstance) ([]InstanceBrief, error) {
	v, err := s.fleetView(ctx)
	if err != nil {
		return nil, err
	}
	defer v.done()
	out := make([]InstanceBrief, len(ms))
	for i, m := range ms {
		id, ok := v.f.registeredAs[m.AccessKeyID]
		if !ok {
			continue
		}
		fi := v.cluster(m.Cluster).instances[id]
		if fi == nil || !fi.rec {
			continue
		}
		// registeredAs holds managed credentials only.
		out[i] = fi.brief(m.Cluster, true)
	}
	return out, nil
}

// InstanceSummary is what the fleet view holds of a container instance
// record (found false: none).
func (s *State) InstanceSummary(ctx context.Context, cluster, id string) (b InstanceBrief, found bool, err error) {
	v, err := s.fleetView(ctx)
	if err != nil {
		return InstanceBrief{}, false, err
	}
	defer v.done()
	fi := v.cluster(cluster).instances[id]
	if fi == nil || !fi.rec {
		return InstanceBrief{}, false, nil
	}
	return fi.brief(cluster, v.f.managed[fi.accessKeyID]), true, nil
}

// brief summarizes fi; the fleet's lock is held.
func (fi *fleetInstance) brief(cluster string, managed bool) InstanceBrief {
	return InstanceBrief{Cluster: cluster, ID: fi.id, Arn: fi.arn, Status: fi.status, CapacityProvider: fi.cp, Managed: managed,
		RegisteredAt: fi.registeredAt, CPU: fi.cpu, Memory: fi.mem, Connected: fi.connected, Busy: fi.busy > 0}
}

// CapacityProvider reads a capacity provider by name.
func (s *State) CapacityProvider(ctx context.Context, name string) (store.CapacityProvider, error) {
	it, err := store.Get[store.CapacityProvider](ctx, s.Store, store.CapacityProviderKey(name))
	return it.Value, err
}

// Endpoint is the URL agents reach the server at.
func (s *State) Endpoint() string { return s.endpoint }

// Waiting lists the tasks of a capacity provider that wait for an instance,
// oldest first. The tasks are shared with the next call: callers must not
// change them.
func (s *State) Waiting(ctx context.Context, cluster, cp string) ([]*store.Task, error) {
	// Called on every task change: the fleet view names the few tasks
	// without an instance, so only those are read.
	ids, err := s.waitingIDs(ctx, cluster)
	if err != nil {
		return nil, err
	}
	// The same tasks wait pass after pass (thousands, while a rollout's
	// instances come up): one decoded at a revision is not decoded again,
	// nor copied (a task is a kilobyte; copies of them were a twentieth of
	// what a replacement rollout allocated).
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = store.TaskKey(cluster, id)
	}
	items, err := s.waitingMemo.Read(ctx, s.Store, store.TaskPrefix(cluster), keys)
	if err != nil {
		return nil, err
	}
	var out []*store.Task
	for _, it := range items {
		if t := &it.Value; t.InstanceID == "" && t.CapacityProviderName == cp && t.DesiredStatus == "RUNNING" && t.LastStatus != "STOPPED" {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt.Time) })
	return out, nil
}

// Sizer sizes tasks, reading each task definition once: a pass sizes
// thousands of waiting tasks of a few definitions (a task's overrides
// name its containers, so most differ from their definition's need).
type Sizer struct {
	s    *State
	defs map[string]shapes.TaskDefinition
}

// Sizer returns a sizer for one pass; definitions it reads are not
// re-read, so it must not outlive the pass.
func (s *State) Sizer() *Sizer { return &Sizer{s: s, defs: map[string]shapes.TaskDefinition{}} }

// Need is the CPU and memory a task reserves.
func (z *Sizer) Need(ctx context.Context, t *store.Task) (cpu, mem int, err error) {
	def, ok := z.defs[t.TaskDefinitionArn]
	if !ok {
		td, err := z.s.TaskDefinition(ctx, "taskDefinition", t.TaskDefinitionArn)
		if err != nil {
			return 0, 0, err
		}
		def = td.Value.TaskDefinition
		z.defs[t.TaskDefinitionArn] = def
	}
	n, err := taskNeed(def, t.Overrides)
	return n.cpu, n.mem, err
}

// DaemonsNeed is what the daemons targeting a capacity provider reserve on
// each of its instances, so instance sizes include it.
func (s *State) DaemonsNeed(ctx context.Context, cluster, cp string) (cpu, mem int, err error) {
	ds, err := s.DaemonsFor(ctx, cluster, cp)
	if err != nil {
		return 0, 0, err
	}
	for _, d := range ds {
		td, err := s.DaemonTaskDefinitionByArn(ctx, d.Spec.TaskDefinitionArn)
		if err != nil {
			return 0, 0, err
		}
		def, err := DaemonDefinition(td)
		if err != nil {
			return 0, 0, err
		}
		n, err := taskNeed(def, nil)
		if err != nil {
			return 0, 0, err
		}
		cpu += n.cpu
		mem += n.mem
	}
	return cpu, mem, nil
}

// PlaceWaitingTasks places waiting tasks of a cluster on ACTIVE instances
// of their capacity providers with room (spread for a service's tasks,
// binpack for others), as they would be one by one, with one
// view of the fleet per group and one write per instance, grouped with
// others, instead of a scan and a write per task (thousands of tasks
// waiting for thousands of new instances). fits names the tasks an
// instance had room for; retry is true when some of their writes found the
// instance or the task changed, and they wait for the next pass.
func (s *State) PlaceWaitingTasks(ctx context.Context, cluster string, tasks []*store.Task) (fits map[string]bool, retry bool, err error) {
	fits = map[string]bool{}
	type groupKey struct{ group, cp string }
	byGroup := map[groupKey][]*store.Task{}
	var order []groupKey
	for _, t := range tasks {
		if t.InstanceID != "" || t.DesiredStatus != "RUNNING" {
			continue
		}
		k := groupKey{t.Group, t.CapacityProviderName}
		if _, ok := byGroup[k]; !ok {
			order = append(order, k)
		}
		byGroup[k] = append(byGroup[k], t)
	}
	rnd := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	defs := map[string]*shapes.TaskDefinition{}
	var (
		mu     sync.Mutex
		failed bool
		wg     sync.WaitGroup
	)
	sem := make(chan struct{}, 64)
	for _, k := range order {
		group := byGroup[k]
		needs := make([]need, len(group))
		var least need
		for i, t := range group {
			def, ok := defs[t.TaskDefinitionArn]
			if !ok {
				td, err := s.TaskDefinition(ctx, "taskDefinition", t.TaskDefinitionArn)
				if err != nil {
					return nil, false, err
				}
				def = &td.Value.TaskDefinition
				defs[t.TaskDefinitionArn] = def
			}
			if needs[i], err = taskNeed(*def, t.Overrides); err != nil {
				return nil, false, err
			}
			if i == 0 {
				least = need{cpu: needs[i].cpu, mem: needs[i].mem}
			}
			least.cpu, least.mem = min(least.cpu, needs[i].cpu), min(least.mem, needs[i].mem)
		}
		// Instances without room for the smallest of them are left out:
		// in a full fleet they are nearly all.
		cands, err := s.candidates(ctx, cluster, k.group, nil, least)
		if err != nil {
			return nil, false, err
		}
		cands = slices.DeleteFunc(cands, func(c *candidate) bool { return c.cp != k.cp })
		rules := placementRules{}
		if strings.HasPrefix(k.group, "service:") {
			rules.strategy = []shapes.PlacementStrategy{{Type: "spread", Field: "instanceId"}}
		}
		picks := map[*candidate][]waitingPick{}
		var picked []*candidate
		for i, t := range group {
			def, n := defs[t.TaskDefinitionArn], needs[i]
			c, _ := place(cands, n, rules, rnd)
			if c == nil {
				continue
			}
			c.cpu, c.mem = c.cpu-n.cpu, c.mem-n.mem
			for _, p := range n.ports {
				c.take(p)
			}
			c.tasks++
			c.groupTasks++
			if len(picks[c]) == 0 {
				picked = append(picked, c)
			}
			picks[c] = append(picks[c], waitingPick{id: t.ID, n: n, def: def})
			fits[t.ID] = true
		}
		for _, c := range picked {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				if err := s.placeWaitingOn(ctx, cluster, c, picks[c]); err != nil {
					mu.Lock()
					failed = true
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	return fits, failed, nil
}

// waitingPick is a waiting task picked for an instance.
type waitingPick struct {
	id  string
	n   need
	def *shapes.TaskDefinition // shared by the picks of a definition
}

// placeWaitingOn writes the tasks picked for candidate c in one
// transaction with the instance, which must still be at the revision the
// pick read. A task no longer waiting is left out; an error means none
// was placed.
func (s *State) placeWaitingOn(ctx context.Context, cluster string, c *candidate, picks []waitingPick) error {
	inst, err := store.Get[store.ContainerInstance](ctx, s.Store, store.ContainerInstanceKey(cluster, c.id))
	if err != nil {
		return err
	}
	if inst.Rev != c.rev {
		return store.ErrConflict
	}
	ci := inst.Value
	rem := readResources(ci.RemainingResources)
	tx := s.Store.Txn()
	n := 0
	for _, p := range picks {
		it, err := store.Get[store.Task](ctx, s.Store, store.TaskKey(cluster, p.id))
		if err != nil {
			continue
		}
		cur := it.Value
		if cur.InstanceID != "" || cur.DesiredStatus != "RUNNING" {
			continue
		}
		rem.cpu -= p.n.cpu
		rem.memory -= p.n.mem
		for _, port := range p.n.ports {
			if !slices.Contains(rem.ports, port) {
				rem.ports = append(rem.ports, port)
			}
		}
		cur.InstanceID, cur.ContainerInstanceArn = ci.ID, ci.ContainerInstanceArn
		cur.Reserved = &store.Reservation{CPU: p.n.cpu, Memory: p.n.mem, Ports: p.n.ports}
		*cur.Version++
		desired := protocol.Task{Arn: cur.TaskArn, ClusterArn: cur.ClusterArn, ContainerInstanceArn: ci.ContainerInstanceArn, Kind: cur.Kind,
			Group: cur.Group, StartedBy: cur.StartedBy, DesiredStatus: "RUNNING", Definition: *p.def, Overrides: cur.Overrides,
			Tags: cur.Tags, HostAccess: cur.HostAccess, CreatedAt: cur.CreatedAt.Time, Version: *cur.Version}
		tx.Update(it.Key, it.Rev, cur).Create(store.DesiredKey(cluster, ci.ID, cur.ID), desired)
		n++
	}
	if n == 0 {
		return nil
	}
	ci.RemainingResources = rem.Shapes()
	*ci.Version++
	_, err = tx.Update(inst.Key, inst.Rev, ci).CommitGrouped(ctx)
	return err
}

// CapacityProviderOf is the capacity provider of an instance as the fleet
// view has it now ("" if it has none or is not known), without waiting
// for this process's latest write: for routing changes, not decisions.
func (s *State) CapacityProviderOf(cluster, id string) string {
	s.model.mu.RLock()
	defer s.model.mu.RUnlock()
	if fi := (fleetView{s.model}).cluster(cluster).instances[id]; fi != nil {
		return fi.cp
	}
	return ""
}

// Connected reports whether an instance's agent has a session.
func (s *State) Connected(ctx context.Context, cluster, id string) bool {
	v, err := s.fleetView(ctx)
	if err != nil {
		return false
	}
	defer v.done()
	fi := v.cluster(cluster).instances[id]
	return fi != nil && fi.connected
}
