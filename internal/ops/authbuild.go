// Resolving a request into what it is authorized against: ARNs from names,
// the tags and task definitions it reads, host access.

package ops

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/store"
	"github.com/capstanhq/capstan/internal/taskdef"
)

// authBuild collects one target.
type authBuild struct {
	s     *Service
	op    string
	ctx   context.Context
	t     authTarget
	per   map[string]map[string][]string // resource -> its own keys, before hoisting
	order []string
}

// resource adds an ARN with the keys that are its own (nil for none).
func (b *authBuild) resource(arn string, own map[string][]string) {
	if b.per == nil {
		b.per = map[string]map[string][]string{}
	}
	cur, seen := b.per[arn]
	if !seen {
		b.order = append(b.order, arn)
		cur = map[string][]string{}
		b.per[arn] = cur
	}
	for k, v := range own {
		if len(v) > 0 {
			cur[k] = v
		}
	}
}

// set gives a key of the whole call; none when vals is empty.
func (b *authBuild) set(key string, vals ...string) {
	if len(vals) == 0 {
		return
	}
	if b.t.Conditions == nil {
		b.t.Conditions = map[string][]string{}
	}
	for _, v := range vals {
		if !slices.Contains(b.t.Conditions[key], v) {
			b.t.Conditions[key] = append(b.t.Conditions[key], v)
		}
	}
}

// requestTags gives the tags a call asks for.
func (b *authBuild) requestTags(tags []shapes.Tag) {
	for _, t := range tags {
		b.set(condRequestTag+t.Key, t.Value)
		b.set(condTagKeys, t.Key)
	}
}

// tagOnCreate adds the ecs:TagResource check of tags given at creation.
func (b *authBuild) tagOnCreate(arn string, tags []shapes.Tag, cluster string) {
	if len(tags) == 0 {
		return
	}
	tb := &authBuild{t: authTarget{Action: "ecs:TagResource"}}
	tb.resource(arn, nil)
	tb.set(condCreateAction, strings.TrimPrefix(b.t.Action, "ecs:"))
	tb.requestTags(tags)
	if cluster != "" {
		tb.set(condCluster, cluster)
	}
	b.t.Also = append(b.t.Also, tb.done())
}

// done hoists the keys every resource shares into Conditions and keeps
// the others with their resource.
func (b *authBuild) done() authTarget {
	t := b.t
	if len(b.order) == 0 {
		t.Resources = []string{"*"}
		return t
	}
	t.Resources = b.order
	shared := map[string][]string{}
	for k, v := range b.per[b.order[0]] {
		shared[k] = v
	}
	for _, r := range b.order[1:] {
		for k, v := range shared {
			if !slices.Equal(b.per[r][k], v) {
				delete(shared, k)
			}
		}
	}
	for k, v := range shared {
		if _, given := t.Conditions[k]; given {
			continue
		}
		if t.Conditions == nil {
			t.Conditions = map[string][]string{}
		}
		t.Conditions[k] = v
	}
	for _, r := range b.order {
		own := map[string][]string{}
		for k, v := range b.per[r] {
			if !slices.Equal(t.Conditions[k], v) { // a resource's own value wins for it
				own[k] = v
			}
		}
		if len(own) > 0 {
			if t.PerResource == nil {
				t.PerResource = map[string]map[string][]string{}
			}
			t.PerResource[r] = own
		}
	}
	return t
}

// resourceTags is the aws:ResourceTag/ (and ecs:ResourceTag/) keys of
// tags, added to own.
func resourceTags(own map[string][]string, tags []shapes.Tag) map[string][]string {
	if own == nil {
		own = map[string][]string{}
	}
	for _, t := range tags {
		own[condResourceTag+t.Key] = []string{t.Value}
		own[condECSResourceTag+t.Key] = []string{t.Value}
	}
	return own
}

// readAuth reads an object authorization looks at; a missing one is the
// zero value with found false.
func readAuth[T any](ctx context.Context, s *Service, key string) (T, bool, error) {
	it, err := store.Get[T](ctx, s.Store, key)
	if errors.Is(err, store.ErrNotFound) {
		return it.Value, false, nil
	}
	if err != nil {
		return it.Value, false, fleet.StoreErr(err)
	}
	return it.Value, true, nil
}

// clusterArn resolves a cluster name or ARN ("" is "default").
func (b *authBuild) clusterArn(field, ref string) (string, string, error) {
	name, err := b.s.ARNs.ClusterName(field, ref)
	if err != nil {
		return "", "", err
	}
	return name, b.s.ARNs.Cluster(name), nil
}

// cluster adds a cluster as the resource, with its tags; it returns the
// cluster's name and ARN.
func (b *authBuild) cluster(field, ref string) (string, string, error) {
	name, arn, err := b.clusterArn(field, ref)
	if err != nil {
		return "", "", err
	}
	cl, _, err := readAuth[store.Cluster](b.ctx, b.s, store.ClusterKey(name))
	if err != nil {
		return "", "", err
	}
	b.resource(arn, resourceTags(map[string][]string{condCluster: {arn}}, cl.Tags))
	return name, arn, nil
}

// capacityProviderArns resolves capacity provider names or ARNs.
func (b *authBuild) capacityProviderArns(field string, refs []string) ([]string, error) {
	out := make([]string, 0, len(refs))
	for i, ref := range refs {
		name, err := b.s.ARNs.CapacityProviderName(fieldIndex(field, i), ref)
		if err != nil {
			return nil, err
		}
		out = append(out, b.s.ARNs.CapacityProvider(name))
	}
	return out, nil
}

// strategyArns are the capacity providers of a strategy.
func (b *authBuild) strategyArns(field string, items []shapes.CapacityProviderStrategyItem) ([]string, error) {
	out := make([]string, 0, len(items))
	for i, it := range items {
		name, err := b.s.ARNs.CapacityProviderName(fieldIndex(field, i)+".capacityProvider", it.CapacityProvider)
		if err != nil {
			return nil, err
		}
		out = append(out, b.s.ARNs.CapacityProvider(name))
	}
	return out, nil
}

// capacityProvider adds a capacity provider as the resource, with its tags
// and its cluster (clusterRef when it does not exist).
func (b *authBuild) capacityProvider(field, ref, clusterRef string) error {
	name, err := b.s.ARNs.CapacityProviderName(field, ref)
	if err != nil {
		return err
	}
	cp, found, err := readAuth[store.CapacityProvider](b.ctx, b.s, store.CapacityProviderKey(name))
	if err != nil {
		return err
	}
	own := resourceTags(nil, cp.Tags)
	switch {
	case found && cp.Cluster != "":
		own[condCluster] = []string{b.s.ARNs.Cluster(cp.Cluster)}
	case clusterRef != "":
		_, arn, err := b.clusterArn("cluster", clusterRef)
		if err != nil {
			return err
		}
		own[condCluster] = []string{arn}
	}
	b.resource(b.s.ARNs.CapacityProvider(name), own)
	return nil
}

// anyRevision is the ARN of a family's revisions, for a family without
// the revision a call would use: a policy on family:* still matches it,
// and the operation reports what is missing.
func (b *authBuild) anyRevision(typ, family string) string {
	return b.s.ARNs.Base() + typ + "/" + family + ":*"
}

// taskDefinition resolves the task definition a call uses (a family means
// its latest ACTIVE revision) to its ARN and record; td is nil when there
// is none.
func (b *authBuild) taskDefinition(field, ref string) (string, *store.TaskDefinition, error) {
	family, rev, err := b.s.ARNs.FamilyRevision(field, "task-definition", ref)
	if err != nil {
		return "", nil, err
	}
	it, err := b.s.TaskDefinition(b.ctx, field, ref)
	switch {
	case err == nil:
		return it.Value.TaskDefinitionArn, &it.Value, nil
	case fault.KindOf(err) != fault.Client:
		return "", nil, err
	case rev > 0:
		return b.s.ARNs.TaskDefinition(family, rev), nil, nil
	}
	return b.anyRevision("task-definition", family), nil, nil
}

// daemonTaskDefinitionArn resolves a daemon task definition reference to
// its ARN and record, as taskDefinition does.
func (b *authBuild) daemonTaskDefinitionArn(field, ref string) (string, *store.DaemonTaskDefinition, error) {
	family, rev, err := b.s.ARNs.FamilyRevision(field, "daemon-task-definition", ref)
	if err != nil {
		return "", nil, err
	}
	it, err := b.s.daemonTaskDefinition(b.ctx, field, ref)
	switch {
	case err == nil:
		return it.Value.DaemonTaskDefinitionArn, &it.Value, nil
	case fault.KindOf(err) != fault.Client:
		return "", nil, err
	case rev > 0:
		return b.s.ARNs.DaemonTaskDefinition(family, rev), nil, nil
	}
	return b.anyRevision("daemon-task-definition", family), nil, nil
}

// nextRevision is the ARN a registration in family will most likely get
// (a concurrent one may take the number first).
func (b *authBuild) nextRevision(typ, familyKey, family string) (string, error) {
	fam, _, err := readAuth[store.Family](b.ctx, b.s, familyKey)
	if err != nil {
		return "", err
	}
	return b.s.ARNs.Base() + typ + "/" + family + ":" + strconv.Itoa(fam.LastRevision+1), nil
}

// hostAccess gives the host-access keys of a standard task definition (td
// nil: none known, so none asked) and, when it asks for any, the further
// check of capstan:HostAccess on the definition (tdArn), in the call's
// cluster (clusterArn, "" for none).
func (b *authBuild) hostAccess(td *shapes.TaskDefinition, tdArn, clusterArn string) {
	var kinds []string
	if td != nil {
		kinds = taskdef.HostAccessKinds(*td)
	}
	b.set(condHostAccess, strconv.FormatBool(len(kinds) > 0))
	b.set(condHostAccessKinds, kinds...)
	if len(kinds) == 0 {
		return
	}
	hb := &authBuild{t: authTarget{Action: "capstan:HostAccess"}}
	hb.resource(tdArn, nil)
	hb.set(condHostAccess, "true")
	hb.set(condHostAccessKinds, kinds...)
	if clusterArn != "" {
		hb.set(condCluster, clusterArn)
	}
	b.t.Also = append(b.t.Also, hb.done())
}

// useTaskDefinition gives the task definition a task-starting call in
// cluster clusterArn uses as its resource (asResource) or as
// ecs:task-definition, with its host access.
func (b *authBuild) useTaskDefinition(field, ref, clusterArn string, asResource bool) error {
	if ref == "" {
		b.hostAccess(nil, "", "")
		return nil
	}
	arn, td, err := b.taskDefinition(field, ref)
	if err != nil {
		return err
	}
	var def *shapes.TaskDefinition
	var tags []shapes.Tag
	if td != nil {
		def, tags = &td.TaskDefinition, td.Tags
	}
	if asResource {
		b.resource(arn, resourceTags(nil, tags))
	} else {
		b.set(condTaskDefinition, arn)
	}
	b.hostAccess(def, arn, clusterArn)
	return nil
}

// daemon adds a daemon as the resource with its cluster, tags and capacity
// providers; it returns the record (found false when there is none).
func (b *authBuild) daemon(field, arn string) (store.Daemon, bool, error) {
	cluster, name, err := b.s.ARNs.DaemonName(field, arn)
	if err != nil {
		return store.Daemon{}, false, err
	}
	d, found, err := readAuth[store.Daemon](b.ctx, b.s, store.DaemonKey(cluster, name))
	if err != nil {
		return d, false, err
	}
	arn = b.s.ARNs.Daemon(cluster, name)
	own := resourceTags(map[string][]string{condCluster: {b.s.ARNs.Cluster(cluster)}, condDaemon: {arn}}, d.Tags)
	b.resource(arn, own)
	return d, found, nil
}

// daemonChildren adds daemon revisions or deployments (typ) and the daemons
// they belong to, each with its cluster and daemon.
func (b *authBuild) daemonChildren(field, typ string, arns []string) error {
	for i, a := range arns {
		c, dn, _, ok := b.s.ARNs.DaemonChild(typ, a)
		if !ok {
			return fault.Invalid(fieldIndex(field, i), "%q is not a %s ARN", fleet.Clip(a), typ)
		}
		daemonArn := b.s.ARNs.Daemon(c, dn)
		if _, _, err := b.daemon(field, daemonArn); err != nil {
			return err
		}
		b.resource(a, map[string][]string{condCluster: {b.s.ARNs.Cluster(c)}, condDaemon: {daemonArn}})
	}
	return nil
}

// daemonUpdate is the target of a call that deploys new settings to a
// daemon: UpdateDaemon and the requests previewed like it.
func (b *authBuild) daemonUpdate(r *shapes.UpdateDaemonRequest) error {
	if _, _, err := b.daemon("daemonArn", r.DaemonArn); err != nil {
		return err
	}
	cps, err := b.capacityProviderArns("capacityProviderArns", r.CapacityProviderArns)
	if err != nil {
		return err
	}
	b.set(condCapacityProvider, cps...)
	if r.DaemonTaskDefinitionArn != "" {
		arn, _, err := b.daemonTaskDefinitionArn("daemonTaskDefinitionArn", r.DaemonTaskDefinitionArn)
		if err != nil {
			return err
		}
		b.set(condDaemonTaskDefinition, arn)
	}
	return nil
}

// service adds a service as the resource with its cluster and tags; it
// returns the record (zero when there is none) and the cluster's ARN.
func (b *authBuild) service(clusterRef, field, ref string) (store.Service, string, error) {
	arnCluster, name, err := b.s.ARNs.ServiceRef(field, ref)
	if err != nil {
		return store.Service{}, "", err
	}
	if clusterRef == "" {
		clusterRef = arnCluster
	}
	cluster, clusterArn, err := b.clusterArn("cluster", clusterRef)
	if err != nil {
		return store.Service{}, "", err
	}
	svc, _, err := readAuth[store.Service](b.ctx, b.s, store.ServiceKey(cluster, name))
	if err != nil {
		return svc, "", err
	}
	b.resource(b.s.ARNs.Service(cluster, name), resourceTags(map[string][]string{condCluster: {clusterArn}}, svc.Tags))
	return svc, clusterArn, nil
}

// inCluster adds tasks or container instances (refs by ID or ARN) of a
// cluster; their tags are not read (see docs/permissions.md).
func (b *authBuild) inCluster(field, clusterRef string, refs []string, resolve func(field, cluster, ref string) (string, error),
	arn func(cluster, id string) string) ([]string, error) {
	cluster, clusterArn, err := b.clusterArn("cluster", clusterRef)
	if err != nil {
		return nil, err
	}
	b.set(condCluster, clusterArn)
	out := make([]string, 0, len(refs))
	for i, ref := range refs {
		id, err := resolve(fieldIndex(field, i), cluster, ref)
		if err != nil {
			return nil, err
		}
		a := arn(cluster, id)
		b.resource(a, nil)
		out = append(out, a)
	}
	return out, nil
}

// taggable adds the resource a tagging call names, with its cluster and,
// where they are cheap to read, its tags. A resource Capstan does not know
// is added as given: the operation refuses it.
func (b *authBuild) taggable(arn string) error {
	typ, path, ok := b.s.ARNs.Resource(arn)
	if !ok || !b.s.ARNs.InAccount(arn) {
		b.resource(arn, nil)
		return nil
	}
	own := map[string][]string{}
	clusterOf := func(name string) { own[condCluster] = []string{b.s.ARNs.Cluster(name)} }
	var tags []shapes.Tag
	var err error
	switch typ {
	case "cluster":
		var cl store.Cluster
		cl, _, err = readAuth[store.Cluster](b.ctx, b.s, store.ClusterKey(path))
		tags = cl.Tags
		clusterOf(path)
	case "capacity-provider":
		var cp store.CapacityProvider
		cp, _, err = readAuth[store.CapacityProvider](b.ctx, b.s, store.CapacityProviderKey(path))
		tags = cp.Tags
		if cp.Cluster != "" {
			clusterOf(cp.Cluster)
		}
	case "task-definition", "daemon-task-definition":
		family, rev, ferr := b.s.ARNs.FamilyRevision("resourceArn", typ, arn)
		if ferr != nil || rev == 0 {
			break
		}
		if typ == "task-definition" {
			var td store.TaskDefinition
			td, _, err = readAuth[store.TaskDefinition](b.ctx, b.s, store.TaskDefinitionKey(family, rev))
			tags = td.Tags
		} else {
			var td store.DaemonTaskDefinition
			td, _, err = readAuth[store.DaemonTaskDefinition](b.ctx, b.s, store.DaemonTaskDefinitionKey(family, rev))
			tags = td.Tags
		}
	case "daemon":
		if c, name, ok := strings.Cut(path, "/"); ok {
			var d store.Daemon
			d, _, err = readAuth[store.Daemon](b.ctx, b.s, store.DaemonKey(c, name))
			tags = d.Tags
			clusterOf(c)
		}
	case "service":
		if c, name, ok := strings.Cut(path, "/"); ok {
			var svc store.Service
			svc, _, err = readAuth[store.Service](b.ctx, b.s, store.ServiceKey(c, name))
			tags = svc.Tags
			clusterOf(c)
		}
	case "task":
		if c, id, ok := strings.Cut(path, "/"); ok {
			var t store.Task
			t, _, err = readAuth[store.Task](b.ctx, b.s, store.TaskKey(c, id))
			tags = t.Tags
			clusterOf(c)
		}
	case "container-instance":
		if c, id, ok := strings.Cut(path, "/"); ok {
			var ci store.ContainerInstance
			ci, _, err = readAuth[store.ContainerInstance](b.ctx, b.s, store.ContainerInstanceKey(c, id))
			tags = ci.Tags
			clusterOf(c)
		}
	}
	if err != nil {
		return err
	}
	b.resource(arn, resourceTags(own, tags))
	return nil
}

// privileged is ecs:privileged: whether any container asks to run
// privileged.
func privileged(flags ...*bool) string {
	for _, f := range flags {
		if f != nil && *f {
			return "true"
		}
	}
	return "false"
}

// oneDaemon is the target of a call about one daemon.
func (b *authBuild) oneDaemon(arn string) error {
	_, _, err := b.daemonWithProviders(arn)
	return err
}

// daemonWithProviders adds a daemon with the capacity providers it
// targets.
func (b *authBuild) daemonWithProviders(arn string) (store.Daemon, bool, error) {
	d, found, err := b.daemon("daemonArn", arn)
	if err != nil || !found {
		return d, found, err
	}
	b.set(condCapacityProvider, d.Spec.CapacityProviderArns...)
	return d, found, nil
}
