// Package metadata serves the task metadata endpoint, version 4, that
// containers find through ECS_CONTAINER_METADATA_URI_V4: task and container
// metadata and Docker stats, in the shapes the Amazon ECS agent serves, so
// existing sidecars and SDK helpers work unchanged.
//
// Each container gets its own URI, http://<addr>/v4/<token>. The token is
// an HMAC of the task ARN and container name under Config.Key, so the URIs
// already injected into running containers stay valid across agent
// restarts as long as the key does. Requests are throttled per token (a
// container's own budget, ECS_TASK_METADATA_RPS_LIMIT), not per client IP
// as in ECS, where every host-network container shares 127.0.0.1's bucket.
package metadata

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/capstanhq/capstan/internal/runtime"
)

// Source describes the tasks the agent runs.
type Source interface {
	// Task returns the task with this ARN.
	Task(arn string) (TaskView, bool)
	// TaskARNs lists the known tasks; after an agent restart it lets the
	// server recognise tokens minted by the previous process.
	TaskARNs() []string
}

// StatsSource samples a container's resource usage (runtime.Runtime fits).
type StatsSource interface {
	Stats(ctx context.Context, id string) (runtime.Stats, error)
}

// TaskView is what the endpoint shows of a task.
type TaskView struct {
	Cluster       string
	ARN           string
	Family        string
	Revision      string
	DesiredStatus string
	KnownStatus   string
	CPUUnits      int // task-level CPU (1024 per vCPU), 0 if unset
	MemoryMiB     int // task-level memory, 0 if unset
	// NetworkMode is the Docker network mode of the task's containers
	// ("bridge", "host", ...).
	NetworkMode        string
	PullStartedAt      time.Time
	PullStoppedAt      time.Time
	ExecutionStoppedAt time.Time
	ServiceName        string
	Tags               map[string]string
	Containers         []ContainerView
}

// ContainerView is what the endpoint shows of a container.
type ContainerView struct {
	Name          string
	RuntimeID     string // empty until created
	RuntimeName   string
	Image         string
	ImageID       string
	Labels        map[string]string
	DesiredStatus string
	KnownStatus   string
	ExitCode      *int
	CPUUnits      int64
	MemoryMiB     int
	CreatedAt     time.Time
	StartedAt     time.Time
	FinishedAt    time.Time
	// Health is HEALTHY, UNHEALTHY or UNKNOWN; "" without a health check.
	Health       string
	HealthSince  time.Time
	HealthOutput string
	Ports        []PortView
	IPv4         []string
	ContainerARN string
	LogDriver    string
	LogOptions   map[string]string
	Volumes      []VolumeView
	RestartCount int
}

// PortView is a published port.
type PortView struct {
	ContainerPort int
	HostPort      int
	Protocol      string
	HostIP        string
}

// VolumeView is a mount.
type VolumeView struct {
	Name        string
	Source      string
	Destination string
}

// Config wires a Server.
type Config struct {
	Source  Source // required to answer anything but 404
	Runtime StatsSource
	// Addr is the host:port containers use to reach the endpoint;
	// HostAddr, when set, is the one for host-network containers.
	Addr     string
	HostAddr string
	// Key makes tokens; keep it across restarts so that running
	// containers' URIs stay valid. Empty: a random key for this process.
	Key []byte
	// RPS and Burst throttle each container (ECS default 40,60).
	RPS   int
	Burst int
	// StatsTimeout bounds one stats sample; default 5s.
	StatsTimeout time.Duration
	Log          *slog.Logger
}

// Metrics are the endpoint's counters.
type Metrics struct {
	Requests  uint64
	Throttled uint64
	NotFound  uint64
}

// Server is the endpoint. Its methods are safe for concurrent use.
type Server struct {
	cfg Config
	mux *http.ServeMux

	mu      sync.Mutex
	tokens  map[string]*endpoint
	rescan  time.Time // last TaskARNs scan for an unknown token
	metrics struct{ requests, throttled, notFound atomic.Uint64 }
}

// endpoint is one container's token.
type endpoint struct {
	task, container string
	limiter         *rate.Limiter
}

// New returns a server; mount Handler or call Serve.
func New(cfg Config) *Server {
	if len(cfg.Key) == 0 {
		cfg.Key = make([]byte, 32)
		rand.Read(cfg.Key)
	}
	if cfg.RPS <= 0 {
		cfg.RPS = 40
	}
	if cfg.Burst <= 0 {
		cfg.Burst = 60
	}
	if cfg.StatsTimeout <= 0 {
		cfg.StatsTimeout = 5 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, mux: http.NewServeMux(), tokens: map[string]*endpoint{}}
	s.mux.HandleFunc("GET /v4/{token}", s.route(s.container))
	s.mux.HandleFunc("GET /v4/{token}/task", s.route(s.task(false)))
	s.mux.HandleFunc("GET /v4/{token}/taskWithTags", s.route(s.task(true)))
	s.mux.HandleFunc("GET /v4/{token}/stats", s.route(s.containerStats))
	s.mux.HandleFunc("GET /v4/{token}/task/stats", s.route(s.taskStats))
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "NotFound", "no such metadata path; use the URI in ECS_CONTAINER_METADATA_URI_V4")
	})
	return s
}

// Handler serves the endpoint's routes.
func (s *Server) Handler() http.Handler { return s.mux }

// Metrics returns the counters.
func (s *Server) Metrics() Metrics {
	return Metrics{
		Requests:  s.metrics.requests.Load(),
		Throttled: s.metrics.throttled.Load(),
		NotFound:  s.metrics.notFound.Load(),
	}
}

// Serve answers on ln until ctx ends, then shuts down.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s.mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       5 * time.Second,
		WriteTimeout:      s.cfg.StatsTimeout + 5*time.Second,
		IdleTimeout:       time.Minute,
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("metadata endpoint: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	<-done
	return err
}

// Token is the endpoint ID of one container; it depends only on the key,
// the task ARN and the container name.
func (s *Server) Token(taskArn, container string) string {
	mac := hmac.New(sha256.New, s.cfg.Key)
	mac.Write([]byte(taskArn))
	mac.Write([]byte{0})
	mac.Write([]byte(container))
	token := hex.EncodeToString(mac.Sum(nil)[:16])
	s.mu.Lock()
	if s.tokens[token] == nil {
		s.tokens[token] = &endpoint{task: taskArn, container: container,
			limiter: rate.NewLimiter(rate.Limit(s.cfg.RPS), s.cfg.Burst)}
	}
	s.mu.Unlock()
	return token
}

// URIFor is the ECS_CONTAINER_METADATA_URI_V4 of a container. Host-network
// containers get HostAddr when it is set.
func (s *Server) URIFor(taskArn, container string) string {
	addr := s.cfg.Addr
	if s.cfg.HostAddr != "" && s.cfg.Source != nil {
		if t, ok := s.cfg.Source.Task(taskArn); ok && t.NetworkMode == "host" {
			addr = s.cfg.HostAddr
		}
	}
	return "http://" + addr + "/v4/" + s.Token(taskArn, container)
}

// Forget drops a task's tokens (they come back if the task does).
func (s *Server) Forget(taskArn string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for tok, ep := range s.tokens {
		if ep.task == taskArn {
			delete(s.tokens, tok)
		}
	}
}

// lookup resolves a token, rescanning the source (at most once a second)
// for tokens minted before a restart.
func (s *Server) lookup(token string) *endpoint {
	s.mu.Lock()
	ep := s.tokens[token]
	scan := ep == nil && time.Since(s.rescan) >= time.Second
	if scan {
		s.rescan = time.Now()
	}
	s.mu.Unlock()
	if ep != nil || !scan || s.cfg.Source == nil {
		return ep
	}
	for _, arn := range s.cfg.Source.TaskARNs() {
		if t, ok := s.cfg.Source.Task(arn); ok {
			for _, c := range t.Containers {
				s.Token(arn, c.Name)
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tokens[token]
}

// request is one resolved, admitted request.
type request struct {
	task      TaskView
	container ContainerView
}

// route resolves the token, applies the container's rate limit and looks
// up its task before calling h.
func (s *Server) route(h func(http.ResponseWriter, *http.Request, request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.metrics.requests.Add(1)
		ep := s.lookup(r.PathValue("token"))
		if ep == nil {
			s.metrics.notFound.Add(1)
			writeError(w, http.StatusNotFound, "NotFound", "unknown metadata endpoint ID")
			return
		}
		if !ep.limiter.Allow() {
			s.metrics.throttled.Add(1)
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusTooManyRequests, "ThrottlingException",
				fmt.Sprintf("rate exceeded: this container may make %d requests per second (bursts of %d)", s.cfg.RPS, s.cfg.Burst))
			return
		}
		var t TaskView
		ok := false
		if s.cfg.Source != nil {
			t, ok = s.cfg.Source.Task(ep.task)
		}
		if !ok {
			s.Forget(ep.task)
			s.metrics.notFound.Add(1)
			writeError(w, http.StatusNotFound, "NotFound", "the task of this metadata endpoint is gone")
			return
		}
		for _, c := range t.Containers {
			if c.Name == ep.container {
				h(w, r, request{task: t, container: c})
				return
			}
		}
		s.metrics.notFound.Add(1)
		writeError(w, http.StatusNotFound, "NotFound", "the container of this metadata endpoint is gone")
	}
}

func (s *Server) container(w http.ResponseWriter, _ *http.Request, q request) {
	writeJSON(w, containerResponse(q.task, q.container))
}

func (s *Server) task(withTags bool) func(http.ResponseWriter, *http.Request, request) {
	return func(w http.ResponseWriter, _ *http.Request, q request) {
		writeJSON(w, taskResponse(q.task, withTags))
	}
}

func (s *Server) containerStats(w http.ResponseWriter, r *http.Request, q request) {
	raw, err := s.stats(r.Context(), q.container)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "ServerException", err.Error())
		return
	}
	if raw == nil {
		raw = json.RawMessage("{}")
	}
	writeJSON(w, raw)
}

// taskStats maps each container's runtime ID to its stats (null when not
// running), sampled in parallel: Docker takes about a second per sample.
func (s *Server) taskStats(w http.ResponseWriter, r *http.Request, q request) {
	out := map[string]json.RawMessage{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var errs []error
	for _, c := range q.task.Containers {
		if c.RuntimeID == "" {
			continue
		}
		wg.Go(func() {
			raw, err := s.stats(r.Context(), c)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			if raw == nil {
				raw = json.RawMessage("null")
			}
			out[c.RuntimeID] = raw
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		writeError(w, http.StatusInternalServerError, "ServerException", err.Error())
		return
	}
	writeJSON(w, out)
}

// stats returns Docker's stats JSON for c, nil when it is not running.
func (s *Server) stats(ctx context.Context, c ContainerView) (json.RawMessage, error) {
	if c.RuntimeID == "" || c.KnownStatus != "RUNNING" || s.cfg.Runtime == nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.StatsTimeout)
	defer cancel()
	st, err := s.cfg.Runtime.Stats(ctx, c.RuntimeID)
	if errors.Is(err, runtime.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("stats of container %s: %w", c.Name, err)
	}
	if len(st.Raw) > 0 {
		return st.Raw, nil
	}
	return dockerStats(st)
}

// dockerStats builds Docker's stats shape for a runtime without raw JSON.
func dockerStats(st runtime.Stats) (json.RawMessage, error) {
	v := map[string]any{
		"read": st.Time,
		"cpu_stats": map[string]any{
			"cpu_usage":        map[string]any{"total_usage": st.CPUTotalNanos},
			"system_cpu_usage": st.SystemCPUNanos,
			"online_cpus":      st.OnlineCPUs,
		},
		"memory_stats": map[string]any{"usage": st.MemoryUsageBytes, "limit": st.MemoryLimitBytes},
		"networks":     map[string]any{"eth0": map[string]any{"rx_bytes": st.NetworkRxBytes, "tx_bytes": st.NetworkTxBytes}},
		"blkio_stats": map[string]any{"io_service_bytes_recursive": []map[string]any{
			{"op": "read", "value": st.BlockReadBytes}, {"op": "write", "value": st.BlockWriteBytes},
		}},
		"pids_stats": map[string]any{"current": st.Pids},
	}
	return json.Marshal(v)
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "ServerException", err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.Write(b)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	b, _ := json.Marshal(struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}{code, msg})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}
