package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/aws/smithy-go"
)

// fill sets every exported member of v, recursively, to a non-zero value.
func fill(v reflect.Value, depth int) {
	if depth > 12 {
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(p.Elem(), depth+1)
		v.Set(p)
	case reflect.Struct:
		if v.Type() == timeType {
			v.Set(reflect.ValueOf(time.Unix(1700000000, 250_000_000)))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), depth+1)
			}
		}
	case reflect.String:
		v.SetString("s")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1.5)
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			v.SetBytes([]byte{1, 2, 3})
			return
		}
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0), depth+1)
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		e := reflect.New(v.Type().Elem()).Elem()
		fill(e, depth+1)
		m.SetMapIndex(reflect.ValueOf("k").Convert(v.Type().Key()), e)
		v.Set(m)
	}
}

// TestDecodeMatchesSDKSerializer proves the decoder's member naming agrees
// with the SDK's model: every member of each request -f accepts is written
// by the SDK's own serializer, read back by decodeInput, and written again.
func TestDecodeMatchesSDKSerializer(t *testing.T) {
	for _, in := range []smithy.Serializable{
		&ecs.RegisterTaskDefinitionInput{},
		&ecs.RegisterDaemonTaskDefinitionInput{},
		&ecs.CreateCapacityProviderInput{},
		&ecs.UpdateCapacityProviderInput{},
		&ecs.CreateDaemonInput{},
		&ecs.UpdateDaemonInput{},
	} {
		name := reflect.TypeOf(in).Elem().Name()
		t.Run(name, func(t *testing.T) {
			fill(reflect.ValueOf(in).Elem(), 0)
			first, err := marshalShape(in)
			if err != nil {
				t.Fatal(err)
			}
			back := reflect.New(reflect.TypeOf(in).Elem()).Interface().(smithy.Serializable)
			if err := decodeInput(first, back); err != nil {
				t.Fatalf("decode: %v\n%s", err, first)
			}
			second, err := marshalShape(back)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(first, second) {
				t.Fatalf("round trip differs:\n%s\n---\n%s", first, second)
			}
		})
	}
}

func TestDecodeFiles(t *testing.T) {
	data, err := os.ReadFile("testdata/cloudwatch-agent.json")
	if err != nil {
		t.Fatal(err)
	}
	var in ecs.RegisterDaemonTaskDefinitionInput
	if err := decodeInput(data, &in); err != nil {
		t.Fatal(err)
	}
	cd := in.ContainerDefinitions[0]
	if *in.Cpu != "1024" || *in.Memory != "512" || !*cd.Privileged || !*cd.MountPoints[1].ReadOnly ||
		*in.Volumes[0].Host.SourcePath != "/proc" || cd.HealthCheck.Command[0] != "CMD-SHELL" || *cd.HealthCheck.Retries != 3 {
		t.Fatalf("decoded %+v", in)
	}

	data, err = os.ReadFile("testdata/bad-member.json")
	if err != nil {
		t.Fatal(err)
	}
	err = decodeInput(data, &ecs.RegisterTaskDefinitionInput{})
	if err == nil || !strings.Contains(err.Error(), "unknown members containerDefinitions[0].privilegd, volume") {
		t.Fatalf("unknown members: %v", err)
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{`[]`, "must be a JSON object"},
		{`{"family": 1}`, "family: want a string, got a number"},
		{`{"family": "a"} {}`, "more than one value"},
		{`{"containerDefinitions": {}}`, "containerDefinitions: want an array, got an object"},
		{`{"containerDefinitions": [{"cpu": 1.5}]}`, "containerDefinitions[0].cpu: want an integer"},
		{`{"containerDefinitions": [{"memory": 4294967296}]}`, "fits 32 bits"},
		{`{"containerDefinitions": [{"essential": "yes"}]}`, "want true or false"},
		{`{"taskDefinition": {"family": "x"}}`, "looks like describe output"},
	} {
		err := decodeInput([]byte(tc.doc), &ecs.RegisterTaskDefinitionInput{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.doc, err, tc.want)
		}
	}
}

func TestDecodeAcceptsAnyCaseAndNull(t *testing.T) {
	var in ecs.CreateDaemonInput
	err := decodeInput([]byte(`{"DaemonName": "x", "deploymentConfiguration": {"drainPercent": 10, "bakeTimeInMinutes": 2},
		"critical": false, "propagateTags": "DAEMON", "clientToken": null}`), &in)
	if err != nil {
		t.Fatal(err)
	}
	if *in.DaemonName != "x" || *in.DeploymentConfiguration.DrainPercent != 10 || in.DeploymentConfiguration.BakeTimeInMinutes != 2 ||
		in.Critical == nil || *in.Critical || in.PropagateTags != types.DaemonPropagateTagsDaemon || in.ClientToken != nil {
		t.Fatalf("decoded %+v", in)
	}
}

func TestDecodeTimestamps(t *testing.T) {
	for _, doc := range []string{`{"before": 1700000000.5}`, `{"before": "2023-11-14T22:13:20.5Z"}`} {
		var c types.CreatedAt
		if err := decodeInput([]byte(doc), &c); err != nil {
			t.Fatal(err)
		}
		if want := time.Unix(1700000000, 500_000_000); !c.Before.Equal(want) {
			t.Errorf("%s: got %v, want %v", doc, c.Before, want)
		}
	}
	if err := decodeInput([]byte(`{"before": true}`), &types.CreatedAt{}); err == nil {
		t.Error("boolean timestamp accepted")
	}
}

func TestParseInterspersed(t *testing.T) {
	s := &session{}
	fs := s.flagSet("t")
	c := fs.String("cluster", "", "")
	pos, err := parseInterspersed(fs, []string{"a", "--cluster", "x", "b", "-o", "json", "--", "-c"})
	if err != nil {
		t.Fatal(err)
	}
	if *c != "x" || s.g.output != "json" || strings.Join(pos, " ") != "a b -c" {
		t.Fatalf("cluster %q output %q pos %q", *c, s.g.output, pos)
	}
}

func TestMarshalShapeKeepsZeros(t *testing.T) {
	out := &ecs.DescribeDaemonOutput{Daemon: &types.DaemonDetail{
		DaemonArn: aws.String("arn:aws:ecs:us-east-1:123456789012:daemon/c/d"),
		CurrentRevisions: []types.DaemonRevisionDetail{{
			Arn:               aws.String("r"),
			CapacityProviders: []types.DaemonCapacityProvider{{Arn: aws.String("cp"), RunningCount: 3}},
		}},
	}}
	b, err := marshalShape(out)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	rev := m["daemon"].(map[string]any)["currentRevisions"].([]any)[0].(map[string]any)
	cp := rev["capacityProviders"].([]any)[0].(map[string]any)
	if rev["totalRunningCount"] != 0.0 || rev["totalWithoutDaemonCount"] != 0.0 || cp["runningCount"] != 3.0 || cp["withoutDaemonCount"] != 0.0 {
		t.Fatalf("zeros lost:\n%s", b)
	}
	if _, ok := m["daemon"].(map[string]any)["status"]; ok {
		t.Fatalf("an unset enum was printed:\n%s", b)
	}
	if strings.Contains(string(b), "ResultMetadata") {
		t.Fatalf("metadata printed:\n%s", b)
	}
}

// TestDecodeInputPosition: a malformed file is reported with the line and
// column of the fault, as an editor counts them.
func TestDecodeInputPosition(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{"{\n  \"family\": \"web\",\n  \"cpu\": 256,,\n}", "line 3, column 14: invalid character ','"},
		{"{\"family\": \"web\"\n \"cpu\": \"256\"}", "line 2, column 2: invalid character '\"' after object key:value pair"},
		{"{\n  \"family\": \"we", "line 2, column 16: the document ends early"},
		{"{}\n\n  {}", "line 3, column 3: more than one value"},
		{"\t{'family': 1}", "line 1, column 3: invalid character '\\''"},
	} {
		var in ecs.RegisterTaskDefinitionInput
		err := decodeInput([]byte(c.doc), &in)
		if err == nil || !strings.Contains(err.Error(), "not valid JSON at "+c.want) {
			t.Errorf("%q: got %v, want %q", c.doc, err, c.want)
		}
	}
}
