// Package images makes task images present on the instance and removes the
// ones nobody uses any more.
//
// Ensure applies ECS_IMAGE_PULL_BEHAVIOR. Pulls of different images run in
// parallel; concurrent Ensure calls for one image share a single pull.
// Run deletes old unused images every cleanup interval, and early when the
// disk runs short. Unlike the ECS agent, cleanup takes no lock that pulls
// wait for (only the one image being deleted is held back), and
// prefer-cached does not switch cleanup off.
package images

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/capstanhq/capstan/internal/agent/config"
	"github.com/capstanhq/capstan/internal/agent/state"
	"github.com/capstanhq/capstan/internal/runtime"
)

// Runtime is what the manager needs of the container runtime.
type Runtime interface {
	Pull(ctx context.Context, image string, auth *runtime.RegistryAuth) error
	Image(ctx context.Context, ref string) (runtime.Image, error)
	RemoveImage(ctx context.Context, id string) error
	List(ctx context.Context, labels map[string]string) ([]runtime.Container, error)
}

// Store remembers pulls and uses across restarts (*state.DB).
type Store interface {
	ImagePulled(ref, id string, at time.Time) error
	TouchImage(ref string, at time.Time) error
	Image(ref string) (state.ImageRecord, bool, error)
	Images() ([]state.ImageRecord, error)
	ForgetImage(ref string) error
}

// Options tune a Manager. Zero values take the ECS defaults noted.
type Options struct {
	Behavior config.PullBehavior // default "default"
	// Auth holds registry credentials by config.RegistryHost, used when
	// Ensure gets no credential of its own.
	Auth map[string]runtime.RegistryAuth

	CleanupInterval   time.Duration // default 30m
	MinimumCleanupAge time.Duration // used as given; 0 means any unused image
	DeletePerCycle    int           // default 5
	DisableCleanup    bool

	// DiskPaths are checked every PressureCheckInterval (default 1m); when
	// any has less than MinFreeFraction (default 0.10) free, a cleanup
	// cycle runs without waiting for the interval.
	DiskPaths             []string
	PressureCheckInterval time.Duration
	MinFreeFraction       float64
	// FreeFraction measures a path; default statfs.
	FreeFraction func(path string) (float64, error)

	RemoveTimeout time.Duration // per image; default 3m
	Log           *slog.Logger
	Now           func() time.Time
}

// FromConfig takes the image settings from the agent configuration; disk
// pressure is watched on the data directory.
func FromConfig(c config.Config) Options {
	return Options{
		Behavior:          c.ImagePullBehavior,
		Auth:              c.RegistryAuths(),
		CleanupInterval:   c.ImageCleanupInterval,
		MinimumCleanupAge: c.ImageMinimumCleanupAge,
		DeletePerCycle:    c.NumImagesDeletePerCycle,
		DisableCleanup:    c.DisableImageCleanup,
		DiskPaths:         []string{c.DataDir},
	}
}

// Metrics are the manager's counters since it started.
type Metrics struct {
	PullsOK       uint64
	PullsFailed   uint64
	CacheHits     uint64 // Ensure answered from the local image, without a pull
	ImagesDeleted uint64
	DeleteFailed  uint64
	CleanupCycles uint64
}

// Manager pulls and cleans up images. Its methods are safe for concurrent use.
type Manager struct {
	rt   Runtime
	st   Store
	opts Options
	log  *slog.Logger
	now  func() time.Time

	mu       sync.Mutex
	flights  map[string]*flight       // Ensure in progress, by normalised ref
	deleting map[string]chan struct{} // refs whose image is being removed

	pullsOK, pullsFailed, cacheHits      atomic.Uint64
	deleted, deleteFailed, cleanupCycles atomic.Uint64
}

// flight is one Ensure that later callers for the same image wait on.
type flight struct {
	done    chan struct{}
	ctx     context.Context // the leader's: if it ends early, followers retry
	waiters int             // followers, for tests
	img     runtime.Image
	err     error
}

// New returns a manager; call Run to clean up.
func New(rt Runtime, st Store, o Options) *Manager {
	if o.Behavior == "" {
		o.Behavior = config.PullDefault
	}
	if o.CleanupInterval <= 0 {
		o.CleanupInterval = 30 * time.Minute
	}
	if o.DeletePerCycle <= 0 {
		o.DeletePerCycle = 5
	}
	if o.PressureCheckInterval <= 0 {
		o.PressureCheckInterval = time.Minute
	}
	if o.MinFreeFraction <= 0 {
		o.MinFreeFraction = 0.10
	}
	if o.FreeFraction == nil {
		o.FreeFraction = statfsFree
	}
	if o.RemoveTimeout <= 0 {
		o.RemoveTimeout = 3 * time.Minute
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Manager{
		rt: rt, st: st, opts: o, log: o.Log, now: o.Now,
		flights:  map[string]*flight{},
		deleting: map[string]chan struct{}{},
	}
}

// Metrics returns the counters.
func (m *Manager) Metrics() Metrics {
	return Metrics{
		PullsOK:       m.pullsOK.Load(),
		PullsFailed:   m.pullsFailed.Load(),
		CacheHits:     m.cacheHits.Load(),
		ImagesDeleted: m.deleted.Load(),
		DeleteFailed:  m.deleteFailed.Load(),
		CleanupCycles: m.cleanupCycles.Load(),
	}
}

// Normalize writes an image reference the way the engine lists its tags,
// so records, container images and RepoTags compare equal:
// "docker.io/library/busybox" → "busybox:latest".
func Normalize(image string) string {
	ref := strings.TrimSpace(image)
	for _, p := range []string{"docker.io/library/", "index.docker.io/library/", "docker.io/", "index.docker.io/"} {
		if strings.HasPrefix(ref, p) {
			ref = strings.TrimPrefix(ref, p)
			break
		}
	}
	if strings.Contains(ref, "@") {
		return ref
	}
	last := ref[strings.LastIndex(ref, "/")+1:]
	if !strings.Contains(last, ":") {
		ref += ":latest"
	}
	return ref
}

// Ensure makes image present according to the pull behaviour and returns
// it. auth, when nil, is looked up by the image's registry in Options.Auth.
// Concurrent calls for one image share the first caller's pull.
func (m *Manager) Ensure(ctx context.Context, image string, auth *runtime.RegistryAuth) (runtime.Image, error) {
	ref := Normalize(image)
	if ref == ":latest" {
		return runtime.Image{}, errors.New("images: empty image reference")
	}
	if auth == nil {
		if a, ok := m.opts.Auth[config.RegistryHost(ref)]; ok {
			auth = &a
		}
	}
	for {
		m.mu.Lock()
		if gone, ok := m.deleting[ref]; ok {
			// Cleanup is removing this very image; wait, then pull it back.
			m.mu.Unlock()
			select {
			case <-gone:
				continue
			case <-ctx.Done():
				return runtime.Image{}, ctx.Err()
			}
		}
		f, ok := m.flights[ref]
		if !ok {
			f = &flight{done: make(chan struct{}), ctx: ctx}
			m.flights[ref] = f
			m.mu.Unlock()
			f.img, f.err = m.ensure(ctx, ref, auth)
			m.mu.Lock()
			delete(m.flights, ref)
			m.mu.Unlock()
			close(f.done)
			return f.img, f.err
		}
		f.waiters++
		m.mu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			return runtime.Image{}, ctx.Err()
		}
		if f.err != nil && f.ctx.Err() != nil && ctx.Err() == nil {
			continue // the leader gave up, not the pull: try again
		}
		return f.img, f.err
	}
}

func (m *Manager) ensure(ctx context.Context, ref string, auth *runtime.RegistryAuth) (runtime.Image, error) {
	switch m.opts.Behavior {
	case config.PullPreferCached:
		img, err := m.rt.Image(ctx, ref)
		if err == nil {
			return m.cached(ref, img), nil
		}
		if !errors.Is(err, runtime.ErrNotFound) {
			return runtime.Image{}, fmt.Errorf("images: %w", err)
		}
		return m.pull(ctx, ref, auth)
	case config.PullOnce:
		rec, ok, err := m.st.Image(ref)
		if err != nil {
			m.log.Warn("image record unreadable; pulling", "image", ref, "err", err)
		}
		if ok && !rec.PulledAt.IsZero() {
			// Pulled before; if it has been removed since, pull it again
			// rather than fail the task.
			if img, err := m.rt.Image(ctx, ref); err == nil {
				return m.cached(ref, img), nil
			}
		}
		return m.pull(ctx, ref, auth)
	case config.PullAlways:
		return m.pull(ctx, ref, auth)
	default:
		img, err := m.pull(ctx, ref, auth)
		if err == nil || ctx.Err() != nil {
			return img, err
		}
		cached, cerr := m.rt.Image(ctx, ref)
		if cerr != nil {
			return runtime.Image{}, err
		}
		m.log.Warn("pull failed; using the cached image", "image", ref, "imageId", cached.ID, "err", err)
		return m.cached(ref, cached), nil
	}
}

func (m *Manager) pull(ctx context.Context, ref string, auth *runtime.RegistryAuth) (runtime.Image, error) {
	if err := m.rt.Pull(ctx, ref, auth); err != nil {
		m.pullsFailed.Add(1)
		return runtime.Image{}, fmt.Errorf("images: %w", err)
	}
	img, err := m.rt.Image(ctx, ref)
	if err != nil {
		m.pullsFailed.Add(1)
		return runtime.Image{}, fmt.Errorf("images: after pulling %s: %w", ref, err)
	}
	m.pullsOK.Add(1)
	// A lost record costs at most an extra pull (once) or an early
	// cleanup candidate; the task need not fail for it.
	if err := m.st.ImagePulled(ref, img.ID, m.now()); err != nil {
		m.log.Warn("recording image pull", "image", ref, "err", err)
	}
	return img, nil
}

func (m *Manager) cached(ref string, img runtime.Image) runtime.Image {
	m.cacheHits.Add(1)
	if err := m.st.TouchImage(ref, m.now()); err != nil {
		m.log.Warn("recording image use", "image", ref, "err", err)
	}
	return img
}

// Run cleans up every CleanupInterval, and sooner under disk pressure,
// until ctx ends. It returns at once when cleanup is disabled.
func (m *Manager) Run(ctx context.Context) error {
	if m.opts.DisableCleanup {
		return nil
	}
	interval := time.NewTicker(m.opts.CleanupInterval)
	defer interval.Stop()
	var pressure <-chan time.Time
	if len(m.opts.DiskPaths) > 0 {
		t := time.NewTicker(m.opts.PressureCheckInterval)
		defer t.Stop()
		pressure = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-interval.C:
			m.cycle(ctx, "interval")
		case <-pressure:
			if path, free, ok := m.underPressure(); ok {
				m.log.Info("disk pressure; cleaning up images early", "path", path, "free", fmt.Sprintf("%.1f%%", free*100))
				m.cycle(ctx, "disk pressure")
			}
		}
	}
}

func (m *Manager) cycle(ctx context.Context, why string) {
	n, err := m.Cleanup(ctx)
	switch {
	case err != nil && ctx.Err() == nil:
		m.log.Warn("image cleanup", "trigger", why, "deleted", n, "err", err)
	case n > 0:
		m.log.Info("image cleanup", "trigger", why, "deleted", n)
	}
}

func (m *Manager) underPressure() (string, float64, bool) {
	for _, p := range m.opts.DiskPaths {
		free, err := m.opts.FreeFraction(p)
		if err != nil {
			m.log.Debug("disk space unknown", "path", p, "err", err)
			continue
		}
		if free < m.opts.MinFreeFraction {
			return p, free, true
		}
	}
	return "", 0, false
}

func statfsFree(path string) (float64, error) {
	var s syscall.Statfs_t
	if err := syscall.Statfs(path, &s); err != nil {
		return 0, err
	}
	if s.Blocks == 0 {
		return 1, nil
	}
	return float64(s.Bavail) / float64(s.Blocks), nil
}

// candidate is one local image that cleanup may delete, with the records
// of every tracked reference pointing at it.
type candidate struct {
	id       string
	refs     []string
	tags     []string
	lastUsed time.Time
	eligible bool
}

// Cleanup runs one cycle: it deletes up to DeletePerCycle images that this
// agent pulled or used, that no container (running or not) uses, and that
// were last used longer than MinimumCleanupAge ago, least recently used
// first. It returns how many it deleted.
func (m *Manager) Cleanup(ctx context.Context) (int, error) {
	m.cleanupCycles.Add(1)
	now := m.now()
	recs, err := m.st.Images()
	if err != nil {
		return 0, fmt.Errorf("images: cleanup: %w", err)
	}
	containers, err := m.rt.List(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("images: cleanup: %w", err)
	}
	usedIDs, usedRefs := map[string]bool{}, map[string]bool{}
	for _, c := range containers {
		usedIDs[c.ImageID] = true
		usedRefs[Normalize(c.Image)] = true
	}

	byID := map[string]*candidate{}
	tracked := map[string]bool{}
	for _, rec := range recs {
		tracked[rec.Ref] = true
		if usedRefs[rec.Ref] || m.busy(rec.Ref) {
			m.touch(rec.Ref, now)
			continue
		}
		img, err := m.rt.Image(ctx, rec.Ref)
		if errors.Is(err, runtime.ErrNotFound) {
			// Removed by someone else: nothing left to track.
			if err := m.st.ForgetImage(rec.Ref); err != nil {
				return 0, fmt.Errorf("images: cleanup: %w", err)
			}
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("images: cleanup: %w", err)
		}
		c := byID[img.ID]
		if c == nil {
			c = &candidate{id: img.ID, tags: img.RepoTags, eligible: true}
			byID[img.ID] = c
		}
		c.refs = append(c.refs, rec.Ref)
		last := cmp.Or(rec.LastUsed, rec.PulledAt)
		if last.After(c.lastUsed) {
			c.lastUsed = last
		}
		if usedIDs[img.ID] {
			m.touch(rec.Ref, now)
			c.eligible = false
		}
		if now.Sub(last) < m.opts.MinimumCleanupAge {
			c.eligible = false
		}
	}

	var cands []*candidate
	for _, c := range byID {
		// Deleting by ID drops every tag; spare images that also carry
		// tags this agent never used (someone else's).
		if c.eligible && !slices.ContainsFunc(c.tags, func(t string) bool { return !tracked[t] }) {
			cands = append(cands, c)
		}
	}
	slices.SortFunc(cands, func(a, b *candidate) int {
		return cmp.Or(a.lastUsed.Compare(b.lastUsed), strings.Compare(a.id, b.id))
	})

	deleted := 0
	var errs []error
	for _, c := range cands {
		if deleted >= m.opts.DeletePerCycle || ctx.Err() != nil {
			break
		}
		err := m.remove(ctx, c)
		switch {
		case err == nil:
			deleted++
			m.deleted.Add(1)
			m.log.Info("deleted unused image", "imageId", c.id, "refs", c.refs, "lastUsed", c.lastUsed)
		case errors.Is(err, errBusy), ctx.Err() != nil:
		default:
			m.deleteFailed.Add(1)
			errs = append(errs, err)
		}
	}
	return deleted, errors.Join(errs...)
}

var errBusy = errors.New("image is being ensured")

// remove deletes one candidate. Only its own refs are held back from
// Ensure meanwhile; every other pull goes on.
func (m *Manager) remove(ctx context.Context, c *candidate) error {
	gone := make(chan struct{})
	m.mu.Lock()
	for _, r := range c.refs {
		if m.flights[r] != nil {
			m.mu.Unlock()
			return errBusy
		}
	}
	for _, r := range c.refs {
		m.deleting[r] = gone
	}
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		for _, r := range c.refs {
			delete(m.deleting, r)
		}
		m.mu.Unlock()
		close(gone)
	}()

	rctx, cancel := context.WithTimeout(ctx, m.opts.RemoveTimeout)
	defer cancel()
	if err := m.rt.RemoveImage(rctx, c.id); err != nil && !errors.Is(err, runtime.ErrNotFound) {
		return fmt.Errorf("images: delete %s (%s): %w", c.id, strings.Join(c.refs, ", "), err)
	}
	for _, r := range c.refs {
		// The image is gone either way; a stale record is dropped by the
		// next cycle when it finds nothing under the ref.
		if err := m.st.ForgetImage(r); err != nil {
			m.log.Warn("forgetting deleted image", "image", r, "err", err)
		}
	}
	return nil
}

func (m *Manager) busy(ref string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.flights[ref] != nil
}

func (m *Manager) touch(ref string, at time.Time) {
	if err := m.st.TouchImage(ref, at); err != nil {
		m.log.Warn("recording image use", "image", ref, "err", err)
	}
}
