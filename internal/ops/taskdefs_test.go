package ops_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/aws/smithy-go"

	"github.com/capstanhq/capstan/internal/testenv"
)

const tdBase = "arn:aws:ecs:us-east-1:123456789012:task-definition/"

// ecsErrorOf returns the ECS error code and message of err, failing the test
// if err is not an API error.
func ecsErrorOf(t *testing.T, err error) (code, msg string) {
	t.Helper()
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("want an API error, got %v", err)
	}
	return ae.ErrorCode(), ae.ErrorMessage()
}

// wantECSError fails unless err is an ECS error with the given code whose
// message mentions every one of words.
func wantECSError(t *testing.T, err error, code string, words ...string) {
	t.Helper()
	got, msg := ecsErrorOf(t, err)
	if got != code {
		t.Fatalf("want %s, got %s: %s", code, got, msg)
	}
	for _, w := range words {
		if !strings.Contains(msg, w) {
			t.Fatalf("%s message %q does not mention %q", code, msg, w)
		}
	}
}

// wantECSExact fails unless err is an ECS error with exactly this code
// and message: ECS's own, which scripts compare whole.
func wantECSExact(t *testing.T, err error, code, msg string) {
	t.Helper()
	gotCode, gotMsg := ecsErrorOf(t, err)
	if gotCode != code || gotMsg != msg {
		t.Fatalf("got %s %q, want %s %q", gotCode, gotMsg, code, msg)
	}
}

func tdWeb(family string) *ecs.RegisterTaskDefinitionInput {
	return &ecs.RegisterTaskDefinitionInput{
		Family: aws.String(family),
		ContainerDefinitions: []types.ContainerDefinition{{
			Name:         aws.String("web"),
			Image:        aws.String("nginx:1.27"),
			Memory:       aws.Int32(128),
			PortMappings: []types.PortMapping{{ContainerPort: aws.Int32(80)}},
		}},
	}
}

func tdRegister(t *testing.T, c *ecs.Client, in *ecs.RegisterTaskDefinitionInput) *types.TaskDefinition {
	t.Helper()
	out, err := c.RegisterTaskDefinition(context.Background(), in)
	if err != nil {
		t.Fatalf("register %s: %v", aws.ToString(in.Family), err)
	}
	return out.TaskDefinition
}

func tdDescribe(t *testing.T, c *ecs.Client, ref string) *types.TaskDefinition {
	t.Helper()
	out, err := c.DescribeTaskDefinition(context.Background(), &ecs.DescribeTaskDefinitionInput{TaskDefinition: aws.String(ref)})
	if err != nil {
		t.Fatalf("describe %s: %v", ref, err)
	}
	return out.TaskDefinition
}

func TestTaskDefinitionLifecycle(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartServer(t, "")
	c := srv.ECS()

	in := tdWeb("web")
	in.Cpu, in.Memory = aws.String("0.5 vCPU"), aws.String("1GB")
	in.Tags = []types.Tag{{Key: aws.String("team"), Value: aws.String("web")}}
	out, err := c.RegisterTaskDefinition(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	td := out.TaskDefinition
	if got := aws.ToString(td.TaskDefinitionArn); got != tdBase+"web:1" {
		t.Fatalf("arn %s", got)
	}
	if td.Revision != 1 || td.Status != types.TaskDefinitionStatusActive || aws.ToString(td.Family) != "web" {
		t.Fatalf("revision %d status %s family %s", td.Revision, td.Status, aws.ToString(td.Family))
	}
	if aws.ToString(td.Cpu) != "512" || aws.ToString(td.Memory) != "1024" {
		t.Fatalf("size not normalized: cpu %s memory %s", aws.ToString(td.Cpu), aws.ToString(td.Memory))
	}
	if td.NetworkMode != types.NetworkModeBridge {
		t.Fatalf("networkMode %q", td.NetworkMode)
	}
	if !slices.Equal(td.Compatibilities, []types.Compatibility{"EC2", "MANAGED_INSTANCES"}) {
		t.Fatalf("compatibilities %v", td.Compatibilities)
	}
	if got := aws.ToString(td.RegisteredBy); got != "arn:aws:iam::123456789012:user/AKIDCAPSTANTEST" {
		t.Fatalf("registeredBy %s", got)
	}
	if td.RegisteredAt == nil || td.RegisteredAt.IsZero() {
		t.Fatal("registeredAt missing")
	}
	if cd := td.ContainerDefinitions[0]; !aws.ToBool(cd.Essential) || cd.PortMappings[0].Protocol != types.TransportProtocolTcp {
		t.Fatalf("container defaults not filled: %+v", cd)
	}
	if len(out.Tags) != 1 || aws.ToString(out.Tags[0].Key) != "team" {
		t.Fatalf("register tags %+v", out.Tags)
	}

	td2 := tdRegister(t, c, tdWeb("web"))
	if td2.Revision != 2 {
		t.Fatalf("second revision %d", td2.Revision)
	}

	// Describe by family (latest ACTIVE), family:revision and ARN.
	if got := tdDescribe(t, c, "web").Revision; got != 2 {
		t.Fatalf("describe by family: revision %d", got)
	}
	if got := tdDescribe(t, c, "web:1").Revision; got != 1 {
		t.Fatalf("describe web:1: revision %d", got)
	}
	if got := aws.ToString(tdDescribe(t, c, tdBase+"web:1").Cpu); got != "512" {
		t.Fatalf("describe by ARN: cpu %s", got)
	}
	d, err := c.DescribeTaskDefinition(ctx, &ecs.DescribeTaskDefinitionInput{TaskDefinition: aws.String("web:1"), Include: []types.TaskDefinitionField{types.TaskDefinitionFieldTags}})
	if err != nil || len(d.Tags) != 1 || aws.ToString(d.Tags[0].Value) != "web" {
		t.Fatalf("describe with tags: %+v %v", d, err)
	}
	if d, err = c.DescribeTaskDefinition(ctx, &ecs.DescribeTaskDefinitionInput{TaskDefinition: aws.String("web:1")}); err != nil || len(d.Tags) != 0 {
		t.Fatalf("describe without TAGS returned tags: %+v %v", d, err)
	}
	tags, err := c.ListTagsForResource(ctx, &ecs.ListTagsForResourceInput{ResourceArn: aws.String(tdBase + "web:1")})
	if err != nil || len(tags.Tags) != 1 {
		t.Fatalf("list tags: %+v %v", tags, err)
	}
	for _, ref := range []string{"nope", "web:9", tdBase + "nope:1"} {
		_, err = c.DescribeTaskDefinition(ctx, &ecs.DescribeTaskDefinitionInput{TaskDefinition: aws.String(ref)})
		wantECSExact(t, err, "ClientException", "Unable to describe task definition.")
	}
	_, err = c.DescribeTaskDefinition(ctx, &ecs.DescribeTaskDefinitionInput{TaskDefinition: aws.String("arn:aws:ecs:us-east-1:123456789012:cluster/web")})
	wantECSError(t, err, "InvalidParameterException", "taskDefinition")

	// Deregister: bare family refused; ACTIVE → INACTIVE; twice is harmless.
	// The refusals are in ECS's words.
	_, err = c.DeregisterTaskDefinition(ctx, &ecs.DeregisterTaskDefinitionInput{TaskDefinition: aws.String("web")})
	wantECSExact(t, err, "ClientException", "Revision is missing.")
	_, err = c.DeregisterTaskDefinition(ctx, &ecs.DeregisterTaskDefinitionInput{TaskDefinition: aws.String("web:9")})
	wantECSExact(t, err, "ClientException", "The specified task definition does not exist.")
	dr, err := c.DeregisterTaskDefinition(ctx, &ecs.DeregisterTaskDefinitionInput{TaskDefinition: aws.String(tdBase + "web:2")})
	if err != nil || dr.TaskDefinition.Status != types.TaskDefinitionStatusInactive || dr.TaskDefinition.DeregisteredAt == nil {
		t.Fatalf("deregister: %+v %v", dr, err)
	}
	again, err := c.DeregisterTaskDefinition(ctx, &ecs.DeregisterTaskDefinitionInput{TaskDefinition: aws.String("web:2")})
	if err != nil || again.TaskDefinition.Status != types.TaskDefinitionStatusInactive || !again.TaskDefinition.DeregisteredAt.Equal(*dr.TaskDefinition.DeregisteredAt) {
		t.Fatalf("deregister twice: %+v %v", again, err)
	}
	if got := tdDescribe(t, c, "web").Revision; got != 1 {
		t.Fatalf("latest ACTIVE after deregistering web:2 is %d", got)
	}
	if got := tdDescribe(t, c, "web:2").Status; got != types.TaskDefinitionStatusInactive {
		t.Fatalf("web:2 status %s", got)
	}

	// Delete: only INACTIVE revisions; others are failures, not errors.
	del, err := c.DeleteTaskDefinitions(ctx, &ecs.DeleteTaskDefinitionsInput{TaskDefinitions: []string{"web:1", tdBase + "web:2", "web:9"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(del.TaskDefinitions) != 1 || del.TaskDefinitions[0].Status != types.TaskDefinitionStatusDeleteInProgress || del.TaskDefinitions[0].DeleteRequestedAt == nil {
		t.Fatalf("deleted: %+v", del.TaskDefinitions)
	}
	if len(del.Failures) != 2 || aws.ToString(del.Failures[0].Arn) != tdBase+"web:1" || !strings.Contains(aws.ToString(del.Failures[0].Reason), "ACTIVE") ||
		aws.ToString(del.Failures[1].Reason) != "MISSING" || aws.ToString(del.Failures[1].Arn) != "web:9" {
		t.Fatalf("failures: %+v", del.Failures)
	}
	_, err = c.DescribeTaskDefinition(ctx, &ecs.DescribeTaskDefinitionInput{TaskDefinition: aws.String("web:2")})
	wantECSError(t, err, "ClientException")
	_, err = c.DeleteTaskDefinitions(ctx, &ecs.DeleteTaskDefinitionsInput{TaskDefinitions: []string{"web"}})
	wantECSError(t, err, "InvalidParameterException", "taskDefinitions[0]")
	_, err = c.DeleteTaskDefinitions(ctx, &ecs.DeleteTaskDefinitionsInput{TaskDefinitions: slices.Repeat([]string{"web:1"}, 11)})
	wantECSError(t, err, "InvalidParameterException", "taskDefinitions")

	// Revision numbers are never reused, even after a delete.
	if got := tdRegister(t, c, tdWeb("web")).Revision; got != 3 {
		t.Fatalf("revision after delete %d", got)
	}

	srv = srv.Restart(t)
	c = srv.ECS()
	if got := tdDescribe(t, c, "web"); got.Revision != 3 || got.ContainerDefinitions[0].PortMappings[0].ContainerPort == nil {
		t.Fatalf("after restart: %+v", got)
	}
	if got := aws.ToString(tdDescribe(t, c, "web:1").Memory); got != "1024" {
		t.Fatalf("after restart web:1 memory %s", got)
	}
	if got := tdRegister(t, c, tdWeb("web")).Revision; got != 4 {
		t.Fatalf("revision after restart %d", got)
	}
}

func TestTaskDefinitionValidation(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartServer(t, "")
	c := srv.ECS()

	rows := []struct {
		name   string
		mutate func(in *ecs.RegisterTaskDefinitionInput)
		code   string
		field  string
	}{
		{"bad family", func(in *ecs.RegisterTaskDefinitionInput) { in.Family = aws.String("web app") }, "InvalidParameterException", "family"},
		{"fargate without awsvpc", func(in *ecs.RegisterTaskDefinitionInput) {
			in.RequiresCompatibilities = []types.Compatibility{types.CompatibilityFargate}
		}, "ClientException", "networkMode"},
		{"missing image", func(in *ecs.RegisterTaskDefinitionInput) { in.ContainerDefinitions[0].Image = nil }, "ClientException", "containerDefinitions[0].image"},
		{"bad cpu", func(in *ecs.RegisterTaskDefinitionInput) { in.Cpu = aws.String("lots") }, "InvalidParameterException", "cpu"},
		{"duplicate host port", func(in *ecs.RegisterTaskDefinitionInput) {
			cd := in.ContainerDefinitions[0]
			cd.Name = aws.String("second")
			in.ContainerDefinitions[0].PortMappings[0].HostPort = aws.Int32(8080)
			cd.PortMappings = []types.PortMapping{{ContainerPort: aws.Int32(81), HostPort: aws.Int32(8080)}}
			in.ContainerDefinitions = append(in.ContainerDefinitions, cd)
		}, "InvalidParameterException", "containerDefinitions[1].portMappings[0].hostPort"},
		{"reserved tag", func(in *ecs.RegisterTaskDefinitionInput) {
			in.Tags = []types.Tag{{Key: aws.String("aws:owner"), Value: aws.String("x")}}
		}, "InvalidParameterException", "tags[0].key"},
		{"secrets", func(in *ecs.RegisterTaskDefinitionInput) {
			in.ContainerDefinitions[0].Secrets = []types.Secret{{Name: aws.String("PW"), ValueFrom: aws.String("arn:aws:ssm:us-east-1:123456789012:parameter/pw")}}
		}, "UnsupportedFeatureException", "containerDefinitions[0].secrets"},
		{"bad enum", func(in *ecs.RegisterTaskDefinitionInput) { in.PidMode = "process" }, "InvalidParameterException", "pidMode"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			in := tdWeb("checked")
			row.mutate(in)
			_, err := c.RegisterTaskDefinition(ctx, in)
			wantECSError(t, err, row.code, row.field)
		})
	}
	// Refused registrations take no revision number.
	if got := tdRegister(t, c, tdWeb("checked")).Revision; got != 1 {
		t.Fatalf("first accepted revision is %d", got)
	}
}

// tdList follows nextToken through every page of ListTaskDefinitions.
func tdList(t *testing.T, c *ecs.Client, in ecs.ListTaskDefinitionsInput) (arns []string, pages int) {
	t.Helper()
	p := ecs.NewListTaskDefinitionsPaginator(c, &in)
	for p.HasMorePages() {
		pg, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		pages++
		arns = append(arns, pg.TaskDefinitionArns...)
	}
	return arns, pages
}

func tdFamilies(t *testing.T, c *ecs.Client, in ecs.ListTaskDefinitionFamiliesInput) (families []string, pages int) {
	t.Helper()
	p := ecs.NewListTaskDefinitionFamiliesPaginator(c, &in)
	for p.HasMorePages() {
		pg, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		pages++
		families = append(families, pg.Families...)
	}
	return families, pages
}

func tdArns(refs ...string) []string {
	out := make([]string, len(refs))
	for i, r := range refs {
		out[i] = tdBase + r
	}
	return out
}

func TestListTaskDefinitions(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartServer(t, "")
	c := srv.ECS()

	// "a-b" sorts after "a" by family name although its keys sort first.
	for _, f := range []string{"b", "a-b", "a", "a", "a-b", "a", "gone", "retired"} {
		tdRegister(t, c, tdWeb(f))
	}
	for _, ref := range []string{"a:2", "gone:1", "retired:1"} {
		if _, err := c.DeregisterTaskDefinition(ctx, &ecs.DeregisterTaskDefinitionInput{TaskDefinition: aws.String(ref)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.DeleteTaskDefinitions(ctx, &ecs.DeleteTaskDefinitionsInput{TaskDefinitions: []string{"gone:1"}}); err != nil {
		t.Fatal(err)
	}

	active := tdArns("a:1", "a:3", "a-b:1", "a-b:2", "b:1")
	got, pages := tdList(t, c, ecs.ListTaskDefinitionsInput{})
	if !slices.Equal(got, active) || pages != 1 {
		t.Fatalf("default list (%d pages): %v", pages, got)
	}
	got, pages = tdList(t, c, ecs.ListTaskDefinitionsInput{MaxResults: aws.Int32(2)})
	if !slices.Equal(got, active) || pages != 3 {
		t.Fatalf("paged list (%d pages): %v", pages, got)
	}
	got, pages = tdList(t, c, ecs.ListTaskDefinitionsInput{MaxResults: aws.Int32(2), Sort: types.SortOrderDesc})
	desc := slices.Clone(active)
	slices.Reverse(desc)
	if !slices.Equal(got, desc) || pages != 3 {
		t.Fatalf("paged DESC list (%d pages): %v", pages, got)
	}
	got, _ = tdList(t, c, ecs.ListTaskDefinitionsInput{Status: types.TaskDefinitionStatusInactive})
	if !slices.Equal(got, tdArns("a:2", "retired:1")) {
		t.Fatalf("INACTIVE: %v", got)
	}
	// familyPrefix names a whole family, as in ECS.
	got, _ = tdList(t, c, ecs.ListTaskDefinitionsInput{FamilyPrefix: aws.String("a")})
	if !slices.Equal(got, tdArns("a:1", "a:3")) {
		t.Fatalf("familyPrefix a: %v", got)
	}
	got, _ = tdList(t, c, ecs.ListTaskDefinitionsInput{Status: types.TaskDefinitionStatusDeleteInProgress})
	if len(got) != 0 {
		t.Fatalf("DELETE_IN_PROGRESS: %v", got)
	}

	first, err := c.ListTaskDefinitions(ctx, &ecs.ListTaskDefinitionsInput{MaxResults: aws.Int32(2)})
	if err != nil || first.NextToken == nil {
		t.Fatalf("first page: %+v %v", first, err)
	}
	_, err = c.ListTaskDefinitions(ctx, &ecs.ListTaskDefinitionsInput{NextToken: first.NextToken, Sort: types.SortOrderDesc})
	wantECSError(t, err, "InvalidParameterException", "nextToken")
	_, err = c.ListTaskDefinitions(ctx, &ecs.ListTaskDefinitionsInput{MaxResults: aws.Int32(0)})
	wantECSError(t, err, "InvalidParameterException", "maxResults")
	_, err = c.ListTaskDefinitions(ctx, &ecs.ListTaskDefinitionsInput{Status: "GONE"})
	wantECSError(t, err, "InvalidParameterException", "status")

	// Families: "gone" has no revision left, "retired" only an INACTIVE one.
	fams, _ := tdFamilies(t, c, ecs.ListTaskDefinitionFamiliesInput{})
	if !slices.Equal(fams, []string{"a", "a-b", "b", "retired"}) {
		t.Fatalf("families: %v", fams)
	}
	// A page may end before families that turn out not to match, so the
	// last page can be empty.
	fams, pages = tdFamilies(t, c, ecs.ListTaskDefinitionFamiliesInput{Status: types.TaskDefinitionFamilyStatusActive, MaxResults: aws.Int32(1)})
	if !slices.Equal(fams, []string{"a", "a-b", "b"}) || pages < 3 {
		t.Fatalf("ACTIVE families (%d pages): %v", pages, fams)
	}
	fams, _ = tdFamilies(t, c, ecs.ListTaskDefinitionFamiliesInput{Status: types.TaskDefinitionFamilyStatusInactive})
	if !slices.Equal(fams, []string{"retired"}) {
		t.Fatalf("INACTIVE families: %v", fams)
	}
	fams, _ = tdFamilies(t, c, ecs.ListTaskDefinitionFamiliesInput{FamilyPrefix: aws.String("a")})
	if !slices.Equal(fams, []string{"a", "a-b"}) {
		t.Fatalf("families with prefix a: %v", fams)
	}
	_, err = c.ListTaskDefinitionFamilies(ctx, &ecs.ListTaskDefinitionFamiliesInput{FamilyPrefix: aws.String("a/b")})
	wantECSError(t, err, "InvalidParameterException", "familyPrefix")
}

func TestRegisterTaskDefinitionConcurrently(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartServer(t, "")
	c := srv.ECS()

	const n = 20
	revs := make([]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			out, err := c.RegisterTaskDefinition(ctx, tdWeb("busy"))
			if err != nil {
				errs[i] = err
				return
			}
			revs[i] = int(out.TaskDefinition.Revision)
		})
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	slices.Sort(revs)
	for i, r := range revs {
		if r != i+1 {
			t.Fatalf("revisions are not 1..%d: %v", n, revs)
		}
	}
	got, _ := tdList(t, c, ecs.ListTaskDefinitionsInput{FamilyPrefix: aws.String("busy")})
	if len(got) != n || got[n-1] != fmt.Sprintf("%sbusy:%d", tdBase, n) {
		t.Fatalf("list after concurrent registers: %v", got)
	}
}
