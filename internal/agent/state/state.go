// Package state is the agent's durable memory: one bbolt file,
// <data-dir>/agent.db, holding its registration, the last manifest, the task
// engine's records, the outbox of unacknowledged state batches and the
// images it pulled.
//
// Every write is committed and fsynced before the call returns, so the agent
// may acknowledge what it has just stored. A database that cannot be read is
// moved aside and replaced by an empty one (Repaired reports it): the agent
// then registers again and rebuilds from the containers' labels, instead of
// failing at every start until someone deletes the file.
package state

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
)

// FileName is the database's name in the data directory.
const FileName = "agent.db"

// ErrCorrupt marks a value or file that cannot be decoded.
var ErrCorrupt = errors.New("state: corrupt database")

var (
	bucketMeta     = []byte("meta")
	bucketManifest = []byte("manifest")
	bucketTasks    = []byte("tasks")
	bucketOutbox   = []byte("outbox")
	bucketImages   = []byte("images")
	allBuckets     = [][]byte{bucketMeta, bucketManifest, bucketTasks, bucketOutbox, bucketImages}

	keyInstanceARN  = []byte("instance-arn")
	keyRegistration = []byte("registration")
	keyManifestSeq  = []byte("manifest-seq")
	keyBatchLast    = []byte("batch-last")
	keyBatchAcked   = []byte("batch-acked")
	keyMetadataKey  = []byte("metadata-key")
	keyManifest     = []byte("current")
)

// DB is the open database. Its methods are safe for concurrent use.
type DB struct {
	bolt   *bolt.DB
	mem    *memDB // instead of bolt: OpenMemory
	path   string
	repair *Repair
}

// Repair says why Open replaced a database and where the old file went.
type Repair struct {
	MovedTo string
	Reason  error
}

// Option changes how Open works.
type Option func(*options)

type options struct {
	log    *slog.Logger
	now    func() time.Time
	noSync bool
}

// WithLogger logs repairs to log.
func WithLogger(log *slog.Logger) Option { return func(o *options) { o.log = log } }

// WithoutSync skips the fsync of each write: for a simulated instance
// whose state goes with it, where thousands share one disk. A crash may
// then lose the last writes, so a real agent never uses it.
func WithoutSync() Option { return func(o *options) { o.noSync = true } }

// WithClock sets the clock that names moved-aside files.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// Open opens or creates the database at path (its directory is created if
// needed). A damaged file is moved to path.corrupt-<time> and a fresh one
// is created; only when even that fails, or another process holds the
// file, does Open return an error.
func Open(path string, opts ...Option) (*DB, error) {
	o := options{log: slog.New(slog.DiscardHandler), now: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("state: %w", err)
	}
	db, err := open(path, o.noSync)
	if err == nil {
		return db, nil
	}
	if !damaged(err) {
		return nil, err
	}
	moved := fmt.Sprintf("%s.corrupt-%s", path, o.now().UTC().Format("20060102T150405.000000000Z"))
	if rerr := os.Rename(path, moved); rerr != nil {
		return nil, fmt.Errorf("state: move damaged %s aside: %w (damage: %w)", path, rerr, err)
	}
	o.log.Warn("state database damaged; moved aside and starting empty, the agent re-registers and rebuilds from its containers",
		"path", path, "movedTo", moved, "err", err)
	db, ferr := open(path, o.noSync)
	if ferr != nil {
		return nil, fmt.Errorf("state: fresh database after moving a damaged one aside: %w", ferr)
	}
	db.repair = &Repair{MovedTo: moved, Reason: err}
	return db, nil
}

// damaged tells a broken file from a problem a new file would not solve.
func damaged(err error) bool {
	switch {
	case errors.Is(err, ErrCorrupt), errors.Is(err, bolt.ErrInvalid), errors.Is(err, bolt.ErrChecksum),
		errors.Is(err, bolt.ErrVersionMismatch):
		return true
	case errors.Is(err, bolt.ErrTimeout), errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.ENOSPC),
		errors.Is(err, syscall.EROFS), errors.Is(err, fs.ErrNotExist):
		return false
	}
	// bbolt reports other malformed files (too small, bad page) with plain errors.
	return true
}

// open opens and checks the file on a goroutine of its own, so that a panic
// in bbolt or a fault on a bad mmapped page becomes an error instead of
// killing the agent. If bbolt panics half-way through Open its file handle
// is lost; that costs one descriptor once, on the way to a repair.
func open(path string, noSync bool) (*DB, error) {
	type result struct {
		db  *bolt.DB
		err error
	}
	done := make(chan result, 1)
	go func() {
		debug.SetPanicOnFault(true)
		var b *bolt.DB
		defer func() {
			if r := recover(); r != nil {
				if b != nil {
					b.Close()
				}
				done <- result{err: fmt.Errorf("%w: %s: %v", ErrCorrupt, path, r)}
			}
		}()
		b, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, NoSync: noSync})
		if err != nil {
			if errors.Is(err, bolt.ErrTimeout) {
				err = fmt.Errorf("state: %s is in use by another agent: %w", path, err)
			} else {
				err = fmt.Errorf("state: open %s: %w", path, err)
			}
			done <- result{err: err}
			return
		}
		if err := prepare(b, path); err != nil {
			b.Close()
			done <- result{err: err}
			return
		}
		done <- result{db: b}
	}()
	r := <-done
	if r.err != nil {
		return nil, r.err
	}
	return &DB{bolt: r.db, path: path}, nil
}

// prepare creates missing buckets and reads everything once, so damage is
// found now and not in the middle of running tasks.
func prepare(b *bolt.DB, path string) error {
	return b.Update(func(tx *bolt.Tx) error {
		info, err := os.Stat(path)
		if err != nil {
			return fmt.Errorf("state: %w", err)
		}
		if tx.Size() > info.Size() {
			return fmt.Errorf("%w: %s is %d bytes, its pages need %d (truncated)", ErrCorrupt, path, info.Size(), tx.Size())
		}
		for _, name := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return fmt.Errorf("%w: bucket %s: %v", ErrCorrupt, name, err)
			}
		}
		if err := checkValues(tx); err != nil {
			return err
		}
		var first error
		for err := range tx.Check() { // drained to the end: Check's goroutine waits on every send
			if first == nil {
				first = fmt.Errorf("%w: %s: %v", ErrCorrupt, path, err)
			}
		}
		return first
	})
}

// checkValues decodes every value whose format this package owns.
func checkValues(tx *bolt.Tx) error {
	meta := tx.Bucket(bucketMeta)
	for _, k := range [][]byte{keyManifestSeq, keyBatchLast, keyBatchAcked} {
		if v := meta.Get(k); v != nil && len(v) != 8 {
			return fmt.Errorf("%w: meta %s has %d bytes", ErrCorrupt, k, len(v))
		}
	}
	if v := meta.Get(keyRegistration); v != nil {
		if err := json.Unmarshal(v, new(Registration)); err != nil {
			return fmt.Errorf("%w: meta registration: %v", ErrCorrupt, err)
		}
	}
	if v := tx.Bucket(bucketManifest).Get(keyManifest); v != nil && !json.Valid(v) {
		return fmt.Errorf("%w: manifest is not JSON", ErrCorrupt)
	}
	if err := tx.Bucket(bucketOutbox).ForEach(func(k, _ []byte) error {
		if len(k) != 8 {
			return fmt.Errorf("%w: outbox key of %d bytes", ErrCorrupt, len(k))
		}
		return nil
	}); err != nil {
		return err
	}
	if err := tx.Bucket(bucketTasks).ForEach(func(_, _ []byte) error { return nil }); err != nil {
		return err
	}
	return tx.Bucket(bucketImages).ForEach(func(k, v []byte) error {
		if err := json.Unmarshal(v, new(ImageRecord)); err != nil {
			return fmt.Errorf("%w: image %q: %v", ErrCorrupt, k, err)
		}
		return nil
	})
}

// Close closes the database.
func (d *DB) Close() error {
	if d.mem != nil {
		return nil
	}
	return d.bolt.Close()
}

// Path is the database file.
func (d *DB) Path() string { return d.path }

// Repaired reports whether Open replaced a damaged database; the agent must
// then register again and rebuild its tasks from the runtime.
func (d *DB) Repaired() bool { return d.repair != nil }

// Repair describes the replacement, nil when there was none.
func (d *DB) Repair() *Repair { return d.repair }

// kvTx is a transaction over the buckets, bbolt's or the memory's.
type kvTx interface {
	Bucket(name []byte) kvBucket
}

// kvBucket is the part of a bbolt bucket this package uses. Values read
// are valid only during the transaction.
type kvBucket interface {
	Get(k []byte) []byte
	Put(k, v []byte) error
	Delete(k []byte) error
	ForEach(fn func(k, v []byte) error) error
}

type boltTx struct{ tx *bolt.Tx }

func (t boltTx) Bucket(name []byte) kvBucket { return t.tx.Bucket(name) }

// update runs fn in a write transaction; bbolt fsyncs on commit.
func (d *DB) update(fn func(tx kvTx) error) error {
	var err error
	if d.mem != nil {
		err = d.mem.update(fn)
	} else {
		err = d.bolt.Update(func(tx *bolt.Tx) error { return fn(boltTx{tx}) })
	}
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	return nil
}

func (d *DB) view(fn func(tx kvTx) error) error {
	var err error
	if d.mem != nil {
		err = d.mem.view(fn)
	} else {
		err = d.bolt.View(func(tx *bolt.Tx) error { return fn(boltTx{tx}) })
	}
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	return nil
}

func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

func getU64(b kvBucket, k []byte) (uint64, error) {
	v := b.Get(k)
	switch len(v) {
	case 0:
		return 0, nil
	case 8:
		return binary.BigEndian.Uint64(v), nil
	}
	return 0, fmt.Errorf("%w: %s has %d bytes", ErrCorrupt, k, len(v))
}

// --- meta ---

// Registration is what the agent keeps of its RegisterContainerInstance.
type Registration struct {
	Cluster      string    `json:"cluster"`
	ClusterARN   string    `json:"clusterArn,omitempty"`
	InstanceARN  string    `json:"instanceArn"`
	Endpoint     string    `json:"endpoint,omitempty"`
	AgentVersion string    `json:"agentVersion,omitempty"`
	RegisteredAt time.Time `json:"registeredAt,omitzero"`
	// Attributes sent at registration, to notice when the operator changes them.
	Attributes map[string]string `json:"attributes,omitempty"`
}

// InstanceARN is the container instance ARN, "" before registration.
func (d *DB) InstanceARN() (string, error) {
	var arn string
	err := d.view(func(tx kvTx) error {
		arn = string(tx.Bucket(bucketMeta).Get(keyInstanceARN))
		return nil
	})
	return arn, err
}

// SetInstanceARN stores the container instance ARN.
func (d *DB) SetInstanceARN(arn string) error {
	return d.update(func(tx kvTx) error { return tx.Bucket(bucketMeta).Put(keyInstanceARN, []byte(arn)) })
}

// Registration returns the stored registration; ok is false before the first.
func (d *DB) Registration() (r Registration, ok bool, err error) {
	err = d.view(func(tx kvTx) error {
		v := tx.Bucket(bucketMeta).Get(keyRegistration)
		if v == nil {
			return nil
		}
		ok = true
		if err := json.Unmarshal(v, &r); err != nil {
			return fmt.Errorf("%w: registration: %v", ErrCorrupt, err)
		}
		return nil
	})
	return r, ok, err
}

// SetRegistration stores r, and its instance ARN as InstanceARN.
func (d *DB) SetRegistration(r Registration) error {
	v, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	return d.update(func(tx kvTx) error {
		meta := tx.Bucket(bucketMeta)
		if err := meta.Put(keyRegistration, v); err != nil {
			return err
		}
		return meta.Put(keyInstanceARN, []byte(r.InstanceARN))
	})
}

// MetadataKey returns the key that makes task metadata endpoint tokens,
// creating it on first use. Keeping it keeps the URIs in running
// containers valid across agent restarts.
func (d *DB) MetadataKey() ([]byte, error) {
	var key []byte
	err := d.update(func(tx kvTx) error {
		meta := tx.Bucket(bucketMeta)
		if v := meta.Get(keyMetadataKey); len(v) == 32 {
			key = bytes.Clone(v)
			return nil
		}
		key = make([]byte, 32)
		rand.Read(key)
		return meta.Put(keyMetadataKey, key)
	})
	return key, err
}

// --- manifest ---

// PutManifest stores the manifest and its sequence number together; once it
// returns, the manifest may be acknowledged.
func (d *DB) PutManifest(seq uint64, data []byte) error {
	if !json.Valid(data) {
		return fmt.Errorf("state: manifest %d is not JSON", seq)
	}
	return d.update(func(tx kvTx) error {
		if err := tx.Bucket(bucketManifest).Put(keyManifest, data); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put(keyManifestSeq, u64(seq))
	})
}

// Manifest returns the last stored manifest (nil data and seq 0 if none).
func (d *DB) Manifest() (seq uint64, data []byte, err error) {
	err = d.view(func(tx kvTx) error {
		data = bytes.Clone(tx.Bucket(bucketManifest).Get(keyManifest))
		seq, err = getU64(tx.Bucket(bucketMeta), keyManifestSeq)
		return err
	})
	return seq, data, err
}

// ManifestSeq is the sequence number of the last stored manifest.
func (d *DB) ManifestSeq() (uint64, error) {
	var seq uint64
	err := d.view(func(tx kvTx) (err error) {
		seq, err = getU64(tx.Bucket(bucketMeta), keyManifestSeq)
		return err
	})
	return seq, err
}

// --- tasks: the task engine's Store ---

// PutTask stores the engine's record of a task.
func (d *DB) PutTask(arn string, data []byte) error {
	if arn == "" {
		return errors.New("state: task ARN is empty")
	}
	return d.update(func(tx kvTx) error { return tx.Bucket(bucketTasks).Put([]byte(arn), data) })
}

// DeleteTask removes a task's record; deleting an absent one is not an error.
func (d *DB) DeleteTask(arn string) error {
	return d.update(func(tx kvTx) error { return tx.Bucket(bucketTasks).Delete([]byte(arn)) })
}

// Tasks returns every task record by ARN.
func (d *DB) Tasks() (map[string][]byte, error) {
	out := map[string][]byte{}
	err := d.view(func(tx kvTx) error {
		return tx.Bucket(bucketTasks).ForEach(func(k, v []byte) error {
			out[string(k)] = bytes.Clone(v)
			return nil
		})
	})
	return out, err
}

// --- outbox ---

// Batch is one state batch waiting for the server's acknowledgement.
type Batch struct {
	ID   uint64
	Data []byte
}

// AppendBatch stores a new state batch. IDs must increase: one not above
// the last appended is refused, so a batch can never be numbered twice.
func (d *DB) AppendBatch(id uint64, data []byte) error {
	return d.update(func(tx kvTx) error {
		meta := tx.Bucket(bucketMeta)
		last, err := getU64(meta, keyBatchLast)
		if err != nil {
			return err
		}
		if id <= last {
			return fmt.Errorf("batch %d is not above the last appended batch %d", id, last)
		}
		if err := tx.Bucket(bucketOutbox).Put(u64(id), data); err != nil {
			return err
		}
		return meta.Put(keyBatchLast, u64(id))
	})
}

// Batches returns the unacknowledged batches, oldest first.
func (d *DB) Batches() ([]Batch, error) {
	var out []Batch
	err := d.view(func(tx kvTx) error {
		return tx.Bucket(bucketOutbox).ForEach(func(k, v []byte) error {
			if len(k) != 8 {
				return fmt.Errorf("%w: outbox key of %d bytes", ErrCorrupt, len(k))
			}
			out = append(out, Batch{ID: binary.BigEndian.Uint64(k), Data: bytes.Clone(v)})
			return nil
		})
	})
	return out, err
}

// AckThrough drops every batch up to and including id.
func (d *DB) AckThrough(id uint64) error {
	return d.update(func(tx kvTx) error {
		out := tx.Bucket(bucketOutbox)
		end := u64(id)
		var drop [][]byte
		_ = out.ForEach(func(k, _ []byte) error { // keys in order
			if bytes.Compare(k, end) > 0 {
				return errStop
			}
			drop = append(drop, bytes.Clone(k))
			return nil
		})
		for _, k := range drop {
			if err := out.Delete(k); err != nil {
				return err
			}
		}
		meta := tx.Bucket(bucketMeta)
		acked, err := getU64(meta, keyBatchAcked)
		if err != nil || id <= acked {
			return err
		}
		return meta.Put(keyBatchAcked, u64(id))
	})
}

// LastBatchID is the highest batch ID ever appended (0 for none), so new
// batches keep counting up after the outbox empties or the agent restarts.
func (d *DB) LastBatchID() (uint64, error) {
	var id uint64
	err := d.view(func(tx kvTx) (err error) {
		id, err = getU64(tx.Bucket(bucketMeta), keyBatchLast)
		return err
	})
	return id, err
}

// AckedBatchID is the highest batch ID the server acknowledged.
func (d *DB) AckedBatchID() (uint64, error) {
	var id uint64
	err := d.view(func(tx kvTx) (err error) {
		id, err = getU64(tx.Bucket(bucketMeta), keyBatchAcked)
		return err
	})
	return id, err
}

// --- images ---

// ImageRecord is what the agent remembers of an image it uses.
type ImageRecord struct {
	Ref string `json:"ref"`
	// ID is the image ID at the last successful pull or use.
	ID string `json:"id,omitempty"`
	// PulledAt is the last successful pull by this agent (zero: never).
	PulledAt time.Time `json:"pulledAt,omitzero"`
	LastUsed time.Time `json:"lastUsed,omitzero"`
}

func (d *DB) updateImage(ref string, fn func(*ImageRecord)) error {
	if ref == "" {
		return errors.New("state: image reference is empty")
	}
	return d.update(func(tx kvTx) error {
		b := tx.Bucket(bucketImages)
		rec := ImageRecord{Ref: ref}
		if v := b.Get([]byte(ref)); v != nil {
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("%w: image %q: %v", ErrCorrupt, ref, err)
			}
		}
		fn(&rec)
		v, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		return b.Put([]byte(ref), v)
	})
}

// TouchImage records that ref was used at at; it never moves LastUsed back.
func (d *DB) TouchImage(ref string, at time.Time) error {
	return d.updateImage(ref, func(r *ImageRecord) {
		if at.After(r.LastUsed) {
			r.LastUsed = at
		}
	})
}

// ImagePulled records a successful pull of ref, which resolved to image id;
// a pull is also a use.
func (d *DB) ImagePulled(ref, id string, at time.Time) error {
	return d.updateImage(ref, func(r *ImageRecord) {
		r.ID, r.PulledAt = id, at
		if at.After(r.LastUsed) {
			r.LastUsed = at
		}
	})
}

// Image returns the record of ref; ok is false when there is none.
func (d *DB) Image(ref string) (rec ImageRecord, ok bool, err error) {
	err = d.view(func(tx kvTx) error {
		v := tx.Bucket(bucketImages).Get([]byte(ref))
		if v == nil {
			return nil
		}
		ok = true
		if err := json.Unmarshal(v, &rec); err != nil {
			return fmt.Errorf("%w: image %q: %v", ErrCorrupt, ref, err)
		}
		return nil
	})
	return rec, ok, err
}

// Images returns every image record.
func (d *DB) Images() ([]ImageRecord, error) {
	var out []ImageRecord
	err := d.view(func(tx kvTx) error {
		return tx.Bucket(bucketImages).ForEach(func(k, v []byte) error {
			var rec ImageRecord
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("%w: image %q: %v", ErrCorrupt, k, err)
			}
			out = append(out, rec)
			return nil
		})
	})
	return out, err
}

// ForgetImage drops the record of ref.
func (d *DB) ForgetImage(ref string) error {
	return d.update(func(tx kvTx) error { return tx.Bucket(bucketImages).Delete([]byte(ref)) })
}
