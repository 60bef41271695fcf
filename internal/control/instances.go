package control

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/auth"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/store"
	"github.com/capstanhq/capstan/internal/taskdef"
)

func (s *Service) registerInstances(h *api.Handler) {
	api.Register(h, "RegisterContainerInstance", s.RegisterContainerInstance)
	api.Register(h, "DeregisterContainerInstance", s.DeregisterContainerInstance)
	api.Register(h, "DescribeContainerInstances", s.DescribeContainerInstances)
	api.Register(h, "ListContainerInstances", s.ListContainerInstances)
	api.Register(h, "UpdateContainerInstancesState", s.UpdateContainerInstancesState)
	api.Register(h, "DiscoverPollEndpoint", s.DiscoverPollEndpoint)
}

func (a arns) containerInstance(cluster, id string) string {
	return a.base() + "container-instance/" + cluster + "/" + id
}

func newInstanceID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

var instanceIDPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

// instanceID resolves a container instance ARN or ID within a cluster.
func (s *Service) instanceID(field, cluster, ref string) (string, error) {
	id := ref
	if strings.HasPrefix(ref, "arn:") {
		typ, path, ok := s.arns.resource(ref)
		c, i, ok2 := strings.Cut(path, "/")
		if !ok || !ok2 || typ != "container-instance" || !s.arns.inAccount(ref) {
			return "", fault.Invalid(field, "%q is not a container instance ARN (%s)", clip(ref), s.arns.containerInstance("CLUSTER", "ID"))
		}
		if c != cluster {
			return "", fault.Invalid(field, "container instance %s is not in cluster %q", clip(ref), cluster)
		}
		id = i
	}
	if !instanceIDPattern.MatchString(id) {
		return "", fault.Invalid(field, "%q is not a container instance ID or ARN", clip(ref))
	}
	return id, nil
}

// resources is the placement view of an instance's CPU, memory and ports.
type resources struct {
	cpu, memory int
	ports       []string // "tcp/22"
}

func (r resources) shapes() []shapes.Resource {
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
func parseResources(field string, rs []shapes.Resource) (resources, error) {
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
					return out, fault.Invalid(f+".stringSetValue", "port %q must be 1-65535", clip(p))
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
	r, _ := parseResources("", rs)
	return r
}

var attributeName = regexp.MustCompile(`^[A-Za-z0-9_./-]{1,128}$`)

func checkAttributes(field string, attrs []shapes.Attribute) error {
	if len(attrs) > 10+64 {
		return fault.Invalid(field, "at most 74 attributes")
	}
	for i, a := range attrs {
		if !attributeName.MatchString(a.Name) {
			return fault.Invalid(fieldIndex(field, i)+".name", "must be 1-128 letters, numbers, and _ . / -")
		}
		if len(a.Value) > 128 {
			return fault.Invalid(fieldIndex(field, i)+".value", "must be at most 128 characters")
		}
	}
	return nil
}

// RegisterContainerInstance registers an instance, or re-registers the one
// the caller names (or the one its agent credential is bound to), keeping
// its ID and tasks.
func (s *Service) RegisterContainerInstance(ctx context.Context, req *shapes.RegisterContainerInstanceRequest) (*shapes.RegisterContainerInstanceResponse, error) {
	total, err := parseResources("totalResources", req.TotalResources)
	if err != nil {
		return nil, err
	}
	if err := checkAttributes("attributes", req.Attributes); err != nil {
		return nil, err
	}
	if err := taskdef.CheckTags("tags", req.Tags); err != nil {
		return nil, err
	}
	caller, _ := api.Caller(ctx)
	var out store.ContainerInstance
	err = retry(ctx, func() error {
		cl, err := s.activeCluster(ctx, "cluster", req.Cluster)
		if err != nil {
			return err
		}
		cluster := cl.Value.ClusterName
		var cred store.Item[store.AgentCredential]
		id := ""
		if caller.Role == auth.RoleAgent {
			cred, err = store.Get[store.AgentCredential](ctx, s.st, store.CredentialKey(caller.AccessKeyID))
			if err != nil {
				return fault.Denied("agent credential %s is no longer valid", caller.AccessKeyID)
			}
			if cred.Value.Cluster != cluster {
				return fault.Denied("agent credential %s belongs to cluster %q, not %q", caller.AccessKeyID, cred.Value.Cluster, cluster)
			}
			id = cred.Value.InstanceID
			if id != "" && req.ContainerInstanceArn == "" {
				// The bound instance was deregistered: the credential moves to a new one.
				if cur, err := store.Get[store.ContainerInstance](ctx, s.st, store.ContainerInstanceKey(cluster, id)); err == nil && cur.Value.Status == "INACTIVE" {
					if cred.Value.Managed {
						// A retired provisioned instance is being terminated.
						return fault.Denied("container instance %s was retired; its credential registers nothing else", id)
					}
					id = ""
				}
			}
		}
		if req.ContainerInstanceArn != "" {
			named, err := s.instanceID("containerInstanceArn", cluster, req.ContainerInstanceArn)
			if err != nil {
				return err
			}
			if id != "" && named != id {
				return fault.Denied("agent credential %s is bound to container instance %s", caller.AccessKeyID, id)
			}
			id = named
		}
		tx := s.st.Txn().Unchanged(cl.Key, cl.Rev)
		var ci store.ContainerInstance
		var write func()
		if id != "" {
			cur, err := store.Get[store.ContainerInstance](ctx, s.st, store.ContainerInstanceKey(cluster, id))
			if errors.Is(err, store.ErrNotFound) {
				return fault.ClientError("container instance %s does not exist in cluster %q", id, cluster)
			}
			if err != nil {
				return err
			}
			if cur.Value.Status == "INACTIVE" {
				return fault.ClientError("container instance %s was deregistered; register as a new instance (start the agent with a fresh data directory)", id)
			}
			ci = cur.Value
			// Re-registration keeps placements: what tasks hold stays held.
			rem, err := s.remaining(ctx, ci, total)
			if err != nil {
				return err
			}
			ci.RemainingResources = rem.shapes()
			write = func() { tx.Update(cur.Key, cur.Rev, ci) }
		} else {
			id = newInstanceID()
			ci = store.ContainerInstance{ID: id, Cluster: cluster}
			ci.ContainerInstanceArn = s.arns.containerInstance(cluster, id)
			ci.Ec2InstanceId = "i-" + id[:17]
			ci.Status = "ACTIVE"
			ci.RegisteredAt = shapes.At(s.now())
			ci.RemainingResources = total.shapes()
			ci.Version = ptr(int64(1))
			if caller.Role == auth.RoleAgent {
				ci.AccessKeyID = caller.AccessKeyID
				ci.CapacityProviderName = cred.Value.CapacityProvider
			}
			if ci.CapacityProviderName != "" {
				// Daemons come first: the daemons controller activates the
				// instance once its critical daemons run.
				ci.Status = "REGISTERING"
			}
			key := store.ContainerInstanceKey(cluster, id)
			write = func() { tx.Create(key, ci) }
		}
		ci.RegisteredResources = total.shapes()
		ci.VersionInfo = req.VersionInfo
		ci.Attributes = mergeAttributes(req.Attributes)
		if req.Tags != nil {
			ci.Tags = req.Tags
		}
		*ci.Version = *ci.Version + 1
		write() // the transaction encodes values when given: after every field is set
		if caller.Role == auth.RoleAgent && cred.Value.InstanceID != id {
			c := cred.Value
			c.InstanceID = id
			tx.Update(cred.Key, cred.Rev, c)
		}
		if _, err := tx.Commit(ctx); err != nil {
			return err
		}
		s.instanceChanged(ctx, ci)
		out = ci
		return nil
	})
	if err != nil {
		return nil, err
	}
	view, err := s.instanceView(ctx, out, true)
	if err != nil {
		return nil, err
	}
	return &shapes.RegisterContainerInstanceResponse{ContainerInstance: view}, nil
}

// mergeAttributes adds the attributes Capstan always reports.
func mergeAttributes(in []shapes.Attribute) []shapes.Attribute {
	out := []shapes.Attribute{{Name: "ecs.os-type", Value: "linux"}}
	for _, a := range in {
		if a.Name != "ecs.os-type" {
			out = append(out, a)
		}
	}
	return out
}

// remaining is total less what the instance's unstopped tasks hold. As in
// ECS, remaining PORTS lists the ports that are taken (reserved or used).
func (s *Service) remaining(ctx context.Context, ci store.ContainerInstance, total resources) (resources, error) {
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
func (s *Service) instanceView(ctx context.Context, ci store.ContainerInstance, tags bool) (*shapes.ContainerInstance, error) {
	counts, err := s.taskCounts(ctx, ci.Cluster, []string{ci.ID})
	if err != nil {
		return nil, err
	}
	return s.instanceViewCounted(ctx, ci, tags, counts[ci.ID])
}

// instanceViewCounted is instanceView with the instance's task counts
// (running, pending) already read.
func (s *Service) instanceViewCounted(ctx context.Context, ci store.ContainerInstance, tags bool, counts [2]int) (*shapes.ContainerInstance, error) {
	v := ci.ContainerInstance
	if !tags {
		v.Tags = nil
	}
	_, err := store.Get[store.Session](ctx, s.st, store.SessionKey(ci.Cluster, ci.ID))
	switch {
	case err == nil:
		v.AgentConnected = ptr(true)
	case errors.Is(err, store.ErrNotFound):
		v.AgentConnected = ptr(false)
	default:
		return nil, storeErr(err)
	}
	v.RunningTasksCount, v.PendingTasksCount = ptr(int32(counts[0])), ptr(int32(counts[1]))
	if v.Attributes == nil {
		v.Attributes = []shapes.Attribute{}
	}
	return &v, nil
}

// keyOnly decodes nothing: for reads that need keys and revisions only.
type keyOnly struct{}

func (*keyOnly) UnmarshalJSON([]byte) error { return nil }

func (s *Service) DescribeContainerInstances(ctx context.Context, req *shapes.DescribeContainerInstancesRequest) (*shapes.DescribeContainerInstancesResponse, error) {
	cl, err := s.activeCluster(ctx, "cluster", req.Cluster)
	if err != nil {
		return nil, err
	}
	if len(req.ContainerInstances) == 0 || len(req.ContainerInstances) > 100 {
		return nil, fault.Invalid("containerInstances", "must name 1 to 100 container instances")
	}
	out := &shapes.DescribeContainerInstancesResponse{ContainerInstances: []shapes.ContainerInstance{}, Failures: []shapes.Failure{}}
	found := make([]store.ContainerInstance, 0, len(req.ContainerInstances))
	ids := make([]string, 0, len(req.ContainerInstances))
	for i, ref := range req.ContainerInstances {
		id, err := s.instanceID(fieldIndex("containerInstances", i), cl.Value.ClusterName, ref)
		if err != nil {
			return nil, err
		}
		it, err := store.Get[store.ContainerInstance](ctx, s.st, store.ContainerInstanceKey(cl.Value.ClusterName, id))
		if errors.Is(err, store.ErrNotFound) {
			out.Failures = append(out.Failures, shapes.Failure{Arn: s.arns.containerInstance(cl.Value.ClusterName, id), Reason: "MISSING"})
			continue
		}
		if err != nil {
			return nil, storeErr(err)
		}
		found, ids = append(found, it.Value), append(ids, id)
	}
	// One read of the fleet view for all of them: a read per instance
	// queued behind the view's writer once each.
	counts, err := s.taskCounts(ctx, cl.Value.ClusterName, ids)
	if err != nil {
		return nil, err
	}
	tags := slices.Contains(req.Include, "CONTAINER_INSTANCE_HEALTH") || slices.Contains(req.Include, "TAGS")
	for _, ci := range found {
		v, err := s.instanceViewCounted(ctx, ci, tags, counts[ci.ID])
		if err != nil {
			return nil, err
		}
		out.ContainerInstances = append(out.ContainerInstances, *v)
	}
	return out, nil
}

// instanceFilter is the subset of the ECS cluster query language Capstan
// evaluates: attribute:NAME exists, attribute:NAME == VALUE, and
// attribute:NAME != VALUE, joined with "and".
type instanceFilter []func(attrs map[string]string) bool

var filterTerm = regexp.MustCompile(`^attribute:([A-Za-z0-9_./-]+)\s*(?:(exists)|(==|!=)\s*(\S+))$`)

func parseInstanceFilter(expr string) (instanceFilter, error) {
	var f instanceFilter
	if strings.TrimSpace(expr) == "" {
		return f, nil
	}
	for _, term := range regexp.MustCompile(`\s+and\s+`).Split(strings.TrimSpace(expr), -1) {
		m := filterTerm.FindStringSubmatch(strings.TrimSpace(term))
		if m == nil {
			return nil, fault.Invalid("filter", "unsupported expression %q; Capstan supports attribute:NAME exists, attribute:NAME == VALUE and != joined by and", clip(term))
		}
		name, exists, op, value := m[1], m[2] != "", m[3], m[4]
		f = append(f, func(attrs map[string]string) bool {
			v, ok := attrs[name]
			switch {
			case exists:
				return ok
			case op == "==":
				return ok && v == value
			default:
				return !ok || v != value
			}
		})
	}
	return f, nil
}

func (f instanceFilter) match(attrs map[string]string) bool {
	for _, fn := range f {
		if !fn(attrs) {
			return false
		}
	}
	return true
}

func attributeMap(ci store.ContainerInstance) map[string]string {
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

func (s *Service) ListContainerInstances(ctx context.Context, req *shapes.ListContainerInstancesRequest) (*shapes.ListContainerInstancesResponse, error) {
	cl, err := s.activeCluster(ctx, "cluster", req.Cluster)
	if err != nil {
		return nil, err
	}
	filter, err := parseInstanceFilter(req.Filter)
	if err != nil {
		return nil, err
	}
	prefix := store.ContainerInstancePrefix(cl.Value.ClusterName)
	p, err := newPage(req.MaxResults, req.NextToken, prefix+"\x00"+req.Status+"\x00"+req.Filter, 100)
	if err != nil {
		return nil, err
	}
	// The view holds what the filters read (status, attributes), so a page
	// decodes nothing: listing 5,000 instances decoded every record.
	cluster := cl.Value.ClusterName
	matches := func(status string, attrs map[string]string) bool {
		return (req.Status == "" && status != "INACTIVE" || req.Status != "" && status == req.Status) && filter.match(attrs)
	}
	arns, next, err := s.pageByView(ctx, prefix, p, prefix+"\x00"+req.Status+"\x00"+req.Filter, func(v fleetView, id string) (string, verdict) {
		fi := v.cluster(cluster).instances[id]
		switch {
		case fi == nil || !fi.rec:
			return "", unknown
		case matches(fi.status, fi.attributes):
			return fi.arn, yes
		}
		return "", no
	}, func(key string) (string, bool, error) {
		it, err := store.Get[store.ContainerInstance](ctx, s.st, key)
		if err != nil {
			return "", false, err
		}
		return it.Value.ContainerInstanceArn, matches(it.Value.Status, attributeMap(it.Value)), nil
	})
	if err != nil {
		return nil, storeErr(err)
	}
	return &shapes.ListContainerInstancesResponse{ContainerInstanceArns: arns, NextToken: next}, nil
}

func (s *Service) UpdateContainerInstancesState(ctx context.Context, req *shapes.UpdateContainerInstancesStateRequest) (*shapes.UpdateContainerInstancesStateResponse, error) {
	if req.Status != "ACTIVE" && req.Status != "DRAINING" {
		return nil, fault.Invalid("status", "must be ACTIVE or DRAINING (got %q)", clip(req.Status))
	}
	cl, err := s.activeCluster(ctx, "cluster", req.Cluster)
	if err != nil {
		return nil, err
	}
	if len(req.ContainerInstances) == 0 || len(req.ContainerInstances) > 10 {
		return nil, fault.Invalid("containerInstances", "must name 1 to 10 container instances")
	}
	out := &shapes.UpdateContainerInstancesStateResponse{ContainerInstances: []shapes.ContainerInstance{}, Failures: []shapes.Failure{}}
	for i, ref := range req.ContainerInstances {
		id, err := s.instanceID(fieldIndex("containerInstances", i), cl.Value.ClusterName, ref)
		if err != nil {
			return nil, err
		}
		var ci store.ContainerInstance
		err = retry(ctx, func() error {
			it, err := store.Get[store.ContainerInstance](ctx, s.st, store.ContainerInstanceKey(cl.Value.ClusterName, id))
			if err != nil {
				return err
			}
			ci = it.Value
			if ci.Status == "INACTIVE" || ci.Status == "DEREGISTERING" {
				return fault.ClientError("container instance %s is %s", id, ci.Status)
			}
			if ci.Status == req.Status {
				return nil
			}
			ci.Status = req.Status
			*ci.Version++
			if _, err = s.st.Txn().Update(it.Key, it.Rev, ci).Commit(ctx); err == nil {
				s.instanceChanged(ctx, ci)
			}
			return err
		})
		if errors.Is(err, store.ErrNotFound) {
			out.Failures = append(out.Failures, shapes.Failure{Arn: s.arns.containerInstance(cl.Value.ClusterName, id), Reason: "MISSING"})
			continue
		}
		if err != nil {
			return nil, err
		}
		v, err := s.instanceView(ctx, ci, false)
		if err != nil {
			return nil, err
		}
		out.ContainerInstances = append(out.ContainerInstances, *v)
	}
	return out, nil
}

func (s *Service) DeregisterContainerInstance(ctx context.Context, req *shapes.DeregisterContainerInstanceRequest) (*shapes.DeregisterContainerInstanceResponse, error) {
	return s.deregister(ctx, req, "TaskFailedToStart", "Container instance deregistration forced by a user")
}

// deregister retires an instance; forced, its tasks are recorded STOPPED
// with stopCode and reason.
func (s *Service) deregister(ctx context.Context, req *shapes.DeregisterContainerInstanceRequest, stopCode, reason string) (*shapes.DeregisterContainerInstanceResponse, error) {
	cl, err := s.activeCluster(ctx, "cluster", req.Cluster)
	if err != nil {
		return nil, err
	}
	cluster := cl.Value.ClusterName
	id, err := s.instanceID("containerInstance", cluster, req.ContainerInstance)
	if err != nil {
		return nil, err
	}
	var out store.ContainerInstance
	err = retry(ctx, func() error {
		it, err := store.Get[store.ContainerInstance](ctx, s.st, store.ContainerInstanceKey(cluster, id))
		if errors.Is(err, store.ErrNotFound) {
			return fault.ClientError("container instance %s not found in cluster %q", id, cluster)
		}
		if err != nil {
			return err
		}
		ci := it.Value
		if ci.Status == "INACTIVE" {
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
			return fault.ClientError("container instance %s still has %d task(s) not stopped; stop them, drain the instance, or use force", id, live)
		}
		tx := s.st.Txn()
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
			if d, err := store.Get[protocol.Task](ctx, s.st, dkey); err == nil {
				tx.Delete(dkey, d.Rev)
			}
		}
		ci.Status, ci.InactiveAt = "INACTIVE", s.now().UTC()
		*ci.Version++
		tx.Update(it.Key, it.Rev, ci)
		if _, err := tx.Commit(ctx); err != nil {
			return err
		}
		// One write retired the instance and stopped its tasks: the record
		// shows the instance out of service first, then apps, then daemons,
		// so no moment reads as an app running without its daemon.
		s.instanceChanged(ctx, ci)
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
	v, err := s.instanceView(ctx, out, false)
	if err != nil {
		return nil, err
	}
	return &shapes.DeregisterContainerInstanceResponse{ContainerInstance: v}, nil
}

// instanceTasks lists the tasks that have a desired entry on the instance.
func (s *Service) instanceTasks(ctx context.Context, ci store.ContainerInstance) ([]store.Item[store.Task], error) {
	rows, _, err := store.List[keyOnly](ctx, s.st, store.DesiredPrefix(ci.Cluster, ci.ID), "", 0)
	if err != nil {
		return nil, err
	}
	var out []store.Item[store.Task]
	for _, r := range rows {
		t, err := store.Get[store.Task](ctx, s.st, store.TaskKey(ci.Cluster, r.Key[strings.LastIndexByte(r.Key, '/')+1:]))
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

func (s *Service) DiscoverPollEndpoint(ctx context.Context, req *shapes.DiscoverPollEndpointRequest) (*shapes.DiscoverPollEndpointResponse, error) {
	if s.endpoint == "" {
		return nil, fmt.Errorf("no advertised endpoint configured")
	}
	return &shapes.DiscoverPollEndpointResponse{Endpoint: s.endpoint, TelemetryEndpoint: s.endpoint}, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
