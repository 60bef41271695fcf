package engine

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/protocol"
)

// recordVersion is the format of persisted task records.
const recordVersion = 1

// record is what survives an agent restart for one task. The runtime's
// labels say which containers exist; the record keeps what labels cannot:
// the definition, what was reported, and why the task stops.
type record struct {
	Version    int                `json:"v"`
	Task       protocol.Task      `json:"task"`
	Defined    bool               `json:"defined"`
	Admitted   bool               `json:"admitted,omitempty"`
	Stopping   bool               `json:"stopping,omitempty"`
	StopCode   string             `json:"stopCode,omitempty"`
	StopReason string             `json:"stopReason,omitempty"`
	Orphan     bool               `json:"orphan,omitempty"`
	Status     string             `json:"status"`
	State      protocol.TaskState `json:"state"` // last reported
	Seq        uint64             `json:"seq"`
	Times      taskTimes          `json:"times"`
	Containers []containerRecord  `json:"containers"`
}

type taskTimes struct {
	PullStarted time.Time `json:"pullStarted,omitzero"`
	PullStopped time.Time `json:"pullStopped,omitzero"`
	Started     time.Time `json:"started,omitzero"`
	Stopping    time.Time `json:"stopping,omitzero"`
	Stopped     time.Time `json:"stopped,omitzero"`
}

type containerRecord struct {
	Name         string                  `json:"name"`
	RuntimeID    string                  `json:"runtimeId,omitempty"`
	RuntimeName  string                  `json:"runtimeName,omitempty"`
	Phase        string                  `json:"phase"`
	Ran          bool                    `json:"ran,omitempty"`
	ExitCode     *int                    `json:"exitCode,omitempty"`
	Reason       string                  `json:"reason,omitempty"`
	Health       string                  `json:"health,omitempty"`
	ImageID      string                  `json:"imageId,omitempty"`
	ImageDigest  string                  `json:"imageDigest,omitempty"`
	Restarts     int                     `json:"restarts,omitempty"`
	FastExits    int                     `json:"fastExits,omitempty"`
	RestartAt    time.Time               `json:"restartAt,omitzero"`
	Created      time.Time               `json:"created,omitzero"`
	FirstStarted time.Time               `json:"firstStarted,omitzero"`
	StartedAt    time.Time               `json:"startedAt,omitzero"`
	Finished     time.Time               `json:"finished,omitzero"`
	Ports        []shapes.NetworkBinding `json:"ports,omitempty"`
	IP           string                  `json:"ip,omitempty"`
	Gone         bool                    `json:"gone,omitempty"`
}

func decodeRecord(data []byte) (record, error) {
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		return record{}, err
	}
	if r.Version != recordVersion {
		return record{}, fmt.Errorf("record format %d, want %d", r.Version, recordVersion)
	}
	return r, nil
}
