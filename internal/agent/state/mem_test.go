package state

import (
	"errors"
	"testing"
)

// The memory database keeps everything the file does, in the same order,
// with the same refusals.
func TestMemoryBehavesAsFile(t *testing.T) {
	inMemory = true
	defer func() { inMemory = false }()
	for name, fn := range map[string]func(*testing.T){
		"RoundTripAndRestart":  TestRoundTripAndRestart,
		"Empty":                TestEmpty,
		"TasksOverwriteDelete": TestTasksOverwriteDelete,
		"Outbox":               TestOutbox,
		"Images":               TestImages,
		"ManifestMustBeJSON":   TestManifestMustBeJSON,
		"ConcurrentUse":        TestConcurrentUse,
		"MetadataKey":          TestMetadataKey,
	} {
		t.Run(name, fn)
	}
}

// A write transaction that fails leaves nothing behind, and a read-only
// one cannot write.
func TestMemoryTransactions(t *testing.T) {
	db := OpenMemory()
	must(t, db.PutTask("a", []byte("1")))
	boom := errors.New("boom")
	err := db.update(func(tx kvTx) error {
		b := tx.Bucket(bucketTasks)
		must(t, b.Put([]byte("b"), []byte("2")))
		must(t, b.Delete([]byte("a")))
		if v := b.Get([]byte("b")); string(v) != "2" {
			t.Errorf("own write not seen: %q", v)
		}
		if v := b.Get([]byte("a")); v != nil {
			t.Errorf("own delete not seen: %q", v)
		}
		n := 0
		must(t, b.ForEach(func(k, _ []byte) error { n++; return nil }))
		if n != 1 {
			t.Errorf("ForEach saw %d keys, want 1 (b)", n)
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("update = %v", err)
	}
	tasks, err := db.Tasks()
	must(t, err)
	if len(tasks) != 1 || string(tasks["a"]) != "1" {
		t.Fatalf("after a failed transaction: %q", tasks)
	}
	err = db.view(func(tx kvTx) error { return tx.Bucket(bucketTasks).Put([]byte("c"), []byte("3")) })
	if !errors.Is(err, errReadOnly) {
		t.Fatalf("write in a view = %v", err)
	}
}
