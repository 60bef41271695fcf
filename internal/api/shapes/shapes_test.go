package shapes

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
)

func TestTimestampWireForm(t *testing.T) {
	ts := At(time.Date(2026, 11, 30, 12, 0, 0, 973_400_000, time.UTC))
	b, err := json.Marshal(struct {
		T Timestamp `json:"t,omitzero"`
		Z Timestamp `json:"z,omitzero"`
	}{T: ts})
	if err != nil || string(b) != `{"t":1796040000.973}` {
		t.Fatalf("marshal: %s %v", b, err)
	}
	for in, want := range map[string]time.Time{
		"1796040000.973":   ts.Time,
		"1796040000":       time.Unix(1796040000, 0),
		"1.796040000973e9": ts.Time,
	} {
		var got Timestamp
		if err := got.UnmarshalJSON([]byte(in)); err != nil || !got.Equal(want) {
			t.Errorf("unmarshal %s: %v %v, want %v", in, got, err, want)
		}
	}
	for _, in := range []string{`"2026-11-30T12:00:00Z"`, "-1", "1e400", "abc", "1.2.3"} {
		var got Timestamp
		if err := got.UnmarshalJSON([]byte(in)); err == nil {
			t.Errorf("unmarshal %s: accepted as %v", in, got)
		}
	}
}

// The generated shapes must carry every member the Go SDK (our newest
// reference) knows for the daemon API, so no request field is dropped.
func TestShapesCoverSDKMembers(t *testing.T) {
	pairs := []struct{ ours, sdk any }{
		{CreateDaemonRequest{}, ecs.CreateDaemonInput{}},
		{UpdateDaemonRequest{}, ecs.UpdateDaemonInput{}},
		{RegisterDaemonTaskDefinitionRequest{}, ecs.RegisterDaemonTaskDefinitionInput{}},
		{DaemonTaskDefinition{}, types.DaemonTaskDefinition{}},
		{DaemonContainerDefinition{}, types.DaemonContainerDefinition{}},
		{DaemonVolume{}, types.DaemonVolume{}},
		{DaemonRevision{}, types.DaemonRevision{}},
		{DaemonDetail{}, types.DaemonDetail{}},
		{DaemonRevisionDetail{}, types.DaemonRevisionDetail{}},
		{DaemonCapacityProvider{}, types.DaemonCapacityProvider{}},
		{DaemonDeployment{}, types.DaemonDeployment{}},
		{DaemonDeploymentRevisionDetail{}, types.DaemonDeploymentRevisionDetail{}},
		{DaemonDeploymentCapacityProvider{}, types.DaemonDeploymentCapacityProvider{}},
		{CreateCapacityProviderRequest{}, ecs.CreateCapacityProviderInput{}},
		{InstanceLaunchTemplate{}, types.InstanceLaunchTemplate{}},
		{ContainerDefinition{}, types.ContainerDefinition{}},
		{RegisterTaskDefinitionRequest{}, ecs.RegisterTaskDefinitionInput{}},
	}
	for _, p := range pairs {
		ours := map[string]bool{}
		ot := reflect.TypeOf(p.ours)
		for i := range ot.NumField() {
			ours[strings.ToLower(ot.Field(i).Name)] = true
		}
		st := reflect.TypeOf(p.sdk)
		for i := range st.NumField() {
			f := st.Field(i)
			if !f.IsExported() || f.Name == "ResultMetadata" {
				continue
			}
			if !ours[strings.ToLower(f.Name)] {
				t.Errorf("%s lacks %s, which %s has", ot.Name(), f.Name, st)
			}
		}
	}
}
