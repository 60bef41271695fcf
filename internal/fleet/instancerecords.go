package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/store"
)

func (a ARNs) ContainerInstance(cluster, id string) string {
	return a.Base() + "container-instance/" + cluster + "/" + id
}

func NewInstanceID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

var instanceIDPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

// instanceID resolves a container instance ARN or ID within a cluster.
func (s *State) InstanceID(field, cluster, ref string) (string, error) {
	id := ref
	if strings.HasPrefix(ref, "arn:") {
		typ, path, ok := s.ARNs.Resource(ref)
		c, i, ok2 := strings.Cut(path, "/")
		if !ok || !ok2 || typ != "container-instance" || !s.ARNs.InAccount(ref) {
			return "", fault.Invalid(field, "%q is not a container instance ARN (%s)", Clip(ref), s.ARNs.ContainerInstance("CLUSTER", "ID"))
		}
		if c != cluster {
			return "", fault.Invalid(field, "container instance %s is not in cluster %q", Clip(ref), cluster)
		}
		id = i
	}
	if !instanceIDPattern.MatchString(id) {
		return "", fault.Invalid(field, "%q is not a container instance ID or ARN", Clip(ref))
	}
	return id, nil
}

// resources is the placement view of an instance's CPU, memory and ports.
type resources struct {
	cpu, memory int
	ports       []string // "tcp/22"
}

func (r resources) Shapes() []shapes.Resource {
	var tcp, udp []string
	for _, p := range r.ports {
		proto, port, _ := strings.Cut(p, "/")
		if proto == "udp" {
			udp = append(udp, port)
		} else {
			tcp = append(tcp, port)
		}
	}
	if tcp == nil {
		tcp = []string{}
	}
	if udp == nil {
		udp = []string{}
	}
	return []shapes.Resource{
		{Name: "CPU", Type: "INTEGER", IntegerValue: ptr(int32(r.cpu))},
		{Name: "MEMORY", Type: "INTEGER", IntegerValue: ptr(int32(r.memory))},
		{Name: "PORTS", Type: "STRINGSET", StringSetValue: tcp},
		{Name: "PORTS_UDP", Type: "STRINGSET", StringSetValue: udp},
	}
}

// parseResources reads registered resources; CPU and MEMORY are required.
func ParseResources(field string, rs []shapes.Resource) (resources, error) {
	var out resources
	seen := map[string]bool{}
	for i, r := range rs {
		f := fieldIndex(field, i)
		if seen[r.Name] {
			return out, fault.Invalid(f+".name", "%s is listed twice", r.Name)
		}
		seen[r.Name] = true
		num := func() (int, error) {
			switch {
			case r.IntegerValue != nil:
				return int(*r.IntegerValue), nil
			case r.LongValue != nil:
				return int(*r.LongValue), nil
			case r.DoubleValue != nil:
				return int(*r.DoubleValue), nil
			}
			return 0, fault.Invalid(f, "%s needs a numeric value", r.Name)
		}
		switch r.Name {
		case "CPU", "MEMORY":
			n, err := num()
			if err != nil {
				return out, err
			}
			if n <= 0 || n > 1<<30 {
				return out, fault.Invalid(f, "%s must be positive (got %d)", r.Name, n)
			}
			if r.Name == "CPU" {
				out.cpu = n
			} else {
				out.memory = n
			}
		case "PORTS", "PORTS_UDP":
			proto := "tcp"
			if r.Name == "PORTS_UDP" {
				proto = "udp"
			}
			for _, p := range r.StringSetValue {
				n, err := strconv.Atoi(p)
				if err != nil || n < 1 || n > 65535 {
					return out, fault.Invalid(f+".stringSetValue", "port %q must be 1-65535", Clip(p))
				}
				out.ports = append(out.ports, proto+"/"+strconv.Itoa(n))
			}
		default:
			// Other resources (GPU, ...) are not scheduled by Capstan.
		}
	}
	if out.cpu == 0 || out.memory == 0 {
		return out, fault.Invalid(field, "must include CPU and MEMORY")
	}
	return out, nil
}

func readResources(rs []shapes.Resource) resources {
	r, _ := ParseResources("", rs)
	return r
}

// keyOnly decodes nothing: for reads that need keys and revisions only.
type keyOnly struct{}

func (*keyOnly) UnmarshalJSON([]byte) error { return nil }

// instanceFilter is a compiled cluster query (query.go); empty matches
// every instance.
type instanceFilter []func(attrs map[string]string) bool

// ParseInstanceFilter compiles a cluster query expression; a bad one is
// refused with an error that quotes it.
func ParseInstanceFilter(expr string) (instanceFilter, error) {
	if strings.TrimSpace(expr) == "" {
		return nil, nil
	}
	e, err := parseQuery(expr)
	if err != nil {
		return nil, fault.Invalid("filter", "invalid expression %q: %v", Clip(expr), err)
	}
	return instanceFilter{e}, nil
}

func (f instanceFilter) Match(attrs map[string]string) bool {
	for _, fn := range f {
		if !fn(attrs) {
			return false
		}
	}
	return true
}

func AttributeMap(ci store.ContainerInstance) map[string]string {
	return attributesOf(ci.Attributes, ci.ID)
}

// attributesOf is what memberOf expressions match: an instance's attributes
// and its ID.
func attributesOf(attrs []shapes.Attribute, id string) map[string]string {
	m := make(map[string]string, len(attrs)+1)
	for _, a := range attrs {
		m[a.Name] = a.Value
	}
	m["ecs.instance-id"] = id
	return m
}

// deregister retires an instance; forced, its tasks are recorded STOPPED
// with stopCode and reason.
func (s *State) Deregister(ctx context.Context, req *shapes.DeregisterContainerInstanceRequest, stopCode, reason string) (*shapes.DeregisterContainerInstanceResponse, error) {
	return s.deregister(ctx, req, stopCode, reason, "")
}

// deregister deregisters the instance; when only is set, only if the
// instance still has that status in the same write (an operator may have
// activated a drained instance since the caller looked).
func (s *State) deregister(ctx context.Context, req *shapes.DeregisterContainerInstanceRequest, stopCode, reason, only string) (*shapes.DeregisterContainerInstanceResponse, error) {
	cl, err := s.ActiveCluster(ctx, "cluster", req.Cluster)
	if err != nil {
		return nil, err
	}
	cluster := cl.Value.ClusterName
	id, err := s.InstanceID("containerInstance", cluster, req.ContainerInstance)
	if err != nil {
		return nil, err
	}
	var out store.ContainerInstance
	err = Retry(ctx, func() error {
		it, err := store.Get[store.ContainerInstance](ctx, s.Store, store.ContainerInstanceKey(cluster, id))
		if errors.Is(err, store.ErrNotFound) {
			return fault.ClientError("container instance %s not found in cluster %q", id, cluster)
		}
		if err != nil {
			return err
		}
		ci := it.Value
		if ci.Status == "INACTIVE" || only != "" && ci.Status != only {
			out = ci
			return nil
		}
		tasks, err := s.instanceTasks(ctx, ci)
		if err != nil {
			return err
		}
		live := 0
		for _, t := range tasks {
			if t.Value.LastStatus != "STOPPED" {
				live++
			}
		}
		if live > 0 && (req.Force == nil || !*req.Force) {
			return fault.Invalid("", "Found running tasks on the instance.")
		}
		tx := s.Store.Txn()
		var stopped []store.Task
		// Forced: the instance's agent will retire its containers and can no
		// longer report, so its tasks are recorded STOPPED now rather than
		// left orphaned.
		for _, it := range tasks {
			t := it.Value
			if t.LastStatus == "STOPPED" {
				continue
			}
			t.DesiredStatus = "STOPPED"
			if t.StopCode == "" {
				t.StopCode, t.StoppedReason = stopCode, reason
			}
			s.markStopped(&t)
			t.Reserved = nil
			*t.Version++
			tx.Update(it.Key, it.Rev, t)
			stopped = append(stopped, t)
			dkey := store.DesiredKey(t.Cluster, t.InstanceID, t.ID)
			if d, err := store.Get[protocol.Task](ctx, s.Store, dkey); err == nil {
				tx.Delete(dkey, d.Rev)
			}
		}
		ci.Status, ci.InactiveAt = "INACTIVE", s.Now().UTC()
		*ci.Version++
		tx.Update(it.Key, it.Rev, ci)
		if _, err := tx.Commit(ctx); err != nil {
			return err
		}
		// One write retired the instance and stopped its tasks: the record
		// shows the instance out of service first, then apps, then daemons,
		// so no moment reads as an app running without its daemon.
		s.InstanceChanged(ctx, ci)
		slices.SortStableFunc(stopped, func(a, b store.Task) int { return boolInt(IsDaemonTask(a)) - boolInt(IsDaemonTask(b)) })
		for _, t := range stopped {
			s.taskChanged(ctx, t)
		}
		out = ci
		return nil
	})
	if err != nil {
		return nil, err
	}
	v, err := s.InstanceView(ctx, out, false)
	if err != nil {
		return nil, err
	}
	return &shapes.DeregisterContainerInstanceResponse{ContainerInstance: v}, nil
}

// instanceTasks lists the tasks that have a desired entry on the instance.
func (s *State) instanceTasks(ctx context.Context, ci store.ContainerInstance) ([]store.Item[store.Task], error) {
	rows, _, err := store.List[keyOnly](ctx, s.Store, store.DesiredPrefix(ci.Cluster, ci.ID), "", 0)
	if err != nil {
		return nil, err
	}
	var out []store.Item[store.Task]
	for _, r := range rows {
		t, err := store.Get[store.Task](ctx, s.Store, store.TaskKey(ci.Cluster, r.Key[strings.LastIndexByte(r.Key, '/')+1:]))
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// remaining is total less what the instance's unstopped tasks hold. As in
// ECS, remaining PORTS lists the ports that are taken (reserved or used).
func (s *State) Remaining(ctx context.Context, ci store.ContainerInstance, total resources) (resources, error) {
	tasks, err := s.instanceTasks(ctx, ci)
	if err != nil {
		return resources{}, err
	}
	out := resources{cpu: total.cpu, memory: total.memory, ports: slices.Clone(total.ports)}
	for _, t := range tasks {
		if r := t.Value.Reserved; r != nil {
			out.cpu -= r.CPU
			out.memory -= r.Memory
			out.ports = append(out.ports, r.Ports...)
		}
	}
	return out, nil
}

// instanceView is the API view of an instance, with live counts.
func (s *State) InstanceView(ctx context.Context, ci store.ContainerInstance, tags bool) (*shapes.ContainerInstance, error) {
	counts, err := s.TaskCounts(ctx, ci.Cluster, []string{ci.ID})
	if err != nil {
		return nil, err
	}
	return s.InstanceViewCounted(ctx, ci, tags, counts[ci.ID])
}

// instanceViewCounted is instanceView with the instance's task counts
// (running, pending) already read.
func (s *State) InstanceViewCounted(ctx context.Context, ci store.ContainerInstance, tags bool, counts [2]int) (*shapes.ContainerInstance, error) {
	v := ci.ContainerInstance
	if !tags {
		v.Tags = nil
	}
	_, err := store.Get[store.Session](ctx, s.Store, store.SessionKey(ci.Cluster, ci.ID))
	switch {
	case err == nil:
		v.AgentConnected = ptr(true)
	case errors.Is(err, store.ErrNotFound):
		v.AgentConnected = ptr(false)
	default:
		return nil, StoreErr(err)
	}
	v.RunningTasksCount, v.PendingTasksCount = ptr(int32(counts[0])), ptr(int32(counts[1]))
	if v.Attributes == nil {
		v.Attributes = []shapes.Attribute{}
	}
	return &v, nil
}

// instanceArnsByView pages a cluster's instance ARNs that match, from the
// fleet view where it holds them and from the store where it does not.
func (s *State) InstanceArnsByView(ctx context.Context, cluster, prefix string, p Page, scope string, matches func(status string, attrs map[string]string) bool) ([]string, string, error) {
	return s.pageByView(ctx, prefix, p, scope, func(v fleetView, id string) (string, verdict) {
		fi := v.cluster(cluster).instances[id]
		switch {
		case fi == nil || !fi.rec:
			return "", unknown
		case matches(fi.status, fi.attributes):
			return fi.arn, yes
		}
		return "", no
	}, func(key string) (string, bool, error) {
		it, err := store.Get[store.ContainerInstance](ctx, s.Store, key)
		if err != nil {
			return "", false, err
		}
		return it.Value.ContainerInstanceArn, matches(it.Value.Status, AttributeMap(it.Value)), nil
	})
}

// ResourceShapes lists cpu units, memory MiB and ports ("tcp/22") as ECS
// shows an instance's resources.
func ResourceShapes(cpu, memory int, ports ...string) []shapes.Resource {
	return resources{cpu: cpu, memory: memory, ports: ports}.Shapes()
}
