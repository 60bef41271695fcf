package taskdef

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/fault"
)

// FuzzCheckTask feeds arbitrary JSON through the same path the API takes.
// Beyond not panicking, every error must be classified, and normalizing an
// accepted request again must accept it unchanged.
func FuzzCheckTask(f *testing.F) {
	for _, seed := range []any{validTask(), validDaemon()} {
		b, _ := json.Marshal(seed)
		f.Add(b)
	}
	f.Add([]byte(`{"family":"f","cpu":"0.5 vCPU","memory":"1 GB","networkMode":"host","containerDefinitions":[{"name":"a","image":"i","portMappings":[{"containerPort":80}],"dependsOn":[{"containerName":"a","condition":"START"}]}]}`))
	f.Add([]byte(`{"family":"f","containerDefinitions":[{"name":"a","image":"i","memory":8,"links":["b:c"],"volumesFrom":[{"sourceContainer":"b"}]},{"name":"b","image":"i","memory":8,"healthCheck":{"command":[]}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var req shapes.RegisterTaskDefinitionRequest
		if json.Unmarshal(data, &req) != nil || req.Check("") != nil {
			return
		}
		err := CheckTask(&req)
		if err != nil {
			if fault.As(err) == nil {
				t.Fatalf("unclassified error: %v", err)
			}
			return
		}
		once, _ := json.Marshal(&req)
		if err := CheckTask(&req); err != nil {
			t.Fatalf("normalized request rejected: %v\n%s", err, once)
		}
		if twice, _ := json.Marshal(&req); !bytes.Equal(once, twice) {
			t.Fatalf("normalization not stable:\n%s\n%s", once, twice)
		}
	})
}

// FuzzCheckDaemon is FuzzCheckTask for daemon task definitions, with one
// more property: an accepted definition, stored as JSON and read back
// (as the server keeps it), passes the model's checks and CheckDaemon
// again and encodes the same.
func FuzzCheckDaemon(f *testing.F) {
	for _, seed := range []any{validDaemon(), validTask()} {
		b, _ := json.Marshal(seed)
		f.Add(b)
	}
	f.Add([]byte(`{"family":"d","cpu":"0.25 vCPU","memory":"0.5 GB","ipcMode":"shared","volumes":[{"name":"logs","logDriverVolumeConfiguration":{"driver":"json-file"}},{"name":"h","host":{"sourcePath":"/var/run"}}],"containerDefinitions":[{"name":"a","image":"i","mountPoints":[{"sourceVolume":"h","containerPath":"/h"}],"dependsOn":[{"containerName":"b","condition":"HEALTHY"}]},{"name":"b","image":"i","essential":false,"healthCheck":{"command":["CMD","true"]}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var req shapes.RegisterDaemonTaskDefinitionRequest
		if json.Unmarshal(data, &req) != nil || req.Check("") != nil {
			return
		}
		err := CheckDaemon(&req)
		if err != nil {
			if fault.As(err) == nil {
				t.Fatalf("unclassified error: %v", err)
			}
			return
		}
		once, _ := json.Marshal(&req)
		if err := CheckDaemon(&req); err != nil {
			t.Fatalf("normalized request rejected: %v\n%s", err, once)
		}
		if twice, _ := json.Marshal(&req); !bytes.Equal(once, twice) {
			t.Fatalf("normalization not stable:\n%s\n%s", once, twice)
		}
		var back shapes.RegisterDaemonTaskDefinitionRequest
		if err := json.Unmarshal(once, &back); err != nil {
			t.Fatalf("normalized request does not decode: %v\n%s", err, once)
		}
		if v := back.Check(""); v != nil {
			t.Fatalf("normalized request read back fails the model at %s: %s\n%s", v.Field, v.Rule, once)
		}
		if err := CheckDaemon(&back); err != nil {
			t.Fatalf("normalized request read back rejected: %v\n%s", err, once)
		}
		if again, _ := json.Marshal(&back); !bytes.Equal(once, again) {
			t.Fatalf("normalized request changed through JSON:\n%s\n%s", once, again)
		}
	})
}
