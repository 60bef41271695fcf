package engine

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/capstanhq/capstan/internal/protocol"
)

// persist writes the task record if it changed. A failed write is logged and
// retried on the next change: reporting goes on, since stalling every task
// on a broken disk would help nobody.
func (t *task) persist() {
	r := t.record()
	if t.savedHead != nil {
		// desiredJSON is as saved while savedHead is set: the rest decides.
		task := r.Task
		r.Task = protocol.Task{}
		same := sameHead(&r, t.savedHead)
		r.Task = task
		if same {
			return
		}
	}
	data, err := t.encodeRecordOf(r)
	if err != nil {
		t.log.Error("cannot encode task record", "err", err)
		return
	}
	if bytes.Equal(data, t.saved) {
		t.savedHead = r.cloneHead()
		return
	}
	for try := 0; ; try++ {
		err = t.e.cfg.Store.PutTask(t.arn, data)
		if err == nil || try == 2 {
			break
		}
	}
	if err != nil {
		t.log.Error("cannot save task record", "err", err)
		t.saved, t.savedHead = nil, nil
		return
	}
	t.saved, t.savedHead = data, r.cloneHead()
}

// encodeRecord is the task's record as persisted: record() in JSON, with
// the desired task encoded again only when it changed.
func (t *task) encodeRecord() ([]byte, error) { return t.encodeRecordOf(t.record()) }

func (t *task) encodeRecordOf(r record) ([]byte, error) {
	if t.desiredJSON == nil {
		b, err := json.Marshal(r.Task)
		if err != nil {
			return nil, err
		}
		t.desiredJSON = b
	}
	// The outer Task hides record's and is encoded last, as a placeholder
	// that the desired task's JSON then takes the place of: json.Marshal
	// would validate and compact kilobytes of RawMessage on every step.
	b, err := json.Marshal(struct {
		record
		Task json.RawMessage `json:"task"`
	}{r, recordPlaceholder})
	if err != nil {
		return nil, err
	}
	if !bytes.HasSuffix(b, recordTail) {
		return nil, fmt.Errorf("task record ends in %q, not the task's placeholder", b[max(0, len(b)-20):])
	}
	head := b[:len(b)-len(recordPlaceholder)-1]
	out := make([]byte, 0, len(head)+len(t.desiredJSON)+1)
	out = append(append(out, head...), t.desiredJSON...)
	return append(out, '}'), nil
}

var (
	recordPlaceholder = json.RawMessage("0")
	recordTail        = []byte(`"task":0}`)
)

func (t *task) record() record {
	r := record{
		Version:    recordVersion,
		Task:       t.desired,
		Defined:    t.hasDef,
		Admitted:   t.admitted,
		Stopping:   t.stopping,
		StopCode:   t.stopCode,
		StopReason: t.stopReason,
		Orphan:     t.orphan,
		Status:     t.status,
		State:      t.state,
		Seq:        t.seq,
		Times:      t.times,
	}
	if r.Task.Arn == "" {
		r.Task.Arn = t.arn
	}
	if t.tnet != nil {
		r.Net = &netRecord{TaskNet: *t.tnet, Released: t.netReleased}
	}
	for _, c := range t.cs {
		r.Containers = append(r.Containers, containerRecord{
			Name: c.name, RuntimeID: c.id, RuntimeName: c.runtimeName, Phase: c.phase.String(), Ran: c.started,
			ExitCode: c.exitCode, Reason: c.reason, Health: c.health, ImageID: c.imageID, ImageDigest: c.digest,
			Restarts: c.restarts, FastExits: c.fast, RestartAt: c.restartAt, Created: c.createdAt,
			FirstStarted: c.firstStartedAt, StartedAt: c.startedAt, Finished: c.finishedAt,
			Ports: c.ports, IP: c.ip, Gone: c.gone,
		})
	}
	return r
}
