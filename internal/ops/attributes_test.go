package ops_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/testenv"
)

func attr(name, value, target string) types.Attribute {
	a := types.Attribute{Name: aws.String(name), TargetId: aws.String(target), TargetType: types.TargetTypeContainerInstance}
	if value != "" {
		a.Value = aws.String(value)
	}
	return a
}

func shortID(arn string) string { return arn[strings.LastIndexByte(arn, '/')+1:] }

// listAttrs is "name=value@instanceARN" for every attribute ListAttributes
// returns, following its pages.
func listAttrs(t *testing.T, c *ecs.Client, in *ecs.ListAttributesInput) []string {
	t.Helper()
	var out []string
	p := ecs.NewListAttributesPaginator(c, in)
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range page.Attributes {
			out = append(out, aws.ToString(a.Name)+"="+aws.ToString(a.Value)+"@"+aws.ToString(a.TargetId))
		}
	}
	return out
}

func TestAttributesAndPlacementByThem(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartServer(t, "")
	c := srv.ECS()
	if _, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("at")}); err != nil {
		t.Fatal(err)
	}
	blue := aws.ToString(registerInstance(t, srv, "at").ContainerInstanceArn)
	green := aws.ToString(registerInstance(t, srv, "at").ContainerInstanceArn)

	// Targets by short ID or ARN; the answer names them by ARN.
	put, err := c.PutAttributes(ctx, &ecs.PutAttributesInput{Cluster: aws.String("at"), Attributes: []types.Attribute{
		attr("stack", "blue", shortID(blue)), attr("tier", "1", shortID(blue)), attr("stack", "green", green), attr("gpu", "", green)}})
	if err != nil {
		t.Fatal(err)
	}
	if len(put.Attributes) != 4 || aws.ToString(put.Attributes[0].TargetId) != blue || put.Attributes[0].TargetType != types.TargetTypeContainerInstance {
		t.Fatalf("put answered %+v", put.Attributes)
	}
	got := listAttrs(t, c, &ecs.ListAttributesInput{Cluster: aws.String("at"), TargetType: types.TargetTypeContainerInstance,
		AttributeName: aws.String("stack"), MaxResults: aws.Int32(1)})
	want := []string{"stack=blue@" + blue, "stack=green@" + green}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("ListAttributes stack, one per page: %v, want %v", got, want)
	}
	got = listAttrs(t, c, &ecs.ListAttributesInput{Cluster: aws.String("at"), TargetType: types.TargetTypeContainerInstance,
		AttributeName: aws.String("stack"), AttributeValue: aws.String("green")})
	if !slices.Equal(got, []string{"stack=green@" + green}) {
		t.Fatalf("ListAttributes stack=green: %v", got)
	}
	// Built-in attributes are listed too.
	got = listAttrs(t, c, &ecs.ListAttributesInput{Cluster: aws.String("at"), TargetType: types.TargetTypeContainerInstance})
	if !slices.Contains(got, "ecs.os-type=linux@"+blue) || !slices.Contains(got, "ecs.availability-zone=local@"+green) || len(got) != 10 {
		t.Fatalf("ListAttributes: %v", got)
	}
	// DescribeContainerInstances shows them.
	d, err := c.DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{Cluster: aws.String("at"), ContainerInstances: []string{green}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(d.ContainerInstances[0].Attributes, func(a types.Attribute) bool {
		return aws.ToString(a.Name) == "stack" && aws.ToString(a.Value) == "green"
	}) {
		t.Fatalf("described attributes %+v", d.ContainerInstances[0].Attributes)
	}

	td, err := c.RegisterTaskDefinition(ctx, &ecs.RegisterTaskDefinitionInput{Family: aws.String("web"),
		ContainerDefinitions: []types.ContainerDefinition{{Name: aws.String("web"), Image: aws.String("busybox"), Memory: aws.Int32(64)}}})
	if err != nil {
		t.Fatal(err)
	}
	run := func(expr string) (*ecs.RunTaskOutput, error) {
		return c.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String("at"), TaskDefinition: td.TaskDefinition.TaskDefinitionArn, Count: aws.Int32(2),
			PlacementConstraints: []types.PlacementConstraint{{Type: types.PlacementConstraintTypeMemberOf, Expression: aws.String(expr)}}})
	}
	for expr, where := range map[string]string{
		"attribute:stack == green":                              green,
		"attribute:stack in [blue, red]":                        blue,
		"attribute:stack =~ gr.*":                               green,
		"attribute:gpu exists":                                  green,
		"attribute:tier > 0 and attribute:ecs.os-type == linux": blue,
		"not(attribute:stack == blue)":                          green,
		"attribute:stack == red or attribute:tier == 1":         blue,
	} {
		out, err := run(expr)
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		if len(out.Tasks) != 2 || len(out.Failures) != 0 {
			t.Fatalf("%s: %d tasks, failures %+v", expr, len(out.Tasks), out.Failures)
		}
		for _, tk := range out.Tasks {
			if aws.ToString(tk.ContainerInstanceArn) != where {
				t.Errorf("%s: task placed on %s, want %s", expr, aws.ToString(tk.ContainerInstanceArn), where)
			}
		}
	}
	out, err := run("attribute:stack == red")
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Tasks) != 0 || len(out.Failures) == 0 {
		t.Fatalf("no instance matches, yet %d tasks, failures %+v", len(out.Tasks), out.Failures)
	}
	_, err = run("attribute:stack === green")
	wantECSError(t, err, "InvalidParameterException", "placementConstraints[0].expression", "attribute:stack === green")
	_, err = run("task:group == service:web")
	wantECSError(t, err, "InvalidParameterException", "task:group")

	// ListContainerInstances filters with the same language.
	li, err := c.ListContainerInstances(ctx, &ecs.ListContainerInstancesInput{Cluster: aws.String("at"), Filter: aws.String("attribute:stack in [green]")})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(li.ContainerInstanceArns, []string{green}) {
		t.Fatalf("filtered list %v", li.ContainerInstanceArns)
	}

	// Deleting: the instance no longer matches.
	if _, err := c.DeleteAttributes(ctx, &ecs.DeleteAttributesInput{Cluster: aws.String("at"),
		Attributes: []types.Attribute{attr("stack", "", green)}}); err != nil {
		t.Fatal(err)
	}
	if out, err := run("attribute:stack == green"); err != nil || len(out.Tasks) != 0 {
		t.Fatalf("after delete: %v, %+v", err, out)
	}

	// A re-registering agent keeps what PutAttributes set.
	if _, err := c.RegisterContainerInstance(ctx, &ecs.RegisterContainerInstanceInput{Cluster: aws.String("at"), ContainerInstanceArn: aws.String(blue),
		TotalResources: []types.Resource{{Name: aws.String("CPU"), Type: aws.String("INTEGER"), IntegerValue: 2048},
			{Name: aws.String("MEMORY"), Type: aws.String("INTEGER"), IntegerValue: 4096}}}); err != nil {
		t.Fatal(err)
	}
	got = listAttrs(t, c, &ecs.ListAttributesInput{Cluster: aws.String("at"), TargetType: types.TargetTypeContainerInstance, AttributeName: aws.String("tier")})
	if !slices.Equal(got, []string{"tier=1@" + blue}) {
		t.Fatalf("after re-registration: %v", got)
	}
}

func TestAttributesRefuseBadInput(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartServer(t, "")
	c := srv.ECS()
	if _, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("at")}); err != nil {
		t.Fatal(err)
	}
	ci := aws.ToString(registerInstance(t, srv, "at").ContainerInstanceArn)
	putErr := func(attrs ...types.Attribute) error {
		_, err := c.PutAttributes(ctx, &ecs.PutAttributesInput{Cluster: aws.String("at"), Attributes: attrs})
		return err
	}
	wantECSError(t, putErr(attr("ok", "1", ci), attr("x", "1", "0123456789abcdef0123456789abcdef")), "TargetNotFoundException", "attributes[1].targetId")
	wantECSError(t, putErr(attr("ecs.instance-type", "t2.micro", ci)), "InvalidParameterException", "attributes[0].name", "ecs.")
	wantECSError(t, putErr(attr("bad name", "1", ci)), "InvalidParameterException", "attributes[0].name")
	wantECSError(t, putErr(attr("k", " padded", ci)), "InvalidParameterException", "attributes[0].value")
	wantECSError(t, putErr(types.Attribute{Name: aws.String("k"), TargetType: types.TargetTypeContainerInstance}), "InvalidParameterException", "attributes[0].targetId")
	wantECSError(t, putErr(types.Attribute{Name: aws.String("k"), TargetId: aws.String(ci), TargetType: "service"}), "InvalidParameterException", "attributes[0].targetType")
	var many []types.Attribute
	for i := range 11 {
		many = append(many, attr(fmt.Sprintf("k%d", i), "v", ci))
	}
	wantECSError(t, putErr(many...), "InvalidParameterException", "attributes", "at most 10")
	_, err := c.PutAttributes(ctx, &ecs.PutAttributesInput{Cluster: aws.String("nope"), Attributes: []types.Attribute{attr("k", "v", ci)}})
	wantECSError(t, err, "ClusterNotFoundException")
	// Nothing of the refused calls was written.
	if got := listAttrs(t, c, &ecs.ListAttributesInput{Cluster: aws.String("at"), TargetType: types.TargetTypeContainerInstance}); len(got) != 3 {
		t.Fatalf("refused calls left %v", got)
	}
	// Ten custom attributes per instance, as ECS.
	if err := putErr(many[:10]...); err != nil {
		t.Fatal(err)
	}
	wantECSError(t, putErr(attr("eleventh", "v", ci)), "AttributeLimitExceededException")
	if err := putErr(attr("k0", "changed", ci)); err != nil {
		t.Fatalf("replacing a value counts no new attribute: %v", err)
	}
	_, err = c.ListAttributes(ctx, &ecs.ListAttributesInput{Cluster: aws.String("at"), TargetType: "service"})
	wantECSError(t, err, "InvalidParameterException", "targetType")
	_, err = c.ListAttributes(ctx, &ecs.ListAttributesInput{Cluster: aws.String("at"), TargetType: types.TargetTypeContainerInstance, AttributeValue: aws.String("v")})
	wantECSError(t, err, "InvalidParameterException", "attributeValue")
}

// A task definition's memberOf constraints hold for RunTask and services
// along with the call's own; StartTask, which names its instance, skips
// them, as on ECS.
func TestTaskDefinitionConstraintsPlace(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartServer(t, "")
	c := srv.ECS()
	if _, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("tc")}); err != nil {
		t.Fatal(err)
	}
	blue := aws.ToString(registerInstance(t, srv, "tc").ContainerInstanceArn)
	green := aws.ToString(registerInstance(t, srv, "tc").ContainerInstanceArn)
	if _, err := c.PutAttributes(ctx, &ecs.PutAttributesInput{Cluster: aws.String("tc"), Attributes: []types.Attribute{
		attr("stack", "blue", blue), attr("stack", "green", green)}}); err != nil {
		t.Fatal(err)
	}
	register := func(expr string) string {
		td, err := c.RegisterTaskDefinition(ctx, &ecs.RegisterTaskDefinitionInput{Family: aws.String("pinned"),
			ContainerDefinitions: []types.ContainerDefinition{{Name: aws.String("web"), Image: aws.String("busybox"), Memory: aws.Int32(64)}},
			PlacementConstraints: []types.TaskDefinitionPlacementConstraint{{Type: types.TaskDefinitionPlacementConstraintTypeMemberOf, Expression: aws.String(expr)}}})
		if err != nil {
			t.Fatal(err)
		}
		return aws.ToString(td.TaskDefinition.TaskDefinitionArn)
	}
	pinned := register("attribute:stack == blue")
	out, err := c.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String("tc"), TaskDefinition: aws.String(pinned), Count: aws.Int32(3)})
	if err != nil || len(out.Tasks) != 3 {
		t.Fatalf("run: %v %+v", err, out)
	}
	for _, tk := range out.Tasks {
		if aws.ToString(tk.ContainerInstanceArn) != blue {
			t.Fatalf("task placed on %s, want blue", aws.ToString(tk.ContainerInstanceArn))
		}
	}
	// With the call's own constraint too, nothing can match both.
	out, err = c.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String("tc"), TaskDefinition: aws.String(pinned),
		PlacementConstraints: []types.PlacementConstraint{{Type: types.PlacementConstraintTypeMemberOf, Expression: aws.String("attribute:stack == green")}}})
	if err != nil || len(out.Tasks) != 0 || len(out.Failures) == 0 {
		t.Fatalf("conflicting constraints: %v %+v", err, out)
	}
	st, err := c.StartTask(ctx, &ecs.StartTaskInput{Cluster: aws.String("tc"), TaskDefinition: aws.String(pinned), ContainerInstances: []string{green}})
	if err != nil || len(st.Tasks) != 1 {
		t.Fatalf("StartTask on green: %v %+v", err, st)
	}
	bad := register("attribute:stack === blue")
	_, err = c.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String("tc"), TaskDefinition: aws.String(bad)})
	wantECSError(t, err, "InvalidParameterException", "taskDefinition.placementConstraints[0].expression", "attribute:stack === blue")
}
