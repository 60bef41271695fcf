package fleet

import (
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/store"
)

func TestCheckNetworkConfiguration(t *testing.T) {
	nc := &shapes.NetworkConfiguration{AwsvpcConfiguration: &shapes.AwsVpcConfiguration{Subnets: []string{"subnet-1"}}}
	for _, c := range []struct {
		name     string
		mode     string
		nc       *shapes.NetworkConfiguration
		required bool
		msg      string // "" accepted
	}{
		{"awsvpc with one", "awsvpc", nc, true, ""},
		{"awsvpc without, for a service's task", "awsvpc", nil, false, ""},
		{"bridge without", "bridge", nil, true, ""},
		{"awsvpc without", "awsvpc", nil, true, "Network Configuration must be provided when networkMode 'awsvpc' is specified."},
		{"bridge with one", "bridge", nc, true, "Network Configuration is not valid for the given networkMode of this task definition."},
		{"no awsvpcConfiguration", "awsvpc", &shapes.NetworkConfiguration{}, true, "networkConfiguration.awsvpcConfiguration: is required"},
		{"no subnets", "awsvpc", &shapes.NetworkConfiguration{AwsvpcConfiguration: &shapes.AwsVpcConfiguration{}}, true,
			"networkConfiguration.awsvpcConfiguration.subnets: must name at least one subnet"},
	} {
		err := CheckNetworkConfiguration(c.mode, c.nc, c.required)
		switch {
		case c.msg == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.msg != "" && (err == nil || err.Error() != c.msg || fault.KindOf(err) != fault.InvalidParameter):
			t.Errorf("%s: %v, want InvalidParameter %q", c.name, err, c.msg)
		}
	}
}

func TestAwsvpcAttachments(t *testing.T) {
	const arn = "arn:aws:ecs:us-east-1:123456789012:task/c/abc"
	nc := &shapes.NetworkConfiguration{AwsvpcConfiguration: &shapes.AwsVpcConfiguration{Subnets: []string{"subnet-1", "subnet-2"}}}
	if got := taskAttachments(arn, "bridge", nil); got != nil {
		t.Fatalf("bridge task has attachments %+v", got)
	}
	as := taskAttachments(arn, "awsvpc", nc)
	if len(as) != 1 || as[0].Status != protocol.AttachmentPrecreated || protocol.Detail(as[0], protocol.DetailSubnetID) != "subnet-1" {
		t.Fatalf("new awsvpc task's attachments %+v", as)
	}

	// The agent's report fills the address and keeps the subnet.
	rep := []shapes.Attachment{protocol.Attachment(arn, protocol.AttachmentAttached, "169.254.172.3", "")}
	if !mergeAttachments(&as, rep) {
		t.Fatal("the first address changed nothing")
	}
	a := as[0]
	if len(as) != 1 || a.Status != protocol.AttachmentAttached || protocol.Detail(a, protocol.DetailAddress) != "169.254.172.3" ||
		protocol.Detail(a, protocol.DetailSubnetID) != "subnet-1" {
		t.Fatalf("merged %+v", as)
	}
	if mergeAttachments(&as, rep) {
		t.Error("the same report again is a change")
	}
	if !mergeAttachments(&as, []shapes.Attachment{protocol.Attachment(arn, protocol.AttachmentDeleted, "169.254.172.3", "")}) ||
		as[0].Status != protocol.AttachmentDeleted {
		t.Errorf("deleted: %+v", as)
	}
}

func TestFargateOnly(t *testing.T) {
	for _, c := range []struct {
		req  []string
		want bool
	}{
		{[]string{"FARGATE"}, true},
		{[]string{"FARGATE", "EC2"}, false},
		{[]string{"MANAGED_INSTANCES"}, false},
		{nil, false},
	} {
		if got := fargateOnly(shapes.TaskDefinition{RequiresCompatibilities: c.req}); got != c.want {
			t.Errorf("%v: %v", c.req, got)
		}
	}
}

func TestMarkStoppedDeletesAttachments(t *testing.T) {
	const arn = "arn:aws:ecs:us-east-1:123456789012:task/c/abc"
	as := taskAttachments(arn, "awsvpc", nil)
	tk := store.Task{}
	tk.Attachments = as
	(&State{Now: time.Now}).markStopped(&tk)
	if tk.Attachments[0].Status != protocol.AttachmentDeleted || as[0].Status != protocol.AttachmentPrecreated {
		t.Fatalf("after markStopped %+v; the record read was %+v", tk.Attachments, as)
	}
}
