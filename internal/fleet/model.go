package fleet

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/codec"
	"github.com/capstanhq/capstan/internal/store"
)

// fleet is the control plane's running view of every cluster's instances:
// status, free resources, session, the tasks meant for each and its daemon
// placements. The store feeds it every change as the cache applies it, so
// placement, daemon counts and rollouts read a fleet-wide view at the cost
// of walking structs instead of decoding every record on every call. The
// records stay the truth: writes are still revision-checked against them.
type model struct {
	mu sync.RWMutex
	// counts guards every cluster's kept daemon counts and additions to
	// clusters; writers hold mu too. DescribeDaemon reads the counts under
	// it alone, so it does not queue behind long fleet readers (a
	// placement or services pass) and the writer waiting on them.
	counts   sync.RWMutex
	clusters map[string]*fleetCluster
	managed  map[string]bool // agent access key → provisioned by Capstan
	// registeredAs maps a managed credential's access key to the
	// container instance it registered (none yet: absent).
	registeredAs map[string]string
	// bound maps every credential bound to an instance to that instance,
	// and boundTo counts them by instance: an INACTIVE instance a
	// credential still names is not expired (its agent may come back).
	bound   map[string]string
	boundTo map[string]int
}

type fleetCluster struct {
	instances map[string]*fleetInstance
	tasks     map[string]*IndexedTask
	// groups indexes tasks by group; waiting holds the tasks without an
	// instance (waiting for capacity, or never placed).
	groups  map[string]map[string]*IndexedTask
	waiting map[string]struct{}
	// What DaemonCounts answers, kept as changes come (a walk over every
	// instance per DescribeDaemon was the largest cost of a rollout watched
	// at 5,000 instances): per capacity provider name, instances in scope;
	// per daemon and provider, where it runs.
	// Both under fleet.counts as well as fleet.mu.
	counts *sync.RWMutex
	cps    map[string]*cpStand
	stands map[string]map[string]*daemonStand
	// placedTasks maps a task to the instances whose placements name it,
	// with how many placements do (one, unless records disagree), so that
	// a task's change recounts them.
	placedTasks map[string]map[string]int
	// desiredOn maps a task ID to the instances whose manifest holds it
	// (one, unless records disagree; the task need not exist), so that a
	// task's change updates their busy counts.
	desiredOn map[string][]string
	// tally is what DescribeClusters counts, kept as records change.
	tally clusterTally
}

type cpStand struct{ instances, active int }

type daemonStand struct {
	running, draining map[string]int // by revision
	runningActive     int            // of running, on ACTIVE instances
}

// counted is what one instance adds to the counts, so that a change can
// take it back out.
type counted struct {
	cp      string // "" when out of scope
	active  bool
	daemons map[string]daemonOnInstance
}

type daemonOnInstance struct {
	rev      string
	draining bool
}

// fleetInstance mirrors one instance's records. An entry may exist before
// or after its instance record (a session or placement seen first); rec
// says whether the record is there.
type fleetInstance struct {
	rec          bool
	rev          int64 // of the instance record
	id, arn      string
	status, cp   string
	accessKeyID  string
	registeredAt time.Time
	inactiveAt   time.Time
	cpu, mem     int
	registered   bool // counted in tally.instances
	ports        []string
	attributes   map[string]string // shared read-only with readers
	connected    bool
	desired      map[string]struct{} // task IDs in the manifest
	placements   daemonPlacements    // by daemon
	// busy counts the application tasks in desired not yet STOPPED: the
	// instances controller asks of every instance on every pass, and
	// walking the manifests was most of its pass at 5,000 instances.
	busy    int
	counted counted
	// refs counts the tasks that point at this entry: it stays while
	// they do, so their pointers never go stale.
	refs int
}

// daemonPlacements are an instance's daemon placements, by daemon: a
// slice, since an instance has one or a few, where a map of one took a
// group of eight placements (12 MiB of the fleet view at 5,000 instances).
type daemonPlacements []placedDaemon

type placedDaemon struct {
	daemon string
	p      DaemonPlacement
}

func (ps daemonPlacements) get(daemon string) (DaemonPlacement, bool) {
	for i := range ps {
		if ps[i].daemon == daemon {
			return ps[i].p, true
		}
	}
	return DaemonPlacement{}, false
}

func (ps *daemonPlacements) set(daemon string, p DaemonPlacement) {
	for i := range *ps {
		if (*ps)[i].daemon == daemon {
			(*ps)[i].p = p
			return
		}
	}
	*ps = append(*ps, placedDaemon{daemon, p})
}

func (ps *daemonPlacements) remove(daemon string) {
	*ps = slices.DeleteFunc(*ps, func(x placedDaemon) bool { return x.daemon == daemon })
}

func (fi *fleetInstance) empty() bool {
	return !fi.rec && !fi.connected && len(fi.desired) == 0 && len(fi.placements) == 0 && fi.refs == 0
}

// fleetTask is what planning reads of a task.
type IndexedTask struct {
	id, Group, instance, cp string
	// inst is the entry of instance (nil without one): planning reads the
	// instance of each of thousands of tasks on every pass.
	inst                 *fleetInstance
	Last, DesiredStatus  string
	health, stopCode     string
	StartedBy            string
	createdAt, startedAt time.Time
	stoppedAt            time.Time
	protectedUntil       time.Time
}

func newModel() *model {
	return &model{clusters: map[string]*fleetCluster{}, managed: map[string]bool{}, registeredAs: map[string]string{},
		bound: map[string]string{}, boundTo: map[string]int{}}
}

// attach registers the fleet with the store.
func (f *model) attach(st *store.Store) {
	for _, p := range []string{"containerinstances/", "sessions/", "desired/", "daemonplacements/", "tasks/", "credentials/", "services/"} {
		st.AddIndex(p, fleetIndex{f: f, kind: p})
	}
}

type fleetIndex struct {
	f    *model
	kind string
}

func (x fleetIndex) Reset() {
	f := x.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if x.kind == "credentials/" {
		clear(f.managed)
		clear(f.registeredAs)
		clear(f.bound)
		clear(f.boundTo)
		return
	}
	for _, c := range f.clusters {
		switch x.kind {
		case "services/":
			clear(c.tally.services)
			c.tally.activeServices.Store(0)
			continue
		case "tasks/":
			c.tally.running.Store(0)
			c.tally.pending.Store(0)
			clear(c.tasks)
			clear(c.groups)
			clear(c.waiting)
			for _, fi := range c.instances {
				fi.refs, fi.busy = 0, 0
			}
		case "desired/":
			clear(c.desiredOn)
		case "daemonplacements/":
			clear(c.placedTasks)
		}
		for id, fi := range c.instances {
			switch x.kind {
			case "containerinstances/":
				fi.rec = false
			case "sessions/":
				fi.connected = false
			case "desired/":
				fi.desired, fi.busy = nil, 0
			case "daemonplacements/":
				fi.placements = nil
			}
			c.recount(fi)
			if fi.empty() {
				delete(c.instances, id)
			}
		}
	}
}

func (x fleetIndex) Put(key string, value []byte, rev int64) { x.f.change(x.kind, key, value, rev) }
func (x fleetIndex) Delete(key string)                       { x.f.change(x.kind, key, nil, 0) }
func (x fleetIndex) Apply(chs []store.Change)                { x.f.changes(x.kind, chs) }

func (f *model) cluster(name string) *fleetCluster {
	c := f.clusters[name]
	if c == nil {
		c = &fleetCluster{instances: map[string]*fleetInstance{}, tasks: map[string]*IndexedTask{},
			groups: map[string]map[string]*IndexedTask{}, waiting: map[string]struct{}{}, counts: &f.counts,
			cps: map[string]*cpStand{}, stands: map[string]map[string]*daemonStand{}, placedTasks: map[string]map[string]int{},
			desiredOn: map[string][]string{}}
		f.counts.Lock()
		f.clusters[name] = c
		f.counts.Unlock()
	}
	return c
}

// recount takes an instance's part out of the counts and puts it back as
// the instance stands now.
func (c *fleetCluster) recount(fi *fleetInstance) {
	c.tally.noteInstance(fi)
	c.counts.Lock()
	defer c.counts.Unlock()
	old := fi.counted
	if old.cp != "" {
		n := c.cps[old.cp]
		n.instances--
		if old.active {
			n.active--
		}
		for d, on := range old.daemons {
			ds := c.stands[d][old.cp]
			m := ds.running
			if on.draining {
				m = ds.draining
			}
			if m[on.rev]--; m[on.rev] == 0 {
				delete(m, on.rev)
			}
			if old.active {
				ds.runningActive--
			}
		}
	}
	fi.counted = counted{}
	if !fi.rec || fi.status == "INACTIVE" || fi.cp == "" {
		return
	}
	n := c.cps[fi.cp]
	if n == nil {
		n = &cpStand{}
		c.cps[fi.cp] = n
	}
	active := fi.status == "ACTIVE"
	n.instances++
	if active {
		n.active++
	}
	fi.counted = counted{cp: fi.cp, active: active}
	for _, pd := range fi.placements {
		d := pd.daemon
		rev, running := c.daemonOn(fi, d)
		if !running {
			continue
		}
		byCP := c.stands[d]
		if byCP == nil {
			byCP = map[string]*daemonStand{}
			c.stands[d] = byCP
		}
		ds := byCP[fi.cp]
		if ds == nil {
			ds = &daemonStand{running: map[string]int{}, draining: map[string]int{}}
			byCP[fi.cp] = ds
		}
		on := daemonOnInstance{rev: rev, draining: fi.status == "DRAINING"}
		if on.draining {
			ds.draining[rev]++
		} else {
			ds.running[rev]++
		}
		if active {
			ds.runningActive++
		}
		if fi.counted.daemons == nil {
			fi.counted.daemons = map[string]daemonOnInstance{}
		}
		fi.counted.daemons[d] = on
	}
}

// recountTask recounts the instances whose placements name task id.
func (c *fleetCluster) recountTask(id string) {
	for inst := range c.placedTasks[id] {
		if fi := c.instances[inst]; fi != nil {
			c.recount(fi)
		}
	}
}

// notePlacedTask moves one of instance's placements from task old to id.
func (c *fleetCluster) notePlacedTask(instance, old, id string) {
	if old == id {
		return
	}
	if m := c.placedTasks[old]; m != nil {
		if m[instance]--; m[instance] <= 0 {
			delete(m, instance)
		}
		if len(m) == 0 {
			delete(c.placedTasks, old)
		}
	}
	if id == "" {
		return
	}
	m := c.placedTasks[id]
	if m == nil {
		m = map[string]int{}
		c.placedTasks[id] = m
	}
	m[instance]++
}

// busy: t is an application task not yet STOPPED (nil: no record).
func (t *IndexedTask) busy() bool {
	return t != nil && t.Last != "STOPPED" && !IsDaemonGroup(t.Group)
}

// addDesired and dropDesired change instance fi's manifest and busy count.
func (c *fleetCluster) addDesired(fi *fleetInstance, id string) {
	if _, ok := fi.desired[id]; ok {
		return
	}
	if fi.desired == nil {
		fi.desired = map[string]struct{}{}
	}
	fi.desired[id] = struct{}{}
	c.desiredOn[id] = append(c.desiredOn[id], fi.id)
	if c.tasks[id].busy() {
		fi.busy++
	}
}

func (c *fleetCluster) dropDesired(fi *fleetInstance, id string) {
	if _, ok := fi.desired[id]; !ok {
		return
	}
	delete(fi.desired, id)
	on := slices.DeleteFunc(c.desiredOn[id], func(inst string) bool { return inst == fi.id })
	if len(on) == 0 {
		delete(c.desiredOn, id)
	} else {
		c.desiredOn[id] = on
	}
	if c.tasks[id].busy() {
		fi.busy--
	}
}

// rebusy updates the busy counts of the instances whose manifests hold task
// id, which was busy or not before a change.
func (c *fleetCluster) rebusy(id string, was bool) {
	now := c.tasks[id].busy()
	if now == was {
		return
	}
	d := 1
	if was {
		d = -1
	}
	for _, inst := range c.desiredOn[id] {
		if fi := c.instances[inst]; fi != nil {
			fi.busy += d
		}
	}
}

func (c *fleetCluster) ungroup(t *IndexedTask) {
	if g := c.groups[t.Group]; g != nil {
		delete(g, t.id)
		if len(g) == 0 {
			delete(c.groups, t.Group)
		}
	}
}

// unref drops t's pointer at its instance's entry.
func (c *fleetCluster) unref(t *IndexedTask) {
	fi := t.inst
	if fi == nil {
		return
	}
	t.inst = nil
	fi.refs--
	if fi.empty() && c.instances[fi.id] == fi {
		delete(c.instances, fi.id)
	}
}

func (c *fleetCluster) instance(id string) *fleetInstance {
	fi := c.instances[id]
	if fi == nil {
		fi = &fleetInstance{id: id}
		c.instances[id] = fi
	}
	return fi
}

// fleetInstanceProbe is what the fleet reads of an instance record.
type fleetInstanceProbe struct {
	Arn                string             `json:"containerInstanceArn"`
	Status             string             `json:"status"`
	CP                 string             `json:"capacityProviderName"`
	RegisteredAt       shapes.Timestamp   `json:"registeredAt"`
	InactiveAt         time.Time          `json:"capstanInactiveAt"`
	AccessKeyID        string             `json:"capstanAccessKeyId"`
	RemainingResources []shapes.Resource  `json:"remainingResources"`
	Attributes         []shapes.Attribute `json:"attributes"`
}

type fleetTaskProbe struct {
	Group         string           `json:"group"`
	InstanceID    string           `json:"capstanInstanceId"`
	CP            string           `json:"capacityProviderName"`
	LastStatus    string           `json:"lastStatus"`
	DesiredStatus string           `json:"desiredStatus"`
	Health        string           `json:"healthStatus"`
	StopCode      string           `json:"stopCode"`
	StartedBy     string           `json:"startedBy"`
	CreatedAt     shapes.Timestamp `json:"createdAt"`
	StartedAt     shapes.Timestamp `json:"startedAt"`
	StoppedAt     shapes.Timestamp `json:"stoppedAt"`
	Protected     time.Time        `json:"capstanProtectedUntil"`
}

// fleetChange is one record change, decoded before the fleet's lock is
// taken: decoding thousands of records under it held every reader back.
type fleetChange struct {
	kind  string
	parts []string
	rev   int64
	// present: the record is there (and, where it is decoded, decoded).
	present bool
	cred    struct {
		Managed    bool   `json:"managed"`
		InstanceID string `json:"instanceId"`
	}
	inst    *fleetInstanceProbe
	place   *DaemonPlacement
	task    *fleetTaskProbe
	service *struct {
		Status string `json:"status"`
	}
}

func decodeFleetChange(kind, key string, value []byte, rev int64) fleetChange {
	ch := fleetChange{kind: kind, parts: strings.Split(key, "/"), rev: rev, present: value != nil}
	if value == nil {
		return ch
	}
	var err error
	switch kind {
	case "credentials/":
		err = codec.Unmarshal(value, &ch.cred)
	case "containerinstances/":
		ch.inst = &fleetInstanceProbe{}
		err = codec.Unmarshal(value, ch.inst)
	case "daemonplacements/":
		ch.place = &DaemonPlacement{}
		err = codec.Unmarshal(value, ch.place)
	case "tasks/":
		ch.task = &fleetTaskProbe{}
		err = codec.Unmarshal(value, ch.task)
	case "services/":
		ch.service = &struct {
			Status string `json:"status"`
		}{}
		err = codec.Unmarshal(value, ch.service)
	}
	ch.present = err == nil
	return ch
}

// change applies one record change (value nil: deleted).
func (f *model) change(kind, key string, value []byte, rev int64) {
	ch := decodeFleetChange(kind, key, value, rev)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.apply(&ch)
}

// changes applies a watch response's changes of one kind under one hold
// of the lock: taken per change, every change waited for the readers in
// the view (a planning pass holds it for milliseconds) while new readers
// queued behind it, and the cache's revision behind them all.
func (f *model) changes(kind string, chs []store.Change) {
	decoded := make([]fleetChange, len(chs))
	for i, c := range chs {
		var v []byte
		if !c.Deleted {
			v = c.Value
		}
		decoded[i] = decodeFleetChange(kind, c.Key, v, c.Rev)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range decoded {
		f.apply(&decoded[i])
	}
}

// apply applies one decoded change; f.mu is held. Keys that do not parse
// are ignored: the index only ever narrows what readers look at.
func (f *model) apply(ch *fleetChange) {
	parts, rev := ch.parts, ch.rev
	switch ch.kind {
	case "credentials/":
		if len(parts) != 2 {
			return
		}
		c := ch.cred
		if was, ok := f.bound[parts[1]]; ok {
			delete(f.bound, parts[1])
			if f.boundTo[was]--; f.boundTo[was] <= 0 {
				delete(f.boundTo, was)
			}
		}
		if ch.present && c.InstanceID != "" {
			f.bound[parts[1]] = c.InstanceID
			f.boundTo[c.InstanceID]++
		}
		if !ch.present || !c.Managed {
			delete(f.managed, parts[1])
			delete(f.registeredAs, parts[1])
			return
		}
		f.managed[parts[1]] = true
		if c.InstanceID != "" {
			f.registeredAs[parts[1]] = c.InstanceID
		} else {
			delete(f.registeredAs, parts[1])
		}
	case "containerinstances/":
		if len(parts) != 3 {
			return
		}
		c := f.cluster(parts[1])
		fi := c.instance(parts[2])
		if !ch.present {
			fi.rec = false
			c.recount(fi)
			if fi.empty() {
				delete(c.instances, parts[2])
			}
			return
		}
		p := ch.inst
		rem := readResources(p.RemainingResources)
		fi.rev = rev
		fi.rec, fi.arn, fi.status, fi.cp, fi.accessKeyID = true, p.Arn, p.Status, p.CP, p.AccessKeyID
		fi.registeredAt, fi.inactiveAt = p.RegisteredAt.Time, p.InactiveAt
		fi.cpu, fi.mem, fi.ports, fi.attributes = rem.cpu, rem.memory, rem.ports, attributesOf(p.Attributes, parts[2])
		c.recount(fi)
	case "sessions/":
		if len(parts) != 3 {
			return
		}
		c := f.cluster(parts[1])
		fi := c.instance(parts[2])
		fi.connected = ch.present
		if fi.empty() {
			delete(c.instances, parts[2])
		}
	case "desired/":
		if len(parts) != 4 {
			return
		}
		c := f.cluster(parts[1])
		fi := c.instance(parts[2])
		if !ch.present {
			c.dropDesired(fi, parts[3])
			if fi.empty() {
				delete(c.instances, parts[2])
			}
			return
		}
		c.addDesired(fi, parts[3])
	case "daemonplacements/":
		if len(parts) != 4 {
			return
		}
		c := f.cluster(parts[1])
		fi := c.instance(parts[2])
		old, _ := fi.placements.get(parts[3])
		if !ch.present {
			c.notePlacedTask(parts[2], old.TaskID, "")
			fi.placements.remove(parts[3])
			c.recount(fi)
			if fi.empty() {
				delete(c.instances, parts[2])
			}
			return
		}
		p := *ch.place
		c.notePlacedTask(parts[2], old.TaskID, p.TaskID)
		fi.placements.set(parts[3], p)
		c.recount(fi)
	case "services/":
		if len(parts) != 3 {
			return
		}
		c := f.cluster(parts[1])
		c.tally.noteService(parts[2], ch.present && ch.service.Status == "ACTIVE")
	case "tasks/":
		if len(parts) != 3 {
			return
		}
		c := f.cluster(parts[1])
		id := parts[2]
		t := c.tasks[id]
		defer c.rebusy(id, t.busy())
		if t != nil {
			c.tally.noteTask(t.Last, -1)
		}
		if !ch.present {
			if t != nil {
				c.ungroup(t)
				c.unref(t)
			}
			delete(c.tasks, id)
			delete(c.waiting, id)
			c.recountTask(id)
			return
		}
		p := ch.task
		if t == nil {
			t = &IndexedTask{id: id}
			c.tasks[id] = t
		} else if t.Group != p.Group {
			c.ungroup(t)
		}
		defer c.recountTask(id)
		g := c.groups[p.Group]
		if g == nil {
			g = map[string]*IndexedTask{}
			c.groups[p.Group] = g
		}
		g[id] = t
		if t.inst == nil || t.instance != p.InstanceID {
			c.unref(t)
			if p.InstanceID != "" {
				t.inst = c.instance(p.InstanceID)
				t.inst.refs++
			}
		}
		t.Group, t.instance, t.cp = p.Group, p.InstanceID, p.CP
		t.Last, t.DesiredStatus = intern(p.LastStatus), intern(p.DesiredStatus)
		c.tally.noteTask(t.Last, 1)
		t.health, t.stopCode, t.StartedBy = p.Health, p.StopCode, p.StartedBy
		t.createdAt, t.startedAt, t.stoppedAt = p.CreatedAt.Time, p.StartedAt.Time, p.StoppedAt.Time
		t.protectedUntil = p.Protected
		if p.InstanceID == "" {
			c.waiting[id] = struct{}{}
		} else {
			delete(c.waiting, id)
		}
	}
}

// intern shares the handful of status strings instead of keeping a copy
// per task.
func intern(s string) string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return s
}

var statusNames = map[string]string{"PROVISIONING": "PROVISIONING", "PENDING": "PENDING", "ACTIVATING": "ACTIVATING",
	"RUNNING": "RUNNING", "DEACTIVATING": "DEACTIVATING", "STOPPING": "STOPPING", "DEPROVISIONING": "DEPROVISIONING", "STOPPED": "STOPPED"}
