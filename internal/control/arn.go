package control

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/capstanhq/capstan/internal/fault"
)

// arns builds and parses the ARNs of this account and region.
type arns struct{ partition, region, account string }

func (a arns) base() string {
	return "arn:" + a.partition + ":ecs:" + a.region + ":" + a.account + ":"
}

func (a arns) cluster(name string) string          { return a.base() + "cluster/" + name }
func (a arns) capacityProvider(name string) string { return a.base() + "capacity-provider/" + name }
func (a arns) taskDefinition(family string, rev int) string {
	return a.base() + "task-definition/" + family + ":" + strconv.Itoa(rev)
}
func (a arns) daemonTaskDefinition(family string, rev int) string {
	return a.base() + "daemon-task-definition/" + family + ":" + strconv.Itoa(rev)
}
func (a arns) daemon(cluster, name string) string {
	return a.base() + "daemon/" + cluster + "/" + name
}
func (a arns) daemonRevision(cluster, daemon, id string) string {
	return a.base() + "daemon-revision/" + cluster + "/" + daemon + "/" + id
}
func (a arns) daemonDeployment(cluster, daemon, id string) string {
	return a.base() + "daemon-deployment/" + cluster + "/" + daemon + "/" + id
}

// resource splits an ECS ARN into its resource type and the path after it.
// ok is false when s is not an ECS ARN of this partition.
func (a arns) resource(s string) (typ, path string, ok bool) {
	parts := strings.SplitN(s, ":", 6)
	if len(parts) != 6 || parts[0] != "arn" || parts[1] != a.partition || parts[2] != "ecs" {
		return "", "", false
	}
	typ, path, ok = strings.Cut(parts[5], "/")
	return typ, path, ok
}

// inAccount reports whether an ARN names this region and account.
func (a arns) inAccount(s string) bool { return strings.HasPrefix(s, a.base()) }

var namePattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,255}$`)

func checkName(field, v string) error {
	if !namePattern.MatchString(v) {
		return fault.Invalid(field, "must be 1-255 letters, numbers, hyphens and underscores (got %q)", clip(v))
	}
	return nil
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// clusterName resolves a cluster name or ARN (empty means "default").
func (a arns) clusterName(field, v string) (string, error) {
	if v == "" {
		return "default", nil
	}
	if strings.HasPrefix(v, "arn:") {
		typ, name, ok := a.resource(v)
		if !ok || typ != "cluster" || !a.inAccount(v) {
			return "", fault.Invalid(field, "%q is not a cluster ARN of this account and region (%s)", clip(v), a.cluster("NAME"))
		}
		v = name
	}
	if err := checkName(field, v); err != nil {
		return "", err
	}
	return v, nil
}

// capacityProviderName resolves a capacity provider name or ARN.
func (a arns) capacityProviderName(field, v string) (string, error) {
	if strings.HasPrefix(v, "arn:") {
		typ, name, ok := a.resource(v)
		if !ok || typ != "capacity-provider" || !a.inAccount(v) {
			return "", fault.Invalid(field, "%q is not a capacity provider ARN of this account and region", clip(v))
		}
		v = name
	}
	if err := checkName(field, v); err != nil {
		return "", err
	}
	return v, nil
}

// daemonName resolves a daemon ARN into its cluster and name.
func (a arns) daemonName(field, v string) (cluster, name string, err error) {
	typ, path, ok := a.resource(v)
	if !ok || typ != "daemon" || !a.inAccount(v) {
		return "", "", fault.Invalid(field, "%q is not a daemon ARN of this account and region (%s)", clip(v), a.daemon("CLUSTER", "NAME"))
	}
	cluster, name, ok = strings.Cut(path, "/")
	if !ok || !namePattern.MatchString(cluster) || !namePattern.MatchString(name) {
		return "", "", fault.Invalid(field, "%q is not a daemon ARN (%s)", clip(v), a.daemon("CLUSTER", "NAME"))
	}
	return cluster, name, nil
}

// daemonChild resolves a daemon revision or deployment ARN.
func (a arns) daemonChild(typ, v string) (cluster, daemon, id string, ok bool) {
	t, path, ok := a.resource(v)
	if !ok || t != typ || !a.inAccount(v) {
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
func (a arns) familyRevision(field, typ, v string) (family string, rev int, err error) {
	s := v
	if strings.HasPrefix(v, "arn:") {
		t, path, ok := a.resource(v)
		if !ok || t != typ || !a.inAccount(v) {
			return "", 0, fault.Invalid(field, "%q is not a %s ARN of this account and region", clip(v), typ)
		}
		s = path
	}
	family, revs, hasRev := strings.Cut(s, ":")
	if err := checkName(field, family); err != nil {
		return "", 0, err
	}
	if hasRev {
		rev, err = strconv.Atoi(revs)
		if err != nil || rev < 1 {
			return "", 0, fault.Invalid(field, "revision must be a positive integer (got %q)", clip(revs))
		}
	}
	return family, rev, nil
}
