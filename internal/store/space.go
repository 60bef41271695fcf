package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/server/v3/storage/wal"
)

// ErrNoSpace means the state store refused a write for want of space: the
// disk under the embedded member is (nearly) full, or etcd's database
// reached its quota (the NOSPACE alarm). Reads still answer from the cache.
var ErrNoSpace = errors.New("the state store is out of space")

// An embedded member that meets a full disk does not fail the write: etcd
// ends the process (its WAL or database cannot be written halfway). So the
// store refuses writes while too little is free on the data dir's
// filesystem, before etcd ever meets the full disk.
const (
	// walSegmentBytes is the size of the embedded member's WAL files.
	// etcd preallocates one ahead of the one it writes, and 64 MB each
	// (its default) would need 128 MB before the first write.
	walSegmentBytes = 16 << 20
	// spareBytes is what etcd may write beyond the WAL's next file: its
	// database growing, compactions, leases.
	spareBytes = 4 << 20
	// writeReserve is the free space below which writes are refused:
	// the WAL's next file plus the spare.
	writeReserve = walSegmentBytes + spareBytes
	// startReserve is the free space an embedded member needs to start
	// (it preallocates the WAL's next file). Less than writeReserve, so a
	// server stopped while refusing writes starts again.
	startReserve = walSegmentBytes + spareBytes/2
	// spaceHysteresis is how much more than writeReserve must be free
	// for refused writes to resume.
	spaceHysteresis = 1 << 20
	// spaceCheckEvery is how often the store looks at the disk and the
	// alarms when no write does.
	spaceCheckEvery = time.Second
)

func init() {
	// Set before any member starts; the WAL reads files of any size.
	wal.SegmentSizeBytes = walSegmentBytes
}

// SpaceState says whether the store refuses writes for want of space.
type SpaceState struct {
	OutOfSpace bool
	// Reason is why, when OutOfSpace.
	Reason string
	// FreeBytes is what is free on the data dir's filesystem (-1: not
	// known, as for an external cluster).
	FreeBytes int64
}

// space tracks the store's space: the disk under an embedded member, and
// the NOSPACE alarm of any cluster.
type space struct {
	dir string // the embedded member's data dir; "" for an external cluster
	log *slog.Logger
	// statfs is the free bytes on dir's filesystem (a test may replace it).
	statfs func(dir string) (int64, error)

	mu    sync.Mutex
	disk  string // why the disk refuses writes ("" when it does not)
	alarm string // why etcd does (the NOSPACE alarm)
	free  int64
}

func newSpace(dir string, log *slog.Logger) *space {
	return &space{dir: dir, log: log, statfs: freeBytes, free: -1}
}

func freeBytes(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// checkStart says why an embedded member cannot start in dir.
func checkStart(dir string, statfs func(string) (int64, error)) error {
	free, err := statfs(dir)
	if err != nil {
		return nil // the member's own start says what is wrong with dir
	}
	need := startReserve + holesFilledAtOpen(dir)
	if free < need {
		return fmt.Errorf("%w: the disk is full: %s free on the filesystem of %s, and the embedded etcd needs %s to start; free space there and start again",
			ErrNoSpace, mib(free), dir, mib(need))
	}
	return nil
}

// tmpfsMagic is a tmpfs's statfs type.
const tmpfsMagic = 0x01021994

// holesFilledAtOpen is what opening the member's database takes on dir's
// filesystem beyond what it holds: etcd maps the file with MAP_POPULATE,
// which on a tmpfs allocates the holes bbolt left when it grew the file.
func holesFilledAtOpen(dir string) int64 {
	var fs syscall.Statfs_t
	if syscall.Statfs(dir, &fs) != nil || fs.Type != tmpfsMagic {
		return 0
	}
	var st syscall.Stat_t
	if syscall.Stat(filepath.Join(dir, "data", "member", "snap", "db"), &st) != nil {
		return 0
	}
	return max(st.Size-st.Blocks*512, 0)
}

// admit says whether a write of about n bytes may go to etcd now. One
// that only deletes is left to etcd under its NOSPACE alarm: deleting is
// how a database over its quota is brought back under it.
func (sp *space) admit(n int64, puts bool) error {
	if sp.dir != "" {
		// etcd writes it twice: to its WAL, then to its database.
		if err := sp.checkDisk(2 * n); err != nil {
			return err
		}
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.alarm != "" && puts {
		return fmt.Errorf("%w: %s", ErrNoSpace, sp.alarm)
	}
	return nil
}

// checkDisk looks at the free space and notes a change; need is what the
// caller is about to write.
func (sp *space) checkDisk(need int64) error {
	free, err := sp.statfs(sp.dir)
	if err != nil {
		return nil // not a filesystem we can ask; etcd's writes decide
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.free = free
	limit := int64(writeReserve)
	if sp.disk != "" {
		// Writes resume with a little more than they stopped at, so that
		// free space hovering at the line does not flip them on and off.
		limit += spaceHysteresis
	}
	if free-need >= limit {
		if sp.disk != "" {
			sp.disk = ""
			sp.log.Warn("the state store has space again: writes resume", "free_mib", free>>20, "dir", sp.dir)
		}
		return nil
	}
	why := fmt.Sprintf("the disk is full: %s free on the filesystem of %s, writes need %s kept free; free space there and writes resume by themselves",
		mib(free), sp.dir, mib(writeReserve))
	if sp.disk == "" {
		sp.log.Error("the state store is out of space: writes are refused until the disk has room", "free_mib", free>>20,
			"needed_mib", writeReserve>>20, "dir", sp.dir)
	}
	sp.disk = why
	return fmt.Errorf("%w: %s", ErrNoSpace, why)
}

// setAlarm notes whether etcd's NOSPACE alarm is raised.
func (sp *space) setAlarm(on bool, quota int64) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	switch {
	case on && sp.alarm == "":
		sp.alarm = "etcd's database reached its size quota (the NOSPACE alarm)"
		if quota > 0 {
			sp.alarm = fmt.Sprintf("etcd's database reached its size quota of %s (the NOSPACE alarm)", mib(quota))
		}
		sp.log.Error("the state store is out of space: writes are refused until etcd's database is compacted below its quota", "reason", sp.alarm)
	case !on && sp.alarm != "":
		sp.alarm = ""
		sp.log.Warn("etcd's NOSPACE alarm is cleared: writes resume")
	}
}

// state is what /healthz and /metrics report.
func (sp *space) state() SpaceState {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	st := SpaceState{FreeBytes: sp.free}
	switch {
	case sp.disk != "":
		st.OutOfSpace, st.Reason = true, sp.disk
	case sp.alarm != "":
		st.OutOfSpace, st.Reason = true, sp.alarm
	}
	return st
}

// classify names a failed write's cause when it is a want of space: the
// one place where etcd's and the disk's errors become ErrNoSpace.
func classify(err error) error {
	switch {
	case err == nil || errors.Is(err, ErrNoSpace):
		return err
	case errors.Is(err, rpctypes.ErrNoSpace), errors.Is(err, rpctypes.ErrGRPCNoSpace):
		return fmt.Errorf("%w: etcd's database reached its size quota (the NOSPACE alarm): %v", ErrNoSpace, err)
	case errors.Is(err, syscall.ENOSPC):
		return fmt.Errorf("%w: the disk is full: %v", ErrNoSpace, err)
	}
	return err
}

// Space says whether the store refuses writes for want of space, and why.
func (s *Store) Space() SpaceState { return s.space.state() }

// watchSpace looks at the disk and etcd's alarms every spaceCheckEvery
// until ctx ends, and on an embedded member clears a NOSPACE alarm once a
// compaction and defragmentation brought the database under its quota.
func (s *Store) watchSpace(ctx context.Context) {
	t := time.NewTicker(spaceCheckEvery)
	defer t.Stop()
	for {
		if s.space.dir != "" {
			s.space.checkDisk(0)
		}
		s.checkAlarm(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// checkAlarm notes etcd's NOSPACE alarm, and on the embedded member
// tries to clear it.
func (s *Store) checkAlarm(ctx context.Context) {
	if s.embedded == nil {
		resp, err := s.client.AlarmList(ctx)
		if err != nil {
			return
		}
		on := false
		for _, a := range resp.Alarms {
			on = on || a.Alarm == pb.AlarmType_NOSPACE
		}
		s.space.setAlarm(on, 0)
		return
	}
	srv := s.embedded.etcd.Server
	quota := s.embedded.etcd.Config().QuotaBackendBytes
	if quota <= 0 {
		quota = defaultQuotaBytes
	}
	on := false
	for _, a := range srv.Alarms() {
		on = on || a.Alarm == pb.AlarmType_NOSPACE
	}
	if on {
		s.reclaim(srv, quota)
		// Disarmed only well under the quota, or writes would raise it
		// again at once.
		if srv.Backend().Size() < quota*9/10 {
			_, err := srv.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_DEACTIVATE, MemberID: uint64(srv.MemberID()), Alarm: pb.AlarmType_NOSPACE})
			if err == nil {
				on = false
			} else if ctx.Err() == nil {
				s.log.Warn("disarm etcd's NOSPACE alarm", "err", err)
			}
		}
	}
	s.space.setAlarm(on, quota)
}

// defaultQuotaBytes is etcd's database quota when none is set (2 GiB).
const defaultQuotaBytes = 2 << 30

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// NoSpaceMessage returns the store's own words when err is a want of space:
// they name the cause and the remedy, while what the layers above added
// names only the write.
func NoSpaceMessage(err error) (string, bool) {
	if !errors.Is(err, ErrNoSpace) {
		return "", false
	}
	msg := err.Error()
	if i := strings.Index(msg, ErrNoSpace.Error()); i > 0 {
		msg = msg[i:]
	}
	return msg, true
}
