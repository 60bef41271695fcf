package instances

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/provision"
	"github.com/capstanhq/capstan/internal/store"
)

type launchFailures struct {
	n    int
	last time.Time
}

// launchBackoff is how long to wait before the next launch after n quick
// failures in a row: 5 s doubling to 5 minutes.
func launchBackoff(n int) time.Duration {
	if n == 0 {
		return 0
	}
	return min(5*time.Second<<min(n-1, 10), 5*time.Minute)
}

func (r *Reconciler) failed(cp string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failures == nil {
		r.failures = map[string]launchFailures{}
	}
	f := r.failures[cp]
	r.failures[cp] = launchFailures{n: f.n + 1, last: now}
}

// succeeded ends cp's backoff when an instance launched after its last
// failure is ACTIVE: only a later launch shows that launches work again,
// not an instance that was up before they began to fail.
func (r *Reconciler) succeeded(cp string, launchedAt time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f, ok := r.failures[cp]; ok && launchedAt.After(f.last) {
		delete(r.failures, cp)
	}
}

// launchFailed reports whether an instance found lost counts against its
// launch: it never was ACTIVE (dead in its boot, its registration or its
// daemon's first start). One that worked and was lost later, as many
// young ones are when a zone goes, is a loss to repair at once; counted,
// four lost together held their replacements 40 s (four failures), then
// sent them one at a time.
func launchFailed(registered bool, ci fleet.InstanceBrief) bool {
	return !registered || ci.Status == "REGISTERING"
}

// failing reports whether cp's last launches failed quickly.
func (r *Reconciler) failing(cp string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failures[cp].n > 0
}

// launchWait is how long launches for cp must still wait.
func (r *Reconciler) launchWait(cp string, now time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.failures[cp]
	return launchBackoff(f.n) - now.Sub(f.last)
}

// dispatch terminates instances, starts the requested replacements and
// launches instances of the given sizes in the background, at most
// launchWorkers provisioner calls for launches and as many terminations at
// a time over all passes. A provisioner that launches in batches gets the
// pass's launches up to launchBatch a call. Failed launches of one pass
// count once toward the capacity provider's launch backoff; a later pass
// tries again.
func (r *Reconciler) dispatch(ctx context.Context, cluster, cp string, retire []retirement, replacements []store.Item[fleet.ManagedInstance], sizes []bin, dc, dm int, now time.Time) {
	launchFailed := new(sync.Once)
	for _, t := range retire {
		r.run(ctx, []actOn{{id: t.m.Value.ID}}, cp, "terminate instance "+t.m.Value.ID, nil, now,
			func() error { return r.terminate(ctx, t.m, t.registered, t.ci, t.reason) })
	}
	var launches []launching
	for _, m := range replacements {
		launches = append(launches, launching{actOn: actOn{id: m.Value.ID, a: act{launch: true}},
			record: func() (store.Item[fleet.ManagedInstance], error) { return m, nil }})
	}
	for _, b := range sizes {
		id := newInstanceID()
		launches = append(launches, launching{actOn: actOn{id: id, a: act{launch: true, room: bin{cpu: b.cpu - dc, mem: b.mem - dm}}},
			record: func() (store.Item[fleet.ManagedInstance], error) {
				return r.newRecord(ctx, cluster, cp, id, b.cpu, b.mem)
			}})
	}
	size := 1
	if _, ok := r.Provisioner.(provision.BatchLauncher); ok {
		size = launchBatch
	}
	for batch := range slices.Chunk(launches, size) {
		acts := make([]actOn, len(batch))
		for i, l := range batch {
			acts[i] = l.actOn
		}
		what := "launch managed instance " + batch[0].id
		if len(batch) > 1 {
			what = fmt.Sprintf("launch %d managed instances", len(batch))
		}
		r.run(ctx, acts, cp, what, launchFailed, now, func() error { return r.start(ctx, batch) })
	}
}

// actOn is an act on one managed instance.
type actOn struct {
	id string
	a  act
}

// launching is an instance to launch and how to get its record: a
// replacement's exists, an instance for waiting tasks is recorded first.
type launching struct {
	actOn
	record func() (store.Item[fleet.ManagedInstance], error)
}

// run records acts as in flight and carries them out in the background, in
// one worker's turn.
func (r *Reconciler) run(ctx context.Context, acts []actOn, cp, what string, launchFailed *sync.Once, now time.Time, fn func() error) {
	r.mu.Lock()
	if r.acting == nil {
		r.acting = map[string]act{}
		r.launchers = make(chan struct{}, launchWorkers)
		r.stoppers = make(chan struct{}, launchWorkers)
	}
	for _, a := range acts {
		r.acting[a.id] = a.a
	}
	workers := r.stoppers
	if acts[0].a.launch {
		workers = r.launchers
	}
	r.mu.Unlock()
	r.inFlight.Go(func() {
		// Forgotten only once its writes are done: a pass that no longer
		// sees it in flight reads what it wrote.
		defer func() {
			r.mu.Lock()
			for _, a := range acts {
				delete(r.acting, a.id)
			}
			r.mu.Unlock()
		}()
		select {
		case workers <- struct{}{}:
		case <-ctx.Done():
			return
		}
		defer func() { <-workers }()
		if err := fn(); err != nil {
			r.Log.Error(what, "capacity_provider", cp, "err", err)
			if launchFailed != nil {
				launchFailed.Do(func() { r.failed(cp, now) })
			}
		}
	})
}

// inFlightNow is a copy of the acts in flight.
func (r *Reconciler) inFlightNow() map[string]act {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]act, len(r.acting))
	for id, a := range r.acting {
		out[id] = a
	}
	return out
}

func (r *Reconciler) busy() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.acting) > 0
}

// Wait returns once the launches and terminations in flight have ended
// (after the loop's context is done, promptly).
func (r *Reconciler) Wait() { r.inFlight.Wait() }

// launchWorkers bounds the launches in flight, and the terminations: each
// is a provisioner call and a few writes, waiting more than working, and a
// 25% rollout of 5,000 instances asks for 1,250 of each at once.
const launchWorkers = 64

// launchBatch bounds the instances one provisioner call launches, where
// the provisioner takes batches.
const launchBatch = 50

// MaxLaunches bounds the instances one pass launches: thousands of
// waiting tasks get theirs over a few passes, each pass's writes bounded.
const MaxLaunches = 500

// bin is the room left on an instance for waiting tasks.
type bin struct{ cpu, mem int }

// fit takes room for a task from the first bin that has it.
func fit(room []bin, cpu, mem int) bool {
	for i := range room {
		if room[i].cpu >= cpu && room[i].mem >= mem {
			room[i].cpu -= cpu
			room[i].mem -= mem
			return true
		}
	}
	return false
}

// size is the instance size for a task that needs cpu and mem together
// with the capacity provider's daemons: the launch template's, grown to
// hold them.
func (r *Reconciler) size(ctx context.Context, cpName string, cpu, mem int) (int, int, error) {
	cp, err := r.Svc.CapacityProvider(ctx, cpName)
	if err != nil {
		return 0, 0, err
	}
	tcpu, tmem := DefaultCPU, DefaultMemoryMiB
	if mip := cp.ManagedInstancesProvider; mip != nil && mip.InstanceLaunchTemplate != nil && mip.InstanceLaunchTemplate.InstanceRequirements != nil {
		req := mip.InstanceLaunchTemplate.InstanceRequirements
		if req.VCpuCount != nil && req.VCpuCount.Min != nil {
			tcpu = int(*req.VCpuCount.Min) * 1024
		}
		if req.MemoryMiB != nil && req.MemoryMiB.Min != nil {
			tmem = int(*req.MemoryMiB.Min)
		}
	}
	return max(tcpu, cpu), max(tmem, mem), nil
}

func newInstanceID() string {
	var b [6]byte
	rand.Read(b[:])
	return "mi-" + hex.EncodeToString(b[:])
}

// newRecord records a managed instance to launch for waiting tasks.
func (r *Reconciler) newRecord(ctx context.Context, cluster, cp, id string, cpu, mem int) (store.Item[fleet.ManagedInstance], error) {
	m, _, err := r.Svc.NewManagedInstance(ctx, fleet.ManagedInstance{ID: id, Cluster: cluster,
		CapacityProvider: cp, Provisioner: r.Provisioner.Name(), CPU: cpu, MemoryMiB: mem})
	if err != nil {
		return store.Item[fleet.ManagedInstance]{}, err
	}
	return store.Get[fleet.ManagedInstance](ctx, r.Store, fleet.ManagedInstanceKey(cluster, m.ID))
}

// start asks the provisioner for recorded instances, in one call where it
// takes batches, and notes their handles. The error names each instance
// that did not launch; the others are launched.
func (r *Reconciler) start(ctx context.Context, batch []launching) error {
	// Records are made side by side: each is a write of its own.
	type prepared struct {
		it  store.Item[fleet.ManagedInstance]
		req provision.Request
		err error
	}
	ready := make([]prepared, len(batch))
	var wg sync.WaitGroup
	for i, l := range batch {
		wg.Go(func() {
			p := &ready[i]
			if p.it, p.err = l.record(); p.err == nil {
				p.req, p.err = r.request(ctx, p.it.Value)
			}
		})
	}
	wg.Wait()
	var errs []error
	items := make([]store.Item[fleet.ManagedInstance], 0, len(batch))
	reqs := make([]provision.Request, 0, len(batch))
	for i, p := range ready {
		if p.err != nil {
			errs = append(errs, fmt.Errorf("instance %s: %w", batch[i].id, p.err))
			continue
		}
		items, reqs = append(items, p.it), append(reqs, p.req)
	}
	launched := provision.LaunchAll(ctx, r.Provisioner, reqs)
	var noted []store.Item[fleet.ManagedInstance]
	handles := map[string]string{}
	for i, it := range items {
		if err := launched[i].Err; err != nil {
			errs = append(errs, fmt.Errorf("instance %s: %w", it.Value.ID, err))
			continue
		}
		noted = append(noted, it)
		handles[it.Key] = launched[i].Handle
	}
	if err := r.noteHandles(ctx, noted, handles); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// request is what the provisioner is asked for to launch m.
func (r *Reconciler) request(ctx context.Context, m fleet.ManagedInstance) (provision.Request, error) {
	cred, err := store.Get[store.AgentCredential](ctx, r.Store, store.CredentialKey(m.AccessKeyID))
	if err != nil {
		return provision.Request{}, err
	}
	env := map[string]string{
		"CAPSTAN_ENDPOINT":      r.Svc.Endpoint(),
		"ECS_CLUSTER":           m.Cluster,
		"AWS_ACCESS_KEY_ID":     cred.Value.AccessKeyID,
		"AWS_SECRET_ACCESS_KEY": cred.Value.SecretAccessKey,
		"AWS_REGION":            "us-east-1",
		"CAPSTAN_METRICS_ADDR":  "127.0.0.1:0",
		"CAPSTAN_METADATA_ADDR": "0.0.0.0:0",
		// Managed instances refuse privileged application tasks; daemons may
		// still be privileged.
		"ECS_DISABLE_PRIVILEGED": "true",
	}
	// Settings: the server's (--agent-env), then the capacity provider's
	// (its capstan:agent-env: tags, which win); Capstan's own required
	// settings above stay as they are.
	settings := maps.Clone(r.AgentEnv)
	if settings == nil {
		settings = map[string]string{}
	}
	cp, err := store.Get[store.CapacityProvider](ctx, r.Store, store.CapacityProviderKey(m.CapacityProvider))
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return provision.Request{}, err
	}
	maps.Copy(settings, provision.ProviderSettings(cp.Value.Tags))
	for k, v := range settings {
		if slices.Contains(provision.RequiredSettings, k) {
			delete(settings, k)
			continue
		}
		env[k] = v
	}
	return provision.Request{ID: m.ID, Cluster: m.Cluster, CapacityProvider: m.CapacityProvider, CPU: m.CPU, MemoryMiB: m.MemoryMiB, Env: env, Settings: settings}, nil
}

// noteHandles records the launched instances' handles, in one transaction
// while none of the records changed since they were read, else one at a
// time. The handles must stick: without one an instance would be launched
// twice.
func (r *Reconciler) noteHandles(ctx context.Context, items []store.Item[fleet.ManagedInstance], handles map[string]string) error {
	if len(items) == 0 {
		return nil
	}
	now := r.Now()
	note := func(v fleet.ManagedInstance, key string) fleet.ManagedInstance {
		v.Handle, v.Provisioner, v.LaunchedAt = handles[key], r.Provisioner.Name(), now
		return v
	}
	if len(items) > 1 && len(items) <= r.Store.MaxTxnOps() {
		txn := r.Store.Txn()
		for _, it := range items {
			txn.Update(it.Key, it.Rev, note(it.Value, it.Key))
		}
		if _, err := txn.Commit(ctx); err == nil {
			return nil
		} else if !errors.Is(err, store.ErrConflict) {
			return err
		}
	}
	var errs []error
	for _, it := range items {
		err := store.Retry(ctx, func() error {
			cur, err := store.Get[fleet.ManagedInstance](ctx, r.Store, it.Key)
			if err != nil {
				return err
			}
			_, err = r.Store.Txn().Update(cur.Key, cur.Rev, note(cur.Value, cur.Key)).Commit(ctx)
			return err
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("instance %s: note handle: %w", it.Value.ID, err))
		}
	}
	return errors.Join(errs...)
}
