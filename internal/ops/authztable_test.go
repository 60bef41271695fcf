package ops

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/auth"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/store"
)

const arnBase = "arn:aws:ecs:us-east-1:123456789012:"

// extensionOps are the CapstanV1 operations. ListAuditEvents is served by
// the audit trail, not registered by Service.Register.
var extensionOps = []string{"CreateAgentCredential", "DescribeDaemonRollout", "PreviewDaemonUpdate",
	"DescribeDaemonConfiguration", "RollbackDaemon", "UpdateDaemonIfUnchanged", "StopDaemonDeployment", "ListEvents", "ListAuditEvents", "GetTaskLogs"}

// authVerifier lets every request in as the administrator.
type authVerifier struct{}

func (authVerifier) Verify(context.Context, *http.Request, []byte) (auth.Principal, error) {
	return auth.Principal{AccessKeyID: "TEST", Role: auth.RoleAdmin}, nil
}

// authProbe registers s's operations on a handler whose authorizer notes
// the request type each operation decodes and refuses the call.
func authProbe(s *Service) (*api.Handler, func(target, body string) (string, reflect.Type)) {
	var mu sync.Mutex
	var seenOp string
	var seenType reflect.Type
	h := api.NewHandler(authVerifier{}, func(_ context.Context, _ auth.Principal, op string, req any) (api.Checked, error) {
		mu.Lock()
		seenOp, seenType = op, reflect.TypeOf(req)
		mu.Unlock()
		return api.Checked{}, fault.Denied("probe")
	}, slog.New(slog.DiscardHandler))
	s.Register(h)
	s.RegisterTaskLogs(h, nil)
	s.RegisterExec(h, ExecConfig{})
	probe := func(target, body string) (string, reflect.Type) {
		mu.Lock()
		seenOp, seenType = "", nil
		mu.Unlock()
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		r.Header.Set("X-Amz-Target", target)
		h.ServeHTTP(httptest.NewRecorder(), r)
		mu.Lock()
		defer mu.Unlock()
		return seenOp, seenType
	}
	return h, probe
}

// The table has a row for every operation the handler serves and for the
// extensions, no other, each taking the type the operation decodes.
func TestAuthTableCoversEveryOperation(t *testing.T) {
	s := newService(openStore(t))
	h, probe := authProbe(s)
	ecsOps := h.Operations()
	sort.Strings(ecsOps)
	if len(ecsOps) < 40 {
		t.Fatalf("only %d operations registered", len(ecsOps))
	}
	for _, op := range ecsOps {
		sp, ok := authTable[op]
		if !ok {
			t.Errorf("%s: no row in authTable", op)
			continue
		}
		if sp.action != "ecs:"+op {
			t.Errorf("%s: action %s, want ecs:%s", op, sp.action, op)
		}
	}
	for _, op := range extensionOps {
		sp, ok := authTable[op]
		if !ok {
			t.Errorf("extension %s: no row in authTable", op)
			continue
		}
		if !strings.HasPrefix(sp.action, "capstan:") && !strings.HasPrefix(sp.action, "ecs:") {
			t.Errorf("extension %s: action %s has neither prefix", op, sp.action)
		}
		if sp.newReq == nil {
			continue
		}
		// Registered extensions reach the authorizer with their own type.
		name, typ := probe(api.ExtensionPrefix+op, authSamples[op])
		if name != op {
			t.Errorf("extension %s is not registered by Service.Register", op)
		} else if want := reflect.TypeOf(sp.newReq()); typ != want {
			t.Errorf("extension %s decodes %v, its row takes %v", op, typ, want)
		}
	}
	for op, sp := range authTable {
		if !slices.Contains(ecsOps, op) && !slices.Contains(extensionOps, op) {
			t.Errorf("authTable has %s, which nothing serves", op)
		}
		// The operation's method takes the row's request type.
		m, ok := reflect.TypeOf(s).MethodByName(op)
		if !ok || sp.newReq == nil {
			continue
		}
		if got, want := m.Type.In(2), reflect.TypeOf(sp.newReq()); got != want {
			t.Errorf("%s takes %v, its row %v", op, got, want)
		}
	}
	t.Logf("%d ECS operations and %d extensions", len(ecsOps), len(extensionOps))
}

// authFixture is a store with clusters prod (tagged) and dev, capacity
// provider prod-mi, task definitions web:1 and root:1 (a host volume of
// /), daemon task definition agent:1, services api (web) and ops (root),
// and daemons prod/agent (revisions r0, r1) and dev/agent.
func authFixture(t *testing.T) *Service {
	t.Helper()
	ctx := context.Background()
	s := newService(openStore(t))
	for _, c := range []struct {
		name string
		tags []shapes.Tag
	}{{"prod", []shapes.Tag{{Key: "team", Value: "apps"}}}, {"dev", nil}} {
		if _, err := s.CreateCluster(ctx, &shapes.CreateClusterRequest{ClusterName: c.name, Tags: c.tags}); err != nil {
			t.Fatal(err)
		}
	}
	mem := int32(64)
	for _, td := range []*shapes.RegisterTaskDefinitionRequest{
		{Family: "web", Tags: []shapes.Tag{{Key: "app", Value: "web"}},
			ContainerDefinitions: []shapes.ContainerDefinition{{Name: "web", Image: "busybox", Memory: &mem}}},
		{Family: "root", Tags: []shapes.Tag{{Key: "app", Value: "root"}},
			Volumes: []shapes.Volume{{Name: "root", Host: &shapes.HostVolumeProperties{SourcePath: "/"}}},
			ContainerDefinitions: []shapes.ContainerDefinition{{Name: "sh", Image: "busybox", Memory: &mem,
				MountPoints: []shapes.MountPoint{{SourceVolume: "root", ContainerPath: "/host"}}}}},
	} {
		if _, err := s.RegisterTaskDefinition(ctx, td); err != nil {
			t.Fatal(err)
		}
	}
	cp := store.CapacityProvider{CapacityProvider: shapes.CapacityProvider{Name: "prod-mi", CapacityProviderArn: arnBase + "capacity-provider/prod-mi",
		Cluster: "prod", Status: "ACTIVE", Tags: []shapes.Tag{{Key: "pool", Value: "main"}}}}
	dtd := store.DaemonTaskDefinition{Tags: []shapes.Tag{{Key: "owner", Value: "platform"}}, DaemonTaskDefinition: shapes.DaemonTaskDefinition{
		DaemonTaskDefinitionArn: arnBase + "daemon-task-definition/agent:1", Family: "agent", Revision: ptr(int32(1)), Status: "ACTIVE"}}
	svc := func(name, td string, tags []shapes.Tag) store.Service {
		v := store.Service{Cluster: "prod"}
		v.ServiceName, v.ServiceArn, v.Status, v.TaskDefinition, v.Tags = name, arnBase+"service/prod/"+name, "ACTIVE", td, tags
		return v
	}
	daemon := func(cluster string, tags []shapes.Tag) store.Daemon {
		return store.Daemon{Name: "agent", Arn: arnBase + "daemon/" + cluster + "/agent", Cluster: cluster, ClusterArn: arnBase + "cluster/" + cluster,
			Status: "ACTIVE", Tags: tags, Spec: store.DaemonSpec{TaskDefinitionArn: dtd.DaemonTaskDefinitionArn,
				CapacityProviderArns: []string{cp.CapacityProviderArn}},
			RevisionArn: arnBase + "daemon-revision/" + cluster + "/agent/r1", DeploymentArn: arnBase + "daemon-deployment/" + cluster + "/agent/d1"}
	}
	revision := func(cluster, id string) store.DaemonRevision {
		r := store.DaemonRevision{ID: id, CapacityProviderArns: []string{cp.CapacityProviderArn}}
		r.DaemonRevisionArn, r.DaemonTaskDefinitionArn = arnBase+"daemon-revision/"+cluster+"/agent/"+id, dtd.DaemonTaskDefinitionArn
		r.CreatedAt = shapes.At(s.Now())
		return r
	}
	tx := s.Store.Txn().
		Create(store.CapacityProviderKey("prod-mi"), cp).
		Create(store.DaemonTaskDefinitionKey("agent", 1), dtd).
		Create(store.ServiceKey("prod", "api"), svc("api", arnBase+"task-definition/web:1", []shapes.Tag{{Key: "tier", Value: "front"}})).
		Create(store.ServiceKey("prod", "ops"), svc("ops", arnBase+"task-definition/root:1", []shapes.Tag{{Key: "tier", Value: "back"}})).
		Create(store.DaemonKey("prod", "agent"), daemon("prod", []shapes.Tag{{Key: "owner", Value: "platform"}})).
		Create(store.DaemonKey("dev", "agent"), daemon("dev", []shapes.Tag{{Key: "owner", Value: "dev"}})).
		Create(store.DaemonRevisionKey("prod", "agent", "r0"), revision("prod", "r0")).
		Create(store.DaemonRevisionKey("prod", "agent", "r1"), revision("prod", "r1")).
		Create(store.DaemonRevisionKey("dev", "agent", "r1"), revision("dev", "r1"))
	if _, err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Reads for authorizing reads do not wait for the latest writes.
	if _, err := s.Store.ReadOnly(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

// authOf decodes body into op's request type and computes its target,
// checking the action and that every key it supplies is in the row.
func authOf(t *testing.T, s *Service, op, body string) (authTarget, error) {
	t.Helper()
	sp := authTable[op]
	var req any = &struct{}{}
	if sp.newReq != nil {
		req = sp.newReq()
	}
	if err := json.Unmarshal([]byte(body), req); err != nil {
		t.Fatalf("%s: %v", op, err)
	}
	tg, err := s.authTargetOf(context.Background(), op, req)
	if err != nil {
		return tg, err
	}
	if tg.Action != sp.action {
		t.Errorf("%s: action %s, row says %s", op, tg.Action, sp.action)
	}
	if len(tg.Resources) == 0 {
		t.Errorf("%s: no resources", op)
	}
	for k := range suppliedKeys(tg) {
		if !slices.Contains(sp.keys, k) && !slices.Contains(sp.extra, k) {
			t.Errorf("%s supplies %s, which its row does not list", op, k)
		}
	}
	return tg, nil
}

// suppliedKeys are the keys of a target as the docs name them.
func suppliedKeys(tg authTarget) map[string]bool {
	out := map[string]bool{}
	for k := range tg.Conditions {
		out[docKey(k)] = true
	}
	for _, own := range tg.PerResource {
		for k := range own {
			out[docKey(k)] = true
		}
	}
	return out
}

const (
	taskA = "0123456789abcdef0123456789abcdef"
	taskB = "fedcba9876543210fedcba9876543210"
)

// authSamples is a request for every operation, on authFixture, that
// between them supply every key the row lists.
var authSamples = map[string]string{
	"CreateCluster":                 `{"clusterName":"new","tags":[{"key":"env","value":"test"}],"defaultCapacityProviderStrategy":[{"capacityProvider":"prod-mi"}]}`,
	"DescribeClusters":              `{"clusters":["prod"]}`,
	"ListClusters":                  `{}`,
	"DeleteCluster":                 `{"cluster":"prod"}`,
	"CreateCapacityProvider":        `{"name":"new-mi","cluster":"prod","tags":[{"key":"env","value":"test"}]}`,
	"DescribeCapacityProviders":     `{"capacityProviders":["prod-mi"]}`,
	"UpdateCapacityProvider":        `{"name":"prod-mi","cluster":"prod"}`,
	"DeleteCapacityProvider":        `{"capacityProvider":"prod-mi"}`,
	"PutClusterCapacityProviders":   `{"cluster":"prod","capacityProviders":["prod-mi"]}`,
	"RegisterTaskDefinition":        `{"family":"web","networkMode":"host","containerDefinitions":[{"name":"a","image":"i","privileged":true}],"tags":[{"key":"env","value":"test"}]}`,
	"DescribeTaskDefinition":        `{"taskDefinition":"web"}`,
	"ListTaskDefinitions":           `{}`,
	"ListTaskDefinitionFamilies":    `{}`,
	"DeregisterTaskDefinition":      `{"taskDefinition":"web:1"}`,
	"DeleteTaskDefinitions":         `{"taskDefinitions":["web:1"]}`,
	"RegisterDaemonTaskDefinition":  `{"family":"agent","containerDefinitions":[{"name":"a","image":"i","privileged":true}],"tags":[{"key":"env","value":"test"}]}`,
	"DescribeDaemonTaskDefinition":  `{"daemonTaskDefinition":"agent"}`,
	"ListDaemonTaskDefinitions":     `{}`,
	"DeleteDaemonTaskDefinition":    `{"daemonTaskDefinition":"agent:1"}`,
	"CreateDaemon":                  `{"daemonName":"new","clusterArn":"prod","daemonTaskDefinitionArn":"agent","capacityProviderArns":["prod-mi"],"tags":[{"key":"env","value":"test"}]}`,
	"UpdateDaemon":                  `{"daemonArn":"` + arnBase + `daemon/prod/agent","daemonTaskDefinitionArn":"agent:1","capacityProviderArns":["prod-mi"]}`,
	"DeleteDaemon":                  `{"daemonArn":"` + arnBase + `daemon/prod/agent"}`,
	"DescribeDaemon":                `{"daemonArn":"` + arnBase + `daemon/prod/agent"}`,
	"ListDaemons":                   `{"clusterArn":"prod","capacityProviderArns":["prod-mi"]}`,
	"DescribeDaemonRevisions":       `{"daemonRevisionArns":["` + arnBase + `daemon-revision/prod/agent/r1"]}`,
	"ListDaemonDeployments":         `{"daemonArn":"` + arnBase + `daemon/prod/agent"}`,
	"DescribeDaemonDeployments":     `{"daemonDeploymentArns":["` + arnBase + `daemon-deployment/prod/agent/d1"]}`,
	"TagResource":                   `{"resourceArn":"` + arnBase + `service/prod/api","tags":[{"key":"env","value":"test"}]}`,
	"UntagResource":                 `{"resourceArn":"` + arnBase + `cluster/prod","tagKeys":["team"]}`,
	"ListTagsForResource":           `{"resourceArn":"` + arnBase + `daemon/prod/agent"}`,
	"RegisterContainerInstance":     `{"cluster":"prod","tags":[{"key":"env","value":"test"}]}`,
	"DeregisterContainerInstance":   `{"cluster":"prod","containerInstance":"` + taskA + `"}`,
	"DescribeContainerInstances":    `{"cluster":"prod","containerInstances":["` + taskA + `"]}`,
	"ListContainerInstances":        `{"cluster":"prod"}`,
	"UpdateContainerInstancesState": `{"cluster":"prod","containerInstances":["` + taskA + `"],"status":"DRAINING"}`,
	"DiscoverPollEndpoint":          `{"cluster":"prod"}`,
	"RunTask":                       `{"cluster":"prod","taskDefinition":"root","capacityProviderStrategy":[{"capacityProvider":"prod-mi"}],"tags":[{"key":"env","value":"test"}]}`,
	"StartTask":                     `{"cluster":"prod","taskDefinition":"root:1","containerInstances":["` + taskA + `"],"tags":[{"key":"env","value":"test"}]}`,
	"StopTask":                      `{"cluster":"prod","task":"` + taskA + `"}`,
	"DescribeTasks":                 `{"cluster":"prod","tasks":["` + taskA + `"]}`,
	"ListTasks":                     `{"cluster":"prod","serviceName":"api"}`,
	"CreateService":                 `{"cluster":"prod","serviceName":"new","taskDefinition":"root","capacityProviderStrategy":[{"capacityProvider":"prod-mi"}],"tags":[{"key":"env","value":"test"}]}`,
	"UpdateService":                 `{"cluster":"prod","service":"ops","capacityProviderStrategy":[{"capacityProvider":"prod-mi"}]}`,
	"DeleteService":                 `{"cluster":"prod","service":"api"}`,
	"DescribeServices":              `{"cluster":"prod","services":["api"]}`,
	"ListServices":                  `{"cluster":"prod"}`,
	"CreateAgentCredential":         `{"cluster":"prod","capacityProvider":"prod-mi"}`,
	"DescribeDaemonRollout":         `{"daemonArn":"` + arnBase + `daemon/prod/agent"}`,
	"PreviewDaemonUpdate":           `{"daemonArn":"` + arnBase + `daemon/prod/agent","daemonTaskDefinitionArn":"agent","capacityProviderArns":["prod-mi"]}`,
	"DescribeDaemonConfiguration":   `{"daemonArn":"` + arnBase + `daemon/prod/agent"}`,
	"RollbackDaemon":                `{"daemonArn":"` + arnBase + `daemon/prod/agent"}`,
	"UpdateDaemonIfUnchanged":       `{"daemonArn":"` + arnBase + `daemon/prod/agent","daemonTaskDefinitionArn":"agent","capacityProviderArns":["prod-mi"],"ifRevisionArn":"` + arnBase + `daemon-revision/prod/agent/1"}`,
	"StopDaemonDeployment":          `{"daemonArn":"` + arnBase + `daemon/prod/agent"}`,
	"ListEvents":                    `{"cluster":"prod"}`,
	"ListAuditEvents":               `{}`,
	"GetTaskLogs":                   `{"cluster":"prod","task":"` + taskA + `"}`,
}

// Every row computes a target for a request of its operation, supplies
// exactly the keys it lists, and checks tags at creation when it says so:
// the docs table is rendered from the rows, so it cannot claim more or
// less than the code does.
func TestAuthTargetsSupplyTheirRowsKeys(t *testing.T) {
	s := authFixture(t)
	for op, sp := range authTable {
		body, ok := authSamples[op]
		if !ok {
			t.Errorf("%s: no sample request", op)
			continue
		}
		tg, err := authOf(t, s, op, body)
		if err != nil {
			t.Errorf("%s: %v", op, err)
			continue
		}
		got := suppliedKeys(tg)
		for _, k := range append(slices.Clone(sp.keys), sp.extra...) {
			if !got[k] {
				t.Errorf("%s: its row lists %s, which the sample does not supply", op, k)
			}
		}
		var also []string
		for _, a := range tg.Also {
			switch {
			case a.Action == "ecs:TagResource" && slices.Equal(a.Conditions[condCreateAction], []string{strings.TrimPrefix(sp.action, "ecs:")}):
				also = append(also, alsoTagging)
			case a.Action == "capstan:HostAccess" && len(a.Conditions[condHostAccessKinds]) > 0:
				also = append(also, alsoHostAccess)
			default:
				t.Errorf("%s: further check %+v", op, a)
			}
		}
		if !slices.Equal(also, sp.also) {
			t.Errorf("%s: row says also %q, the sample makes %q", op, sp.also, also)
		}
	}
}

func TestAuthTargets(t *testing.T) {
	s := authFixture(t)
	cluster := func(n string) string { return arnBase + "cluster/" + n }
	prod := cluster("prod")
	agent := arnBase + "daemon/prod/agent"
	rows := []struct {
		name, op, body string
		want           authTarget
	}{
		{"RunTask by family", "RunTask", `{"cluster":"prod","taskDefinition":"web"}`, authTarget{
			Action: "ecs:RunTask", Resources: []string{arnBase + "task-definition/web:1"},
			Conditions: map[string][]string{condCluster: {prod}, condHostAccess: {"false"},
				"aws:ResourceTag/app": {"web"}, "ecs:ResourceTag/app": {"web"}}}},
		{"RunTask by ARN, with host access, a capacity provider and tags", "RunTask",
			`{"cluster":"` + prod + `","taskDefinition":"` + arnBase + `task-definition/root:1",` +
				`"capacityProviderStrategy":[{"capacityProvider":"prod-mi"}],"tags":[{"key":"env","value":"test"}]}`, authTarget{
				Action: "ecs:RunTask", Resources: []string{arnBase + "task-definition/root:1"},
				Conditions: map[string][]string{condCluster: {prod}, condHostAccess: {"true"}, condHostAccessKinds: {"hostVolume", "dockerSocket"},
					"aws:ResourceTag/app": {"root"}, "ecs:ResourceTag/app": {"root"},
					condCapacityProvider: {arnBase + "capacity-provider/prod-mi"}, "aws:RequestTag/env": {"test"}, condTagKeys: {"env"}},
				Also: []authTarget{{Action: "capstan:HostAccess", Resources: []string{arnBase + "task-definition/root:1"},
					Conditions: map[string][]string{condHostAccess: {"true"}, condHostAccessKinds: {"hostVolume", "dockerSocket"}, condCluster: {prod}}},
					{Action: "ecs:TagResource", Resources: []string{arnBase + "task/prod/*"},
						Conditions: map[string][]string{condCreateAction: {"RunTask"}, "aws:RequestTag/env": {"test"}, condTagKeys: {"env"},
							condCluster: {prod}}}}}},
		{"RunTask of a family with no revision", "RunTask", `{"taskDefinition":"nothing"}`, authTarget{
			Action: "ecs:RunTask", Resources: []string{arnBase + "task-definition/nothing:*"},
			Conditions: map[string][]string{condCluster: {cluster("default")}, condHostAccess: {"false"}}}},
		{"CreateService with tags", "CreateService",
			`{"cluster":"prod","serviceName":"new","taskDefinition":"web:1","tags":[{"key":"team","value":"apps"},{"key":"cost","value":"7"}]}`, authTarget{
				Action: "ecs:CreateService", Resources: []string{arnBase + "service/prod/new"},
				Conditions: map[string][]string{condCluster: {prod}, condTaskDefinition: {arnBase + "task-definition/web:1"},
					condHostAccess: {"false"}, "aws:RequestTag/team": {"apps"}, "aws:RequestTag/cost": {"7"}, condTagKeys: {"team", "cost"}},
				Also: []authTarget{{Action: "ecs:TagResource", Resources: []string{arnBase + "service/prod/new"},
					Conditions: map[string][]string{condCreateAction: {"CreateService"}, "aws:RequestTag/team": {"apps"},
						"aws:RequestTag/cost": {"7"}, condTagKeys: {"team", "cost"}, condCluster: {prod}}}}}},
		{"UpdateService keeping its task definition", "UpdateService", `{"service":"` + arnBase + `service/prod/ops","desiredCount":3}`, authTarget{
			Action: "ecs:UpdateService", Resources: []string{arnBase + "service/prod/ops"},
			Conditions: map[string][]string{condCluster: {prod}, condTaskDefinition: {arnBase + "task-definition/root:1"},
				condHostAccess: {"true"}, condHostAccessKinds: {"hostVolume", "dockerSocket"},
				"aws:ResourceTag/tier": {"back"}, "ecs:ResourceTag/tier": {"back"}},
			Also: []authTarget{{Action: "capstan:HostAccess", Resources: []string{arnBase + "task-definition/root:1"},
				Conditions: map[string][]string{condHostAccess: {"true"}, condHostAccessKinds: {"hostVolume", "dockerSocket"}, condCluster: {prod}}}}}},
		{"UpdateDaemon", "UpdateDaemon",
			`{"daemonArn":"` + agent + `","daemonTaskDefinitionArn":"agent","capacityProviderArns":["` + arnBase + `capacity-provider/prod-mi"]}`, authTarget{
				Action: "ecs:UpdateDaemon", Resources: []string{agent},
				Conditions: map[string][]string{condCluster: {prod}, condDaemon: {agent},
					condCapacityProvider: {arnBase + "capacity-provider/prod-mi"}, condDaemonTaskDefinition: {arnBase + "daemon-task-definition/agent:1"},
					"aws:ResourceTag/owner": {"platform"}, "ecs:ResourceTag/owner": {"platform"}}}},
		{"DescribeTasks with several task ARNs", "DescribeTasks",
			`{"cluster":"prod","tasks":["` + arnBase + `task/prod/` + taskA + `","` + taskB + `"]}`, authTarget{
				Action: "ecs:DescribeTasks", Resources: []string{arnBase + "task/prod/" + taskA, arnBase + "task/prod/" + taskB},
				Conditions: map[string][]string{condCluster: {prod}}}},
		{"ListServices", "ListServices", `{"cluster":"prod"}`, authTarget{
			Action: "ecs:ListServices", Resources: []string{"*"}, Conditions: map[string][]string{condCluster: {prod}}}},
		{"ListServices of the default cluster", "ListServices", `{}`, authTarget{
			Action: "ecs:ListServices", Resources: []string{"*"}, Conditions: map[string][]string{condCluster: {cluster("default")}}}},
		{"TagResource on a service", "TagResource",
			`{"resourceArn":"` + arnBase + `service/prod/api","tags":[{"key":"tier","value":"edge"}]}`, authTarget{
				Action: "ecs:TagResource", Resources: []string{arnBase + "service/prod/api"},
				Conditions: map[string][]string{condCluster: {prod}, "aws:RequestTag/tier": {"edge"}, condTagKeys: {"tier"},
					"aws:ResourceTag/tier": {"front"}, "ecs:ResourceTag/tier": {"front"}}}},
		{"DescribeServices with different tags", "DescribeServices", `{"cluster":"prod","services":["api","ops"]}`, authTarget{
			Action: "ecs:DescribeServices", Resources: []string{arnBase + "service/prod/api", arnBase + "service/prod/ops"},
			Conditions: map[string][]string{condCluster: {prod}},
			PerResource: map[string]map[string][]string{
				arnBase + "service/prod/api": {"aws:ResourceTag/tier": {"front"}, "ecs:ResourceTag/tier": {"front"}},
				arnBase + "service/prod/ops": {"aws:ResourceTag/tier": {"back"}, "ecs:ResourceTag/tier": {"back"}},
			}}},
		{"DescribeDaemonRevisions across clusters", "DescribeDaemonRevisions",
			`{"daemonRevisionArns":["` + arnBase + `daemon-revision/prod/agent/r1","` + arnBase + `daemon-revision/dev/agent/r1"]}`, authTarget{
				Action:    "ecs:DescribeDaemonRevisions",
				Resources: []string{agent, arnBase + "daemon-revision/prod/agent/r1", arnBase + "daemon/dev/agent", arnBase + "daemon-revision/dev/agent/r1"},
				PerResource: map[string]map[string][]string{
					agent: {condCluster: {prod}, condDaemon: {agent},
						"aws:ResourceTag/owner": {"platform"}, "ecs:ResourceTag/owner": {"platform"}},
					arnBase + "daemon-revision/prod/agent/r1": {condCluster: {prod}, condDaemon: {agent}},
					arnBase + "daemon/dev/agent": {condCluster: {cluster("dev")}, condDaemon: {arnBase + "daemon/dev/agent"},
						"aws:ResourceTag/owner": {"dev"}, "ecs:ResourceTag/owner": {"dev"}},
					arnBase + "daemon-revision/dev/agent/r1": {condCluster: {cluster("dev")}, condDaemon: {arnBase + "daemon/dev/agent"}},
				}}},
		{"RegisterTaskDefinition of an existing family, asking for host access", "RegisterTaskDefinition",
			`{"family":"web","pidMode":"host","containerDefinitions":[{"name":"a","image":"i","privileged":true,` +
				`"linuxParameters":{"devices":[{"hostPath":"/dev/kmsg"}]}}]}`, authTarget{
				Action: "ecs:RegisterTaskDefinition", Resources: []string{arnBase + "task-definition/web:2"},
				Conditions: map[string][]string{condPrivileged: {"true"}, condHostAccess: {"true"},
					condHostAccessKinds: {"privileged", "pidMode:host", "devices"}},
				Also: []authTarget{{Action: "capstan:HostAccess", Resources: []string{arnBase + "task-definition/web:2"},
					Conditions: map[string][]string{condHostAccess: {"true"}, condHostAccessKinds: {"privileged", "pidMode:host", "devices"}}}}}},
		{"RegisterTaskDefinition of a new family", "RegisterTaskDefinition",
			`{"family":"fresh","containerDefinitions":[{"name":"a","image":"i"}]}`, authTarget{
				Action: "ecs:RegisterTaskDefinition", Resources: []string{arnBase + "task-definition/fresh:1"},
				Conditions: map[string][]string{condPrivileged: {"false"}, condHostAccess: {"false"}}}},
		{"RollbackDaemon to the revision before", "RollbackDaemon", `{"daemonArn":"` + agent + `"}`, authTarget{
			Action: "ecs:UpdateDaemon", Resources: []string{agent},
			Conditions: map[string][]string{condCluster: {prod}, condDaemon: {agent},
				condCapacityProvider: {arnBase + "capacity-provider/prod-mi"}, condDaemonTaskDefinition: {arnBase + "daemon-task-definition/agent:1"},
				"aws:ResourceTag/owner": {"platform"}, "ecs:ResourceTag/owner": {"platform"}}}},
		{"ListEvents", "ListEvents", `{"cluster":"dev"}`, authTarget{
			Action: "capstan:ListEvents", Resources: []string{cluster("dev")}, Conditions: map[string][]string{condCluster: {cluster("dev")}}}},
		{"ListAuditEvents", "ListAuditEvents", `{}`, authTarget{Action: "capstan:ListAuditEvents", Resources: []string{"*"}}},
		{"GetTaskLogs", "GetTaskLogs", `{"cluster":"dev","task":"` + taskA + `"}`, authTarget{
			Action: "capstan:GetTaskLogs", Resources: []string{arnBase + "task/dev/" + taskA}, Conditions: map[string][]string{condCluster: {cluster("dev")}}}},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			got, err := authOf(t, s, row.op, row.body)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, row.want) {
				t.Errorf("got  %+v\nwant %+v", got, row.want)
			}
		})
	}
}

// requests gives every resource its own values and the shared ones, and
// the further checks after the call's own.
func TestAuthTargetRequests(t *testing.T) {
	s := authFixture(t)
	tg, err := authOf(t, s, "DescribeServices", `{"cluster":"prod","services":["api","ops"]}`)
	if err != nil {
		t.Fatal(err)
	}
	rs := tg.requests()
	if len(rs) != 2 {
		t.Fatalf("%d requests", len(rs))
	}
	for i, tier := range []string{"front", "back"} {
		c := rs[i].Conditions
		if rs[i].Action != "ecs:DescribeServices" || !slices.Equal(c["aws:ResourceTag/tier"], []string{tier}) ||
			!slices.Equal(c[condCluster], []string{arnBase + "cluster/prod"}) {
			t.Errorf("request %d: %+v", i, rs[i])
		}
	}
	if _, ok := tg.Conditions["aws:ResourceTag/tier"]; ok {
		t.Error("a per-resource tag leaked into the shared conditions")
	}
	tg, err = authOf(t, s, "CreateCluster", `{"clusterName":"x","tags":[{"key":"k","value":"v"}]}`)
	if err != nil {
		t.Fatal(err)
	}
	rs = tg.requests()
	if len(rs) != 2 || rs[0].Action != "ecs:CreateCluster" || rs[1].Action != "ecs:TagResource" ||
		!slices.Equal(rs[1].Conditions[condCreateAction], []string{"CreateCluster"}) {
		t.Errorf("requests %+v", rs)
	}
}

// A malformed reference is the request's fault, as the operation would
// say; a task of another cluster is one.
func TestAuthTargetRefusesMalformedReferences(t *testing.T) {
	s := authFixture(t)
	for op, body := range map[string]string{
		"DescribeTasks":           `{"cluster":"prod","tasks":["` + arnBase + `task/dev/` + taskA + `"]}`,
		"RunTask":                 `{"taskDefinition":"` + arnBase + `daemon-task-definition/agent:1"}`,
		"UpdateDaemon":            `{"daemonArn":"agent"}`,
		"ListServices":            `{"cluster":"arn:aws:ecs:eu-west-1:123456789012:cluster/prod"}`,
		"CreateDaemon":            `{"daemonName":"a/b","clusterArn":"prod"}`,
		"DescribeDaemonRevisions": `{"daemonRevisionArns":["` + arnBase + `daemon/prod/agent"]}`,
	} {
		if _, err := authOf(t, s, op, body); fault.KindOf(err) != fault.InvalidParameter {
			t.Errorf("%s %s: got %v, want an invalid parameter", op, body, err)
		}
	}
	if _, err := s.authTargetOf(context.Background(), "RunTask", &shapes.StopTaskRequest{}); err == nil {
		t.Error("a request of the wrong type was accepted")
	}
	if _, err := s.authTargetOf(context.Background(), "NoSuchOperation", &struct{}{}); err == nil {
		t.Error("an unknown operation was accepted")
	}
}

// The table in docs/permissions.md is the one authTable renders;
// CAPSTAN_UPDATE_DOCS=1 rewrites it.
func TestAuthTableDocs(t *testing.T) {
	const path = "../../docs/permissions.md"
	const begin, end = "<!-- authtable: begin (generated by TestAuthTableDocs in internal/ops) -->\n", "<!-- authtable: end -->\n"
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i, j := bytes.Index(doc, []byte(begin)), bytes.Index(doc, []byte(end))
	if i < 0 || j < i {
		t.Fatalf("%s has no generated table between %q and %q", path, begin, end)
	}
	table := renderAuthTable()
	if string(doc[i+len(begin):j]) == table {
		return
	}
	if os.Getenv("CAPSTAN_UPDATE_DOCS") == "1" {
		out := append(append(append([]byte{}, doc[:i+len(begin)]...), table...), doc[j:]...)
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("the table in %s is out of date; run CAPSTAN_UPDATE_DOCS=1 go test -run TestAuthTableDocs ./internal/ops/", path)
}

// renderAuthTable is authTable as markdown: ECS operations, then the
// extensions.
func renderAuthTable() string {
	var names, exts []string
	for op := range authTable {
		if _, ok := shapes.Operations[op]; ok {
			names = append(names, op)
		} else {
			exts = append(exts, op)
		}
	}
	sort.Strings(names)
	sort.Strings(exts)
	var b strings.Builder
	b.WriteString("| operation | action | resources | condition keys |\n|---|---|---|---|\n")
	row := func(name string, sp authSpec) {
		action := "`" + sp.action + "`"
		if len(sp.also) > 0 {
			action += "; also " + strings.Join(sp.also, "; ")
		}
		var ks []string
		for _, k := range sp.keys {
			ks = append(ks, "`"+k+"`")
		}
		for _, k := range sp.extra {
			ks = append(ks, "`"+k+"`†")
		}
		keys := strings.Join(ks, ", ")
		if keys == "" {
			keys = "none"
		}
		b.WriteString("| `" + name + "` | " + action + " | " + sp.resources + " | " + keys + " |\n")
	}
	for _, n := range names {
		row(n, authTable[n])
	}
	for _, n := range exts {
		row(api.ExtensionPrefix+n, authTable[n])
	}
	return b.String()
}

// Samples for the ECS-fidelity operations, some sharing one body.
func init() {
	authSamples["PutAttributes"] = `{"cluster":"prod","attributes":[{"name":"k","value":"v","targetId":"` + taskA + `"}]}`
	authSamples["DeleteAttributes"] = `{"cluster":"prod","attributes":[{"name":"k","targetId":"` + taskA + `"}]}`
	authSamples["ListAttributes"] = `{"cluster":"prod","targetType":"container-instance"}`
	authSamples["PutAccountSetting"] = `{"name":"containerInsights","value":"enabled"}`
	authSamples["PutAccountSettingDefault"] = `{"name":"containerInsights","value":"enabled"}`
	authSamples["DeleteAccountSetting"] = `{"name":"containerInsights"}`
	authSamples["ListAccountSettings"] = `{}`
	authSamples["UpdateCluster"] = `{"cluster":"prod","settings":[{"name":"containerInsights","value":"enabled"}]}`
	authSamples["GetTaskProtection"] = `{"cluster":"prod","tasks":["` + taskA + `"]}`
	authSamples["UpdateTaskProtection"] = `{"cluster":"prod","tasks":["` + taskA + `"],"protectionEnabled":true}`
	authSamples["ListServiceDeployments"] = `{"cluster":"prod","service":"api"}`
	authSamples["DescribeServiceDeployments"] = `{"serviceDeploymentArns":["` + arnBase + `service-deployment/prod/api/1"]}`
	authSamples["DescribeServiceRevisions"] = `{"serviceRevisionArns":["` + arnBase + `service-revision/prod/api/1"]}`
	authSamples["StopServiceDeployment"] = `{"serviceDeploymentArn":"` + arnBase + `service-deployment/prod/api/1"}`
	for _, op := range []string{"CreateTaskSet", "DeleteTaskSet", "DescribeTaskSets", "UpdateTaskSet", "UpdateServicePrimaryTaskSet"} {
		authSamples[op] = `{"cluster":"prod","service":"api","taskDefinition":"web","taskSet":"ts","primaryTaskSet":"ts"}`
	}
	authSamples["ContinueServiceDeployment"] = `{"serviceDeploymentArn":"` + arnBase + `service-deployment/prod/api/1","hookId":"h"}`
	authSamples["ExecuteCommand"] = `{"cluster":"prod","task":"` + taskA + `","command":"sh","interactive":true}`
	authSamples["ListServicesByNamespace"] = `{"namespace":"ns"}`
	authSamples["SubmitTaskStateChange"] = `{"cluster":"prod"}`
	authSamples["SubmitContainerStateChange"] = `{"cluster":"prod"}`
	authSamples["SubmitAttachmentStateChanges"] = `{"cluster":"prod","attachments":[]}`
	authSamples["UpdateContainerAgent"] = `{"cluster":"prod","containerInstance":"` + taskA + `"}`
	authSamples["CreateExpressGatewayService"] = `{}`
	authSamples["DescribeExpressGatewayService"] = `{"serviceArn":"` + arnBase + `service/prod/api"}`
	authSamples["UpdateExpressGatewayService"] = `{"serviceArn":"` + arnBase + `service/prod/api"}`
	authSamples["DeleteExpressGatewayService"] = `{"serviceArn":"` + arnBase + `service/prod/api"}`
	authSamples["UpdateClusterSettings"] = `{"cluster":"prod","settings":[{"name":"containerInsights","value":"enabled"}]}`
}
