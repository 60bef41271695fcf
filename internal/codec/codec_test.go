package codec_test

import (
	"encoding/json"
	"testing"

	"github.com/capstanhq/capstan/internal/codec"
	"github.com/capstanhq/capstan/internal/store"
	segjson "github.com/segmentio/encoding/json"
)

var sampleInstance = []byte(`{"agentConnected":true,"attributes":[{"name":"ecs.capability.docker-remote-api.1.17"},{"name":"ecs.capability.docker-remote-api.1.18"},{"name":"ecs.capability.docker-remote-api.1.19"},{"name":"ecs.capability.docker-remote-api.1.20"},{"name":"ecs.capability.docker-remote-api.1.21"},{"name":"ecs.capability.logging-driver.json-file"},{"name":"ecs.capability.logging-driver.none"},{"name":"ecs.capability.task-cpu-mem-limit"},{"name":"ecs.capability.container-health-check"},{"name":"ecs.os-type","value":"linux"},{"name":"ecs.os-family","value":"LINUX"},{"name":"ecs.cpu-architecture","value":"x86_64"},{"name":"ecs.availability-zone","value":"us-east-1a"},{"name":"ecs.instance-type","value":"sim.large"},{"name":"capstan.capacity-provider","value":"cp-1"}],"capacityProviderName":"cp-1","containerInstanceArn":"arn:aws:ecs:us-east-1:000000000000:container-instance/scale/4f1c2a7e9b8d4c1fa2b3c4d5e6f70811","ec2InstanceId":"i-0a1b2c3d4e5f60718","pendingTasksCount":0,"registeredAt":1764520000.123,"registeredResources":[{"name":"CPU","type":"INTEGER","integerValue":2048},{"name":"MEMORY","type":"INTEGER","integerValue":3900},{"name":"PORTS","type":"STRINGSET","stringSetValue":["22","2375","2376","51678","51679"]},{"name":"PORTS_UDP","type":"STRINGSET","stringSetValue":[]}],"remainingResources":[{"name":"CPU","type":"INTEGER","integerValue":1856},{"name":"MEMORY","type":"INTEGER","integerValue":3516},{"name":"PORTS","type":"STRINGSET","stringSetValue":["22","2375","2376","51678","51679"]},{"name":"PORTS_UDP","type":"STRINGSET","stringSetValue":[]}],"runningTasksCount":3,"status":"ACTIVE","versionInfo":{"agentHash":"capstan","agentVersion":"0.1.0","dockerVersion":"sim"},"version":12,"capstanId":"4f1c2a7e9b8d4c1fa2b3c4d5e6f70811","capstanCluster":"scale","capstanAccessKeyId":"CKAGENT0000000000001"}`)

var sampleTask = []byte(`{"attributes":[{"name":"ecs.cpu-architecture","value":"x86_64"}],"availabilityZone":"us-east-1a","capacityProviderName":"cp-1","clusterArn":"arn:aws:ecs:us-east-1:000000000000:cluster/scale","connectivity":"CONNECTED","connectivityAt":1764520001.5,"containerInstanceArn":"arn:aws:ecs:us-east-1:000000000000:container-instance/scale/4f1c2a7e9b8d4c1fa2b3c4d5e6f70811","containers":[{"containerArn":"arn:aws:ecs:us-east-1:000000000000:container/scale/7d3e2a1b0c9f4e8d/5b6c7d8e-9f00-4a1b-8c2d-3e4f5a6b7c8d","cpu":"64","image":"example/web:1","lastStatus":"RUNNING","memory":"128","name":"web","networkBindings":[],"networkInterfaces":[],"runtimeId":"sim-7d3e2a1b0c9f","taskArn":"arn:aws:ecs:us-east-1:000000000000:task/scale/7d3e2a1b0c9f4e8da1b2c3d4e5f60718","healthStatus":"UNKNOWN"}],"cpu":"64","createdAt":1764520001.25,"desiredStatus":"RUNNING","group":"service:svc-1","healthStatus":"UNKNOWN","lastStatus":"RUNNING","launchType":"EC2","memory":"128","overrides":{"containerOverrides":[{"name":"web"}],"inferenceAcceleratorOverrides":[]},"pullStartedAt":1764520001.6,"pullStoppedAt":1764520001.7,"startedAt":1764520001.9,"startedBy":"ecs-svc/1234567890123456789","tags":[],"taskArn":"arn:aws:ecs:us-east-1:000000000000:task/scale/7d3e2a1b0c9f4e8da1b2c3d4e5f60718","taskDefinitionArn":"arn:aws:ecs:us-east-1:000000000000:task-definition/web:1","version":4,"capstanId":"7d3e2a1b0c9f4e8da1b2c3d4e5f60718","capstanCluster":"scale","capstanInstanceId":"4f1c2a7e9b8d4c1fa2b3c4d5e6f70811","capstanKind":"service","capstanReserved":{"cpu":64,"memory":128},"capstanStateSeq":3}`)

func benchDecode[T any](b *testing.B, data []byte, f func([]byte, any) error) {
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		var v T
		if err := f(data, &v); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecode compares codec with encoding/json and with the decoder
// it wraps, without the arrays sized first, on a container instance and a
// task as the store holds them.
func BenchmarkDecode(b *testing.B) {
	for _, d := range []struct {
		name string
		f    func([]byte, any) error
	}{{"encoding-json", json.Unmarshal}, {"segmentio", segjson.Unmarshal}, {"codec", codec.Unmarshal}} {
		b.Run("instance/"+d.name, func(b *testing.B) { benchDecode[store.ContainerInstance](b, sampleInstance, d.f) })
		b.Run("task/"+d.name, func(b *testing.B) { benchDecode[store.Task](b, sampleTask, d.f) })
	}
}

// codec must decode what the store holds exactly as encoding/json does:
// the same values, hence the same bytes when encoded again.
func TestDecodesAsEncodingJSON(t *testing.T) {
	same(t, sampleInstance, new(store.ContainerInstance), new(store.ContainerInstance))
	same(t, sampleTask, new(store.Task), new(store.Task))
	type tricky struct {
		Embedded store.Reservation `json:"r"`
		Map      map[string]string `json:"m"`
		Raw      json.RawMessage   `json:"raw"`
		Ptr      *int64            `json:"ptr"`
		Esc      string            `json:"esc"`
		Omitted  string            `json:"-"`
		Lower    string
	}
	same(t, []byte(`{"r":{"cpu":1,"memory":2,"ports":["tcp/80"]},"m":{"a":"b"},"raw":{"x":[1,2]},"ptr":7,"esc":"\u00e9\n\"q\" \ud83d\ude00","-":"x","lower":"case-insensitive","unknown":{"deep":[1]}}`), new(tricky), new(tricky))
}

func same[T any](t *testing.T, data []byte, a, b *T) {
	t.Helper()
	if err := json.Unmarshal(data, a); err != nil {
		t.Fatal(err)
	}
	if err := codec.Unmarshal(data, b); err != nil {
		t.Fatal(err)
	}
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	if string(x) != string(y) {
		t.Errorf("decoded differently:\nencoding/json %s\ncodec         %s", x, y)
	}
	var bad T
	if codec.Unmarshal(data[:len(data)-1], &bad) == nil {
		t.Error("codec accepted truncated JSON")
	}
}

// Encode must give json.Marshal's bytes: HTML escaped, no trailing
// newline, errors as errors; a released buffer is reused without its old
// bytes showing.
func TestEncodeAsMarshal(t *testing.T) {
	var inst store.ContainerInstance
	if err := json.Unmarshal(sampleInstance, &inst); err != nil {
		t.Fatal(err)
	}
	for _, v := range []any{inst, map[string]string{"a": "<b>&</b>", "\u2028": "x"}, "", []int{}, nil} {
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		e, err := codec.Encode(v)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(e.Bytes()); got != string(want) {
			t.Errorf("Encode(%T) = %s, json.Marshal = %s", v, got, want)
		}
		e.Release()
	}
	if _, err := codec.Encode(map[string]any{"f": func() {}}); err == nil {
		t.Error("Encode accepted a func")
	}
}

// BenchmarkEncode compares json.Marshal with Encode on a stored instance.
func BenchmarkEncode(b *testing.B) {
	var inst store.ContainerInstance
	if err := json.Unmarshal(sampleInstance, &inst); err != nil {
		b.Fatal(err)
	}
	b.Run("marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(inst); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			e, err := codec.Encode(inst)
			if err != nil {
				b.Fatal(err)
			}
			e.Release()
		}
	})
}
