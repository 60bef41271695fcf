package state

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// inMemory makes openTemp and reopen use OpenMemory (set by
// TestMemoryBehavesAsFile around the tests it runs again).
var inMemory bool

func openTemp(t *testing.T) (*DB, string) {
	t.Helper()
	if inMemory {
		return OpenMemory(), ""
	}
	path := filepath.Join(t.TempDir(), "data", FileName)
	db, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if db.Repaired() {
		t.Fatalf("a new database must not count as repaired: %v", db.Repair().Reason)
	}
	return db, path
}

func reopen(t *testing.T, db *DB, path string) *DB {
	t.Helper()
	if inMemory {
		return db // kept by its owner across the agent's restarts
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db2.Close() })
	return db2
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// fill writes one of everything.
func fill(t *testing.T, db *DB, at time.Time) {
	t.Helper()
	must(t, db.SetRegistration(Registration{Cluster: "default", InstanceARN: "arn:i/1", RegisteredAt: at, Attributes: map[string]string{"a": "b"}}))
	must(t, db.PutManifest(7, []byte(`{"seq":7}`)))
	must(t, db.PutTask("arn:task/1", []byte(`{"v":1}`)))
	must(t, db.PutTask("arn:task/2", []byte("opaque \x00 bytes")))
	must(t, db.AppendBatch(1, []byte("b1")))
	must(t, db.AppendBatch(2, []byte("b2")))
	must(t, db.AppendBatch(3, []byte("b3")))
	must(t, db.AckThrough(1))
	must(t, db.ImagePulled("busybox:latest", "sha256:aa", at))
	must(t, db.TouchImage("app:1", at.Add(time.Minute)))
}

func check(t *testing.T, db *DB, at time.Time) {
	t.Helper()
	reg, ok, err := db.Registration()
	must(t, err)
	if !ok || reg.InstanceARN != "arn:i/1" || !reg.RegisteredAt.Equal(at) || reg.Attributes["a"] != "b" {
		t.Errorf("registration = %+v, %v", reg, ok)
	}
	if arn, err := db.InstanceARN(); err != nil || arn != "arn:i/1" {
		t.Errorf("InstanceARN = %q, %v", arn, err)
	}
	seq, data, err := db.Manifest()
	must(t, err)
	if seq != 7 || string(data) != `{"seq":7}` {
		t.Errorf("manifest = %d %s", seq, data)
	}
	if s, _ := db.ManifestSeq(); s != 7 {
		t.Errorf("ManifestSeq = %d", s)
	}
	tasks, err := db.Tasks()
	must(t, err)
	want := map[string][]byte{"arn:task/1": []byte(`{"v":1}`), "arn:task/2": []byte("opaque \x00 bytes")}
	if !reflect.DeepEqual(tasks, want) {
		t.Errorf("tasks = %q", tasks)
	}
	batches, err := db.Batches()
	must(t, err)
	if !reflect.DeepEqual(batches, []Batch{{2, []byte("b2")}, {3, []byte("b3")}}) {
		t.Errorf("batches = %+v", batches)
	}
	if id, _ := db.LastBatchID(); id != 3 {
		t.Errorf("LastBatchID = %d", id)
	}
	if id, _ := db.AckedBatchID(); id != 1 {
		t.Errorf("AckedBatchID = %d", id)
	}
	imgs, err := db.Images()
	must(t, err)
	wantImgs := []ImageRecord{
		{Ref: "app:1", LastUsed: at.Add(time.Minute)},
		{Ref: "busybox:latest", ID: "sha256:aa", PulledAt: at, LastUsed: at},
	}
	if len(imgs) != 2 || imgs[0].Ref != "app:1" || !imgs[0].LastUsed.Equal(wantImgs[0].LastUsed) || !imgs[0].PulledAt.IsZero() ||
		imgs[1].ID != "sha256:aa" || !imgs[1].PulledAt.Equal(at) || !imgs[1].LastUsed.Equal(at) {
		t.Errorf("images = %+v, want %+v", imgs, wantImgs)
	}
}

func TestRoundTripAndRestart(t *testing.T) {
	db, path := openTemp(t)
	at := time.Date(2026, 5, 1, 12, 0, 0, 123, time.UTC)
	fill(t, db, at)
	check(t, db, at)
	db = reopen(t, db, path)
	if db.Repaired() {
		t.Fatalf("healthy database repaired: %v", db.Repair().Reason)
	}
	check(t, db, at)
}

func TestEmpty(t *testing.T) {
	db, _ := openTemp(t)
	if arn, err := db.InstanceARN(); arn != "" || err != nil {
		t.Errorf("InstanceARN = %q, %v", arn, err)
	}
	if _, ok, err := db.Registration(); ok || err != nil {
		t.Errorf("Registration ok=%v err=%v", ok, err)
	}
	if seq, data, err := db.Manifest(); seq != 0 || data != nil || err != nil {
		t.Errorf("Manifest = %d %q %v", seq, data, err)
	}
	if tasks, err := db.Tasks(); len(tasks) != 0 || err != nil || tasks == nil {
		t.Errorf("Tasks = %v %v", tasks, err)
	}
	if b, err := db.Batches(); len(b) != 0 || err != nil {
		t.Errorf("Batches = %v %v", b, err)
	}
	if _, ok, err := db.Image("x"); ok || err != nil {
		t.Errorf("Image ok=%v err=%v", ok, err)
	}
}

func TestTasksOverwriteDelete(t *testing.T) {
	db, _ := openTemp(t)
	must(t, db.PutTask("a", []byte("1")))
	must(t, db.PutTask("a", []byte("2")))
	must(t, db.PutTask("b", []byte("3")))
	must(t, db.DeleteTask("b"))
	must(t, db.DeleteTask("never-there"))
	tasks, err := db.Tasks()
	must(t, err)
	if !reflect.DeepEqual(tasks, map[string][]byte{"a": []byte("2")}) {
		t.Errorf("tasks = %q", tasks)
	}
	// The returned bytes belong to the caller.
	tasks["a"][0] = 'x'
	again, _ := db.Tasks()
	if string(again["a"]) != "2" {
		t.Error("Tasks returned memory shared with the database")
	}
	if err := db.PutTask("", nil); err == nil {
		t.Error("PutTask with empty ARN must fail")
	}
}

func TestOutbox(t *testing.T) {
	db, path := openTemp(t)
	for id := uint64(1); id <= 5; id++ {
		must(t, db.AppendBatch(id, []byte(fmt.Sprint(id))))
	}
	if err := db.AppendBatch(5, []byte("again")); err == nil || !strings.Contains(err.Error(), "not above") {
		t.Errorf("repeated id: %v", err)
	}
	must(t, db.AckThrough(3))
	must(t, db.AckThrough(2)) // late, older ack changes nothing
	got, _ := db.Batches()
	if len(got) != 2 || got[0].ID != 4 || got[1].ID != 5 {
		t.Errorf("after ack 3: %+v", got)
	}
	if id, _ := db.AckedBatchID(); id != 3 {
		t.Errorf("acked = %d", id)
	}
	must(t, db.AckThrough(5))
	db = reopen(t, db, path)
	if got, _ := db.Batches(); len(got) != 0 {
		t.Errorf("after ack 5: %+v", got)
	}
	// IDs keep counting after the outbox empties and the agent restarts.
	if err := db.AppendBatch(3, nil); err == nil {
		t.Error("an ID at or below the last appended must be refused after restart")
	}
	must(t, db.AppendBatch(6, []byte("6")))
	// Ordering is numeric, not textual.
	must(t, db.AppendBatch(300, []byte("300")))
	must(t, db.AppendBatch(1<<40, []byte("big")))
	got, _ = db.Batches()
	if len(got) != 3 || got[0].ID != 6 || got[1].ID != 300 || got[2].ID != 1<<40 {
		t.Errorf("order: %+v", got)
	}
}

func TestImages(t *testing.T) {
	db, _ := openTemp(t)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	must(t, db.TouchImage("a", t0.Add(time.Hour)))
	must(t, db.TouchImage("a", t0)) // never moves back
	rec, ok, err := db.Image("a")
	must(t, err)
	if !ok || !rec.LastUsed.Equal(t0.Add(time.Hour)) || !rec.PulledAt.IsZero() {
		t.Errorf("a = %+v", rec)
	}
	must(t, db.ImagePulled("a", "sha256:1", t0.Add(2*time.Hour)))
	rec, _, _ = db.Image("a")
	if rec.ID != "sha256:1" || !rec.PulledAt.Equal(t0.Add(2*time.Hour)) || !rec.LastUsed.Equal(t0.Add(2*time.Hour)) {
		t.Errorf("after pull: %+v", rec)
	}
	must(t, db.ForgetImage("a"))
	if _, ok, _ := db.Image("a"); ok {
		t.Error("forgotten image still there")
	}
	if err := db.TouchImage("", t0); err == nil {
		t.Error("empty ref must fail")
	}
}

func TestManifestMustBeJSON(t *testing.T) {
	db, _ := openTemp(t)
	if err := db.PutManifest(1, []byte("{nope")); err == nil {
		t.Error("non-JSON manifest accepted")
	}
	if seq, _ := db.ManifestSeq(); seq != 0 {
		t.Errorf("a refused manifest changed the seq to %d", seq)
	}
}

func assertRepaired(t *testing.T, path string, fixed time.Time) {
	t.Helper()
	var logs bytes.Buffer
	db, err := Open(path, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))), WithClock(func() time.Time { return fixed }))
	if err != nil {
		t.Fatalf("Open must repair, not fail: %v", err)
	}
	defer db.Close()
	if !db.Repaired() {
		t.Fatal("Repaired() = false")
	}
	r := db.Repair()
	wantMoved := path + ".corrupt-20260102T030405.000000000Z"
	t.Logf("repaired: %v", r.Reason)
	if r.MovedTo != wantMoved || r.Reason == nil {
		t.Errorf("repair = %+v, want moved to %s", r, wantMoved)
	}
	if _, err := os.Stat(wantMoved); err != nil {
		t.Errorf("damaged file not kept: %v", err)
	}
	if !strings.Contains(logs.String(), "damaged") || !strings.Contains(logs.String(), wantMoved) {
		t.Errorf("repair not logged: %s", logs.String())
	}
	// The fresh database works and survives a restart unrepaired.
	must(t, db.PutTask("t", []byte("x")))
	must(t, db.Close())
	db2, err := Open(path)
	must(t, err)
	defer db2.Close()
	if db2.Repaired() {
		t.Error("the fresh database was repaired again")
	}
	if tasks, _ := db2.Tasks(); string(tasks["t"]) != "x" {
		t.Errorf("tasks after repair and restart = %q", tasks)
	}
}

var repairTime = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func TestRepairGarbage(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	garbage := bytes.Repeat([]byte("not a bolt database "), 2000)
	must(t, os.WriteFile(path, garbage, 0o600))
	assertRepaired(t, path, repairTime)
}

func TestRepairTinyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	must(t, os.WriteFile(path, []byte("x"), 0o600))
	assertRepaired(t, path, repairTime)
}

func TestRepairTruncated(t *testing.T) {
	db, path := openTemp(t)
	// Enough data that the file spans many pages.
	for i := range 200 {
		must(t, db.PutTask(fmt.Sprintf("arn:task/%d", i), bytes.Repeat([]byte{'v'}, 1000)))
	}
	must(t, db.Close())
	info, err := os.Stat(path)
	must(t, err)
	for _, size := range []int64{info.Size() / 2, 3 * 4096, 4096} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			p := filepath.Join(t.TempDir(), FileName)
			data, err := os.ReadFile(path)
			must(t, err)
			must(t, os.WriteFile(p, data[:size], 0o600))
			assertRepaired(t, p, repairTime)
		})
	}
}

func TestRepairOverwrittenPages(t *testing.T) {
	db, path := openTemp(t)
	for i := range 200 {
		must(t, db.PutTask(fmt.Sprintf("arn:task/%d", i), bytes.Repeat([]byte{'v'}, 1000)))
	}
	must(t, db.Close())
	data, err := os.ReadFile(path)
	must(t, err)
	pages := len(data) / 4096
	for _, span := range [][2]int{{2, pages}, {pages / 4, pages / 2}, {2, 4}} {
		t.Run(fmt.Sprint(span), func(t *testing.T) {
			bad := bytes.Clone(data)
			// Keep the meta pages, scribble over the span.
			for i := span[0] * 4096; i < span[1]*4096; i++ {
				bad[i] = byte(i * 7)
			}
			p := filepath.Join(t.TempDir(), FileName)
			must(t, os.WriteFile(p, bad, 0o600))
			assertRepaired(t, p, repairTime)
		})
	}
}

func TestRepairUndecodableValue(t *testing.T) {
	db, path := openTemp(t)
	must(t, db.TouchImage("busybox:latest", time.Now()))
	// Write a value this package cannot decode, as a bug or bit rot would.
	must(t, db.update(func(tx kvTx) error {
		return tx.Bucket(bucketImages).Put([]byte("busybox:latest"), []byte("{not json"))
	}))
	must(t, db.Close())
	assertRepaired(t, path, repairTime)
}

func TestLockedIsNotDamage(t *testing.T) {
	db, path := openTemp(t)
	must(t, db.PutTask("t", []byte("x")))
	_, err := Open(path) // the first handle still holds the file lock
	if err == nil || !strings.Contains(err.Error(), "in use by another agent") {
		t.Fatalf("second Open = %v, want an in-use error", err)
	}
	if matches, _ := filepath.Glob(path + ".corrupt-*"); len(matches) != 0 {
		t.Errorf("a locked database was moved aside: %v", matches)
	}
	if tasks, _ := db.Tasks(); string(tasks["t"]) != "x" {
		t.Error("first handle lost its data")
	}
}

func TestDamagedClassification(t *testing.T) {
	if !damaged(ErrCorrupt) || damaged(os.ErrPermission) || !damaged(errors.New("file size too small 1")) {
		t.Error("damaged() misclassifies")
	}
}

func TestConcurrentUse(t *testing.T) {
	db, path := openTemp(t)
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				arn := fmt.Sprintf("arn:task/%d-%d", w, i)
				for _, err := range []error{
					db.PutTask(arn, []byte(arn)),
					db.TouchImage(fmt.Sprintf("img:%d", i%5), time.Now()),
					func() error { _, err := db.Tasks(); return err }(),
					func() error { _, err := db.Images(); return err }(),
					func() error { _, err := db.Batches(); return err }(),
				} {
					if err != nil {
						errs <- err
					}
				}
				if i%2 == 0 {
					if err := db.DeleteTask(arn); err != nil {
						errs <- err
					}
				}
			}
		}()
	}
	// One writer appends and acks batches, as the session does.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for id := uint64(1); id <= 100; id++ {
			if err := db.AppendBatch(id, []byte("x")); err != nil {
				errs <- err
			}
			if id%10 == 0 {
				if err := db.AckThrough(id - 5); err != nil {
					errs <- err
				}
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	db = reopen(t, db, path)
	tasks, err := db.Tasks()
	must(t, err)
	if len(tasks) != 8*12 {
		t.Errorf("tasks = %d, want %d", len(tasks), 8*12)
	}
	batches, _ := db.Batches()
	if len(batches) != 5 || batches[0].ID != 96 {
		t.Errorf("batches = %d from %d", len(batches), batches[0].ID)
	}
}

func TestMetadataKey(t *testing.T) {
	db, path := openTemp(t)
	k1, err := db.MetadataKey()
	must(t, err)
	if len(k1) != 32 {
		t.Fatalf("key of %d bytes", len(k1))
	}
	db = reopen(t, db, path)
	k2, err := db.MetadataKey()
	must(t, err)
	if !bytes.Equal(k1, k2) {
		t.Error("the key changed across a restart")
	}
	other, _ := openTemp(t)
	k3, _ := other.MetadataKey()
	if bytes.Equal(k1, k3) {
		t.Error("two databases share a key")
	}
}

// The task engine's Store, as internal/agent/engine declares it.
var _ interface {
	PutTask(arn string, data []byte) error
	DeleteTask(arn string) error
	Tasks() (map[string][]byte, error)
} = (*DB)(nil)
