// Package layers states the import layers of Capstan's internal packages,
// lowest first, and its test keeps every import pointing down. See
// docs/architecture.md for what each layer does.
package layers

// Layers are the layers, lowest first. Each is a list of units; a unit is
// a set of packages ("a/b" is that package, "a/b/..." it and the packages
// below it). A package may import anything in a lower layer and its own
// unit, and nothing else of Capstan's: units of one layer never import
// each other.
var Layers = [][][]string{
	// Foundation: the wire shapes, the store, codecs, the runtime
	// interface and the other leaves both sides build on.
	{{"internal/api/...", "internal/auth", "internal/alarms", "internal/codec", "internal/coverage", "internal/cpus",
		"internal/events", "internal/failover", "internal/fault", "internal/link", "internal/memlimit", "internal/protocol", "internal/provision",
		"internal/runtime/...", "internal/secrets", "internal/store", "internal/taskdef", "internal/iam/policy"}},
	// The pure plans of the domain: a daemon rollout, a service deployment.
	{{"internal/rollout"}, {"internal/servicedeploy"}},
	// The fleet's state and every decision on it that more than one edge
	// makes: placement, task starts and stops, instance records, agent
	// reports, events. Beside it the identities and their policies (iam)
	// and the audit trail.
	{{"internal/fleet"}, {"internal/iam"}, {"internal/audit"}},
	// The edges, each calling the domain and none another: the ECS
	// operations, the IAM and STS operations, the reconcilers, the agent
	// sessions; the agent and the client live apart from the server
	// entirely.
	{{"internal/ops"}, {"internal/iamapi"}, {"internal/controller/..."}, {"internal/gateway"}, {"internal/console"}, {"internal/agent/..."}, {"internal/cli"}},
	// What starts agents for the server.
	{{"internal/provision/local"}, {"internal/provision/sim"}, {"internal/provision/ec2"}, {"internal/provision/agentenv"}},
	// Assembly: the control plane, the dev cluster, the test harness.
	{{"internal/server"}},
	{{"internal/dev"}, {"internal/testenv/..."}},
}
