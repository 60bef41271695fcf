package ops_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/store"
	"github.com/capstanhq/capstan/internal/testenv"
)

const dtdBase = "arn:aws:ecs:us-east-1:123456789012:daemon-task-definition/"

// dtdMetricsAgent is a CloudWatch-agent-like daemon: privileged, reading the
// host's /proc and /sys read-only, in the host PID and IPC namespaces.
func dtdMetricsAgent(family string) *ecs.RegisterDaemonTaskDefinitionInput {
	return &ecs.RegisterDaemonTaskDefinitionInput{
		Family: aws.String(family),
		Cpu:    aws.String("1024"),
		Memory: aws.String("512"),
		Volumes: []types.DaemonVolume{
			{Name: aws.String("proc"), Host: &types.HostVolumeProperties{SourcePath: aws.String("/proc")}},
			{Name: aws.String("sys"), Host: &types.HostVolumeProperties{SourcePath: aws.String("/sys")}},
		},
		ContainerDefinitions: []types.DaemonContainerDefinition{{
			Name:       aws.String("agent"),
			Image:      aws.String("public.ecr.aws/cloudwatch-agent/cloudwatch-agent:latest"),
			Privileged: aws.Bool(true),
			MountPoints: []types.MountPoint{
				{SourceVolume: aws.String("proc"), ContainerPath: aws.String("/rootfs/proc"), ReadOnly: aws.Bool(true)},
				{SourceVolume: aws.String("sys"), ContainerPath: aws.String("/rootfs/sys"), ReadOnly: aws.Bool(true)},
			},
		}},
		PidMode: types.DaemonPidModeShared,
		IpcMode: types.DaemonIpcModeShared,
	}
}

func dtdRegister(t *testing.T, c *ecs.Client, in *ecs.RegisterDaemonTaskDefinitionInput) string {
	t.Helper()
	out, err := c.RegisterDaemonTaskDefinition(context.Background(), in)
	if err != nil {
		t.Fatalf("register %s: %v", aws.ToString(in.Family), err)
	}
	return aws.ToString(out.DaemonTaskDefinitionArn)
}

func dtdDescribe(t *testing.T, c *ecs.Client, ref string) *types.DaemonTaskDefinition {
	t.Helper()
	out, err := c.DescribeDaemonTaskDefinition(context.Background(), &ecs.DescribeDaemonTaskDefinitionInput{DaemonTaskDefinition: aws.String(ref)})
	if err != nil {
		t.Fatalf("describe %s: %v", ref, err)
	}
	return out.DaemonTaskDefinition
}

func dtdDelete(t *testing.T, c *ecs.Client, ref string) {
	t.Helper()
	out, err := c.DeleteDaemonTaskDefinition(context.Background(), &ecs.DeleteDaemonTaskDefinitionInput{DaemonTaskDefinition: aws.String(ref)})
	if err != nil {
		t.Fatalf("delete %s: %v", ref, err)
	}
	if aws.ToString(out.DaemonTaskDefinitionArn) == "" {
		t.Fatalf("delete %s returned no ARN", ref)
	}
}

func TestDaemonTaskDefinitionLifecycle(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartServer(t, "")
	c := srv.ECS()

	in := dtdMetricsAgent("cloudwatch-agent")
	in.Tags = []types.Tag{{Key: aws.String("team"), Value: aws.String("observability")}}
	arn := dtdRegister(t, c, in)
	if arn != dtdBase+"cloudwatch-agent:1" {
		t.Fatalf("arn %s", arn)
	}
	for _, ref := range []string{"cloudwatch-agent", "cloudwatch-agent:1", arn} {
		td := dtdDescribe(t, c, ref)
		if aws.ToString(td.DaemonTaskDefinitionArn) != arn || td.Revision != 1 || td.Status != types.DaemonTaskDefinitionStatusActive {
			t.Fatalf("describe %s: %+v", ref, td)
		}
	}
	td := dtdDescribe(t, c, arn)
	if aws.ToString(td.Cpu) != "1024" || aws.ToString(td.Memory) != "512" || td.PidMode != types.DaemonPidModeShared || td.IpcMode != types.DaemonIpcModeShared {
		t.Fatalf("task settings: cpu %s memory %s pid %s ipc %s", aws.ToString(td.Cpu), aws.ToString(td.Memory), td.PidMode, td.IpcMode)
	}
	cd := td.ContainerDefinitions[0]
	if !aws.ToBool(cd.Privileged) || !aws.ToBool(cd.Essential) || len(cd.MountPoints) != 2 || !aws.ToBool(cd.MountPoints[1].ReadOnly) {
		t.Fatalf("container: %+v", cd)
	}
	if len(td.Volumes) != 2 || aws.ToString(td.Volumes[0].Host.SourcePath) != "/proc" || aws.ToString(td.Volumes[1].Host.SourcePath) != "/sys" {
		t.Fatalf("volumes: %+v", td.Volumes)
	}
	if aws.ToString(td.RegisteredBy) != "arn:aws:iam::123456789012:user/AKIDCAPSTANTEST" || td.RegisteredAt == nil {
		t.Fatalf("registered %v by %s", td.RegisteredAt, aws.ToString(td.RegisteredBy))
	}
	tags, err := c.ListTagsForResource(ctx, &ecs.ListTagsForResourceInput{ResourceArn: aws.String(arn)})
	if err != nil || len(tags.Tags) != 1 || aws.ToString(tags.Tags[0].Value) != "observability" {
		t.Fatalf("tags: %+v %v", tags, err)
	}

	// Without a size the daemon shares what is left; an older client's
	// request without pidMode and ipcMode is fine.
	in2 := dtdMetricsAgent("cloudwatch-agent")
	in2.Cpu, in2.Memory, in2.PidMode, in2.IpcMode = nil, nil, "", ""
	in2.ContainerDefinitions[0].Memory = aws.Int32(256)
	arn2 := dtdRegister(t, c, in2)
	if arn2 != dtdBase+"cloudwatch-agent:2" {
		t.Fatalf("second arn %s", arn2)
	}

	for _, ref := range []string{"nope", "cloudwatch-agent:7", dtdBase + "nope:1"} {
		_, err = c.DescribeDaemonTaskDefinition(ctx, &ecs.DescribeDaemonTaskDefinitionInput{DaemonTaskDefinition: aws.String(ref)})
		wantECSError(t, err, "ClientException", "daemonTaskDefinition")
	}
	_, err = c.DescribeDaemonTaskDefinition(ctx, &ecs.DescribeDaemonTaskDefinitionInput{DaemonTaskDefinition: aws.String(tdBase + "cloudwatch-agent:1")})
	wantECSError(t, err, "InvalidParameterException", "daemonTaskDefinition")

	// Delete: a revision is required, and only an ACTIVE one. Nothing uses
	// revision 1, so it is reported DELETE_IN_PROGRESS and is DELETED next.
	_, err = c.DeleteDaemonTaskDefinition(ctx, &ecs.DeleteDaemonTaskDefinitionInput{DaemonTaskDefinition: aws.String("cloudwatch-agent")})
	wantECSError(t, err, "InvalidParameterException", "daemonTaskDefinition", "revision")
	dtdDelete(t, c, "cloudwatch-agent:1")
	gone := dtdDescribe(t, c, arn)
	if gone.Status != types.DaemonTaskDefinitionStatusDeleted || gone.DeleteRequestedAt == nil {
		t.Fatalf("after delete: status %s deleteRequestedAt %v", gone.Status, gone.DeleteRequestedAt)
	}
	w := ecs.NewDaemonTaskDefinitionDeletedWaiter(c, func(o *ecs.DaemonTaskDefinitionDeletedWaiterOptions) {
		o.MinDelay, o.MaxDelay = time.Millisecond, time.Millisecond
	})
	if err := w.Wait(ctx, &ecs.DescribeDaemonTaskDefinitionInput{DaemonTaskDefinition: aws.String(arn)}, 10*time.Second); err != nil {
		t.Fatalf("deleted waiter: %v", err)
	}
	_, err = c.DeleteDaemonTaskDefinition(ctx, &ecs.DeleteDaemonTaskDefinitionInput{DaemonTaskDefinition: aws.String(arn)})
	wantECSError(t, err, "ClientException", "DELETED")
	if got := dtdDescribe(t, c, "cloudwatch-agent").Revision; got != 2 {
		t.Fatalf("latest ACTIVE after delete is %d", got)
	}
	// A DELETED revision has no tags left to read.
	_, err = c.ListTagsForResource(ctx, &ecs.ListTagsForResourceInput{ResourceArn: aws.String(arn)})
	wantECSError(t, err, "ResourceNotFoundException")

	// Revision numbers are never reused, across a restart too.
	srv = srv.Restart(t)
	c = srv.ECS()
	if got := dtdDescribe(t, c, arn).Status; got != types.DaemonTaskDefinitionStatusDeleted {
		t.Fatalf("after restart: %s", got)
	}
	if got := aws.ToString(dtdDescribe(t, c, "cloudwatch-agent").DaemonTaskDefinitionArn); got != arn2 {
		t.Fatalf("after restart latest is %s", got)
	}
	if got := dtdRegister(t, c, dtdMetricsAgent("cloudwatch-agent")); got != dtdBase+"cloudwatch-agent:3" {
		t.Fatalf("after restart registered %s", got)
	}
}

// A revision a daemon still uses stays DELETE_IN_PROGRESS until the daemon
// is gone; new daemons cannot use it meanwhile.
func TestDaemonTaskDefinitionDeleteWaitsForDaemons(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartServer(t, "")
	c := srv.ECS()

	v1 := dtdRegister(t, c, dtdMetricsAgent("agent"))
	v2 := dtdRegister(t, c, dtdMetricsAgent("agent"))
	spare := dtdRegister(t, c, dtdMetricsAgent("spare"))
	// The daemon runs v2 now; one of its revisions still refers to v1.
	d := store.Daemon{Name: "agent", Cluster: "default", Status: "ACTIVE", Spec: store.DaemonSpec{TaskDefinitionArn: v2}}
	rev := store.DaemonRevision{ID: "r1", DaemonRevision: shapes.DaemonRevision{DaemonTaskDefinitionArn: v1}}
	// A revision left behind by a daemon that no longer exists holds nothing.
	stale := store.DaemonRevision{ID: "r0", DaemonRevision: shapes.DaemonRevision{DaemonTaskDefinitionArn: spare}}
	_, err := srv.Store.Txn().
		Create(store.DaemonKey("default", "agent"), d).
		Create(store.DaemonRevisionKey("default", "agent", "r1"), rev).
		Create(store.DaemonRevisionKey("default", "old", "r0"), stale).
		Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}

	dtdDelete(t, c, v1)
	dtdDelete(t, c, v2)
	for _, arn := range []string{v1, v2} {
		td := dtdDescribe(t, c, arn)
		if td.Status != types.DaemonTaskDefinitionStatusDeleteInProgress || td.DeleteRequestedAt == nil {
			t.Fatalf("%s in use: status %s", arn, td.Status)
		}
	}
	if _, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{}); err != nil {
		t.Fatal(err)
	}
	_, err = c.CreateDaemon(ctx, &ecs.CreateDaemonInput{DaemonName: aws.String("another"), DaemonTaskDefinitionArn: aws.String(v2),
		CapacityProviderArns: []string{"arn:aws:ecs:us-east-1:123456789012:capacity-provider/mi"}})
	wantECSError(t, err, "ClientException", "daemonTaskDefinitionArn", "DELETE_IN_PROGRESS")
	list, err := c.ListDaemonTaskDefinitions(ctx, &ecs.ListDaemonTaskDefinitionsInput{Status: types.DaemonTaskDefinitionStatusFilterDeleteInProgress})
	if err != nil || len(list.DaemonTaskDefinitions) != 2 || list.DaemonTaskDefinitions[0].DeleteRequestedAt == nil {
		t.Fatalf("DELETE_IN_PROGRESS list: %+v %v", list, err)
	}

	// Once the daemon is gone, the next sweep (here: another delete)
	// completes both.
	cur, err := store.Get[store.Daemon](ctx, srv.Store, store.DaemonKey("default", "agent"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Store.Txn().Delete(cur.Key, cur.Rev).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	dtdDelete(t, c, spare)
	for _, arn := range []string{v1, v2, spare} {
		if got := dtdDescribe(t, c, arn).Status; got != types.DaemonTaskDefinitionStatusDeleted {
			t.Fatalf("%s after the daemon went: %s", arn, got)
		}
	}
}

func TestDaemonTaskDefinitionValidation(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartServer(t, "")
	c := srv.ECS()

	rows := []struct {
		name   string
		mutate func(in *ecs.RegisterDaemonTaskDefinitionInput)
		code   string
		field  string
	}{
		{"bad family", func(in *ecs.RegisterDaemonTaskDefinitionInput) { in.Family = aws.String("agent:1") }, "InvalidParameterException", "family"},
		{"relative host path", func(in *ecs.RegisterDaemonTaskDefinitionInput) {
			in.Volumes[0].Host.SourcePath = aws.String("proc")
		}, "InvalidParameterException", "volumes[0].host.sourcePath"},
		{"missing container name", func(in *ecs.RegisterDaemonTaskDefinitionInput) {
			in.ContainerDefinitions[0].Name = nil
		}, "ClientException", "containerDefinitions[0].name"},
		{"unknown volume", func(in *ecs.RegisterDaemonTaskDefinitionInput) {
			in.ContainerDefinitions[0].MountPoints[0].SourceVolume = aws.String("dev")
		}, "InvalidParameterException", "containerDefinitions[0].mountPoints[0].sourceVolume"},
		{"secrets", func(in *ecs.RegisterDaemonTaskDefinitionInput) {
			in.ContainerDefinitions[0].Secrets = []types.Secret{{Name: aws.String("K"), ValueFrom: aws.String("k")}}
		}, "UnsupportedFeatureException", "containerDefinitions[0].secrets"},
		{"tiny memory", func(in *ecs.RegisterDaemonTaskDefinitionInput) { in.Memory = aws.String("4") }, "InvalidParameterException", "memory"},
		{"bad pidMode", func(in *ecs.RegisterDaemonTaskDefinitionInput) { in.PidMode = "host" }, "InvalidParameterException", "pidMode"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			in := dtdMetricsAgent("checked")
			row.mutate(in)
			_, err := c.RegisterDaemonTaskDefinition(ctx, in)
			wantECSError(t, err, row.code, row.field)
		})
	}
	if got := dtdRegister(t, c, dtdMetricsAgent("checked")); got != dtdBase+"checked:1" {
		t.Fatalf("first accepted revision %s", got)
	}
}

// dtdList follows nextToken by hand: the daemon lists have no
// paginator in the SDK.
func dtdList(t *testing.T, c *ecs.Client, in ecs.ListDaemonTaskDefinitionsInput) (arns []string, pages int) {
	t.Helper()
	for {
		out, err := c.ListDaemonTaskDefinitions(context.Background(), &in)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, s := range out.DaemonTaskDefinitions {
			arns = append(arns, aws.ToString(s.Arn))
		}
		if out.NextToken == nil {
			return arns, pages
		}
		in.NextToken = out.NextToken
	}
}

func dtdArns(refs ...string) []string {
	out := make([]string, len(refs))
	for i, r := range refs {
		out[i] = dtdBase + r
	}
	return out
}

func TestListDaemonTaskDefinitions(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartServer(t, "")
	c := srv.ECS()

	for _, f := range []string{"logs", "metrics", "metrics-gpu", "metrics", "logs", "metrics"} {
		dtdRegister(t, c, dtdMetricsAgent(f))
	}
	dtdDelete(t, c, "metrics:3") // the last registered revision of metrics
	dtdDelete(t, c, "logs:1")

	got, pages := dtdList(t, c, ecs.ListDaemonTaskDefinitionsInput{})
	if want := dtdArns("logs:2", "metrics:1", "metrics:2", "metrics-gpu:1"); !slices.Equal(got, want) || pages != 1 {
		t.Fatalf("default list (%d pages): %v", pages, got)
	}
	all := dtdArns("logs:1", "logs:2", "metrics:1", "metrics:2", "metrics:3", "metrics-gpu:1")
	got, pages = dtdList(t, c, ecs.ListDaemonTaskDefinitionsInput{Status: types.DaemonTaskDefinitionStatusFilterAll, MaxResults: aws.Int32(4)})
	if !slices.Equal(got, all) || pages != 2 {
		t.Fatalf("ALL in pages of 4 (%d pages): %v", pages, got)
	}
	desc := slices.Clone(all)
	slices.Reverse(desc)
	got, pages = dtdList(t, c, ecs.ListDaemonTaskDefinitionsInput{Status: types.DaemonTaskDefinitionStatusFilterAll, Sort: types.SortOrderDesc, MaxResults: aws.Int32(1)})
	if !slices.Equal(got, desc) || pages != 6 {
		t.Fatalf("ALL DESC one by one (%d pages): %v", pages, got)
	}
	got, _ = dtdList(t, c, ecs.ListDaemonTaskDefinitionsInput{Status: types.DaemonTaskDefinitionStatusFilterDeleteInProgress})
	if len(got) != 0 {
		t.Fatalf("nothing uses the deleted revisions, yet DELETE_IN_PROGRESS lists %v", got)
	}

	got, _ = dtdList(t, c, ecs.ListDaemonTaskDefinitionsInput{FamilyPrefix: aws.String("metrics")})
	if want := dtdArns("metrics:1", "metrics:2", "metrics-gpu:1"); !slices.Equal(got, want) {
		t.Fatalf("familyPrefix metrics: %v", got)
	}
	got, _ = dtdList(t, c, ecs.ListDaemonTaskDefinitionsInput{Family: aws.String("metrics")})
	if want := dtdArns("metrics:1", "metrics:2"); !slices.Equal(got, want) {
		t.Fatalf("family metrics: %v", got)
	}
	got, _ = dtdList(t, c, ecs.ListDaemonTaskDefinitionsInput{Family: aws.String("metrics-gpu"), FamilyPrefix: aws.String("logs")})
	if len(got) != 0 {
		t.Fatalf("family and a prefix it lacks: %v", got)
	}

	// LAST_REGISTERED: one revision per family, the newest, then the status
	// filter; metrics' newest is DELETED, so it shows under ALL only.
	got, _ = dtdList(t, c, ecs.ListDaemonTaskDefinitionsInput{Revision: types.DaemonTaskDefinitionRevisionFilterLastRegistered})
	if want := dtdArns("logs:2", "metrics-gpu:1"); !slices.Equal(got, want) {
		t.Fatalf("LAST_REGISTERED: %v", got)
	}
	got, _ = dtdList(t, c, ecs.ListDaemonTaskDefinitionsInput{Revision: types.DaemonTaskDefinitionRevisionFilterLastRegistered, Status: types.DaemonTaskDefinitionStatusFilterAll, Sort: types.SortOrderDesc})
	if want := dtdArns("metrics-gpu:1", "metrics:3", "logs:2"); !slices.Equal(got, want) {
		t.Fatalf("LAST_REGISTERED ALL DESC: %v", got)
	}

	out, err := c.ListDaemonTaskDefinitions(ctx, &ecs.ListDaemonTaskDefinitionsInput{Status: types.DaemonTaskDefinitionStatusFilterAll})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range out.DaemonTaskDefinitions {
		if s.RegisteredAt == nil || aws.ToString(s.RegisteredBy) == "" || (s.Status == types.DaemonTaskDefinitionStatusDeleted) != (s.DeleteRequestedAt != nil) {
			t.Fatalf("summary %+v", s)
		}
	}

	first, err := c.ListDaemonTaskDefinitions(ctx, &ecs.ListDaemonTaskDefinitionsInput{MaxResults: aws.Int32(1)})
	if err != nil || first.NextToken == nil {
		t.Fatalf("first page: %+v %v", first, err)
	}
	_, err = c.ListDaemonTaskDefinitions(ctx, &ecs.ListDaemonTaskDefinitionsInput{NextToken: first.NextToken, Family: aws.String("logs")})
	wantECSError(t, err, "InvalidParameterException", "nextToken")
	_, err = c.ListDaemonTaskDefinitions(ctx, &ecs.ListDaemonTaskDefinitionsInput{MaxResults: aws.Int32(101)})
	wantECSError(t, err, "InvalidParameterException", "maxResults")
	_, err = c.ListDaemonTaskDefinitions(ctx, &ecs.ListDaemonTaskDefinitionsInput{Revision: "FIRST"})
	wantECSError(t, err, "InvalidParameterException", "revision")
}
