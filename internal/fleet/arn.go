package fleet

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/capstanhq/capstan/internal/fault"
)

// arns builds and parses the ARNs of this account and region.
type ARNs struct{ Partition, region, Account string }

func (a ARNs) Base() string {
	return "arn:" + a.Partition + ":ecs:" + a.region + ":" + a.Account + ":"
}

func (a ARNs) Cluster(name string) string          { return a.Base() + "cluster/" + name }
func (a ARNs) CapacityProvider(name string) string { return a.Base() + "capacity-provider/" + name }
func (a ARNs) TaskDefinition(family string, rev int) string {
	return a.Base() + "task-definition/" + family + ":" + strconv.Itoa(rev)
}
func (a ARNs) DaemonTaskDefinition(family string, rev int) string {
	return a.Base() + "daemon-task-definition/" + family + ":" + strconv.Itoa(rev)
}
func (a ARNs) Daemon(cluster, name string) string {
	return a.Base() + "daemon/" + cluster + "/" + name
}
func (a ARNs) DaemonRevision(cluster, daemon, id string) string {
	return a.Base() + "daemon-revision/" + cluster + "/" + daemon + "/" + id
}
func (a ARNs) DaemonDeployment(cluster, daemon, id string) string {
	return a.Base() + "daemon-deployment/" + cluster + "/" + daemon + "/" + id
}

// resource splits an ECS ARN into its resource type and the path after it.
// ok is false when s is not an ECS ARN of this partition.
func (a ARNs) Resource(s string) (typ, path string, ok bool) {
	parts := strings.SplitN(s, ":", 6)
	if len(parts) != 6 || parts[0] != "arn" || parts[1] != a.Partition || parts[2] != "ecs" {
		return "", "", false
	}
	typ, path, ok = strings.Cut(parts[5], "/")
	return typ, path, ok
}

// inAccount reports whether an ARN names this region and account.
func (a ARNs) InAccount(s string) bool { return strings.HasPrefix(s, a.Base()) }

var namePattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,255}$`)

func CheckName(field, v string) error {
	if !namePattern.MatchString(v) {
		return fault.Invalid(field, "must be 1-255 letters, numbers, hyphens and underscores (got %q)", Clip(v))
	}
	return nil
}

func Clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// clusterName resolves a cluster name or ARN (empty means "default").
func (a ARNs) ClusterName(field, v string) (string, error) {
	if v == "" {
		return "default", nil
	}
	if strings.HasPrefix(v, "arn:") {
		typ, name, ok := a.Resource(v)
		if !ok || typ != "cluster" || !a.InAccount(v) {
			return "", fault.Invalid(field, "%q is not a cluster ARN of this account and region (%s)", Clip(v), a.Cluster("NAME"))
		}
		v = name
	}
	if err := CheckName(field, v); err != nil {
		return "", err
	}
	return v, nil
}

// capacityProviderName resolves a capacity provider name or ARN.
func (a ARNs) CapacityProviderName(field, v string) (string, error) {
	if strings.HasPrefix(v, "arn:") {
		typ, name, ok := a.Resource(v)
		if !ok || typ != "capacity-provider" || !a.InAccount(v) {
			return "", fault.Invalid(field, "%q is not a capacity provider ARN of this account and region", Clip(v))
		}
		v = name
	}
	if err := CheckName(field, v); err != nil {
		return "", err
	}
	return v, nil
}

// daemonName resolves a daemon ARN into its cluster and name.
func (a ARNs) DaemonName(field, v string) (cluster, name string, err error) {
	typ, path, ok := a.Resource(v)
	if !ok || typ != "daemon" || !a.InAccount(v) {
		return "", "", fault.Invalid(field, "%q is not a daemon ARN of this account and region (%s)", Clip(v), a.Daemon("CLUSTER", "NAME"))
	}
	cluster, name, ok = strings.Cut(path, "/")
	if !ok || !namePattern.MatchString(cluster) || !namePattern.MatchString(name) {
		return "", "", fault.Invalid(field, "%q is not a daemon ARN (%s)", Clip(v), a.Daemon("CLUSTER", "NAME"))
	}
	return cluster, name, nil
}

// daemonChild resolves a daemon revision or deployment ARN.
func (a ARNs) DaemonChild(typ, v string) (cluster, daemon, id string, ok bool) {
	t, path, ok := a.Resource(v)
	if !ok || t != typ || !a.InAccount(v) {
		return "", "", "", false
	}
	p := strings.Split(path, "/")
	if len(p) != 3 || p[2] == "" || !namePattern.MatchString(p[0]) || !namePattern.MatchString(p[1]) || !namePattern.MatchString(p[2]) {
		return "", "", "", false
	}
	return p[0], p[1], p[2], true
}

// familyRevision parses "family", "family:rev" or a (daemon-)task-definition
// ARN of the given type. rev is 0 when only a family was given.
func (a ARNs) FamilyRevision(field, typ, v string) (family string, rev int, err error) {
	s := v
	if strings.HasPrefix(v, "arn:") {
		t, path, ok := a.Resource(v)
		if !ok || t != typ || !a.InAccount(v) {
			return "", 0, fault.Invalid(field, "%q is not a %s ARN of this account and region", Clip(v), typ)
		}
		s = path
	}
	family, revs, hasRev := strings.Cut(s, ":")
	if err := CheckName(field, family); err != nil {
		return "", 0, err
	}
	if hasRev {
		rev, err = strconv.Atoi(revs)
		if err != nil || rev < 1 {
			return "", 0, fault.Invalid(field, "revision must be a positive integer (got %q)", Clip(revs))
		}
	}
	return family, rev, nil
}

func (a ARNs) Service(cluster, name string) string {
	return a.Base() + "service/" + cluster + "/" + name
}

// serviceRef splits a service name or ARN. The ARN may name the cluster
// (service/CLUSTER/NAME) or not (the older service/NAME form).
func (a ARNs) ServiceRef(field, ref string) (cluster, name string, err error) {
	name = ref
	if strings.HasPrefix(ref, "arn:") {
		typ, path, ok := a.Resource(ref)
		if !ok || typ != "service" || !a.InAccount(ref) {
			return "", "", fault.Invalid(field, "%q is not a service ARN of this account and region (%s)", Clip(ref), a.Service("CLUSTER", "NAME"))
		}
		name = path
		if c, n, ok := strings.Cut(path, "/"); ok {
			cluster, name = c, n
		}
	}
	if err := CheckName(field, name); err != nil {
		return "", "", err
	}
	return cluster, name, nil
}
