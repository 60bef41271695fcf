// Command webapp is the sample application `capstan dev` runs as a service:
// GET / shows the task it runs in (from the task metadata endpoint) and
// whether it reached the instance's telemetry daemon, to which every request
// sends a counter. GET /daemon/metrics shows the daemon's metrics, as the
// app sees them.
//
// TELEMETRY_URL sets the daemon's address. Unset, it is http://daemon:8125,
// the name instances give their daemons; where that name does not resolve,
// the app tries the bridge gateway instead, which is where a daemon on the
// host's network is found.
//
//	TELEMETRY_URL=http://127.0.0.1:8125 go run ./examples/webapp
//
// It listens on :8080.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"
)

const defaultTelemetry = "http://daemon:8125"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	a := &app{
		metadataURI: os.Getenv("ECS_CONTAINER_METADATA_URI_V4"),
		telemetry:   os.Getenv("TELEMETRY_URL"),
		client:      &http.Client{Timeout: 2 * time.Second},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", a.index)
	mux.HandleFunc("GET /daemon/metrics", a.daemonMetrics)
	srv := &http.Server{Addr: ":8080", Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shut)
	}()
	log.Printf("webapp listening on %s", srv.Addr)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}

type app struct {
	metadataURI string
	telemetry   string // as configured; "" for the default
	client      *http.Client

	mu   sync.Mutex
	task *taskMetadata // once fetched; it does not change
}

type taskMetadata struct {
	Cluster  string `json:"Cluster"`
	TaskARN  string `json:"TaskARN"`
	Family   string `json:"Family"`
	Revision string `json:"Revision"`
}

type page struct {
	Task        *taskMetadata
	TaskErr     string
	Telemetry   string // URL tried
	Note        string // why that URL
	Reached     bool
	Reply       string // the daemon's answer, or the error
	RemoteAddr  string
	RequestedAt string
}

func (a *app) index(w http.ResponseWriter, r *http.Request) {
	p := page{RemoteAddr: r.RemoteAddr, RequestedAt: time.Now().UTC().Format(time.RFC3339)}
	task, err := a.metadata(r.Context())
	if err != nil {
		p.TaskErr = err.Error()
	}
	p.Task = task
	p.Telemetry, p.Note = a.telemetryURL(r.Context())
	p.Reply, err = a.send(r.Context(), p.Telemetry, task)
	p.Reached = err == nil
	if err != nil {
		p.Reply = err.Error()
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := pageTemplate.Execute(w, p); err != nil {
		log.Printf("render: %v", err)
	}
}

func (a *app) metadata(ctx context.Context) (*taskMetadata, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.task != nil {
		return a.task, nil
	}
	if a.metadataURI == "" {
		return nil, errors.New("ECS_CONTAINER_METADATA_URI_V4 is not set: not running as a task")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.metadataURI+"/task", nil)
	if err != nil {
		return nil, err
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("task metadata: %s", resp.Status)
	}
	var t taskMetadata
	if err := json.NewDecoder(resp.Body).Decode(&t); err != nil {
		return nil, fmt.Errorf("task metadata: %w", err)
	}
	a.task = &t
	return a.task, nil
}

func (a *app) daemonMetrics(w http.ResponseWriter, r *http.Request) {
	base, _ := a.telemetryURL(r.Context())
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, strings.TrimSuffix(base, "/")+"/metrics", nil)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	resp, err := a.client.Do(req)
	if err != nil {
		http.Error(w, "telemetry daemon: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}

// telemetryURL picks the daemon address and says why.
func (a *app) telemetryURL(ctx context.Context) (string, string) {
	if a.telemetry != "" {
		return a.telemetry, "from TELEMETRY_URL"
	}
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if _, err := net.DefaultResolver.LookupHost(ctx, "daemon"); err == nil {
		return defaultTelemetry, "the instance's daemon address"
	}
	if gw := defaultGateway(); gw != "" {
		return "http://" + net.JoinHostPort(gw, "8125"), `"daemon" does not resolve here, so the bridge gateway`
	}
	return defaultTelemetry, `"daemon" does not resolve and there is no default route`
}

// send posts one request counter, named after this task so the daemon's
// metrics tell the replicas apart.
func (a *app) send(ctx context.Context, base string, task *taskMetadata) (string, error) {
	source := "webapp"
	if task != nil && task.TaskARN != "" {
		source = task.Family + "/" + task.TaskARN[strings.LastIndex(task.TaskARN, "/")+1:]
	}
	u := strings.TrimSuffix(base, "/") + "/ingest?source=" + url.QueryEscape(source)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader("http_requests:1|c\n"))
	if err != nil {
		return "", err
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return strings.TrimSpace(string(body)), nil
}

// defaultGateway reads the IPv4 default route from /proc/net/route, whose
// addresses are little-endian hex.
func defaultGateway() string {
	b, err := os.ReadFile("/proc/net/route")
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) < 3 || f[1] != "00000000" || len(f[2]) != 8 {
			continue
		}
		var ip [4]byte
		if _, err := fmt.Sscanf(f[2], "%02x%02x%02x%02x", &ip[3], &ip[2], &ip[1], &ip[0]); err != nil {
			continue
		}
		return net.IP(ip[:]).String()
	}
	return ""
}

var pageTemplate = template.Must(template.New("page").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>Capstan sample web app</title>
<style>body{font-family:sans-serif;max-width:52em;margin:2em auto} dt{font-weight:bold} .ok{color:#070} .bad{color:#a00}</style>
</head><body>
<h1>Capstan sample web app</h1>
<h2>This task</h2>
{{if .Task}}<dl>
<dt>Task ARN</dt><dd id="task-arn">{{.Task.TaskARN}}</dd>
<dt>Family</dt><dd id="family">{{.Task.Family}}:{{.Task.Revision}}</dd>
<dt>Cluster</dt><dd>{{.Task.Cluster}}</dd>
</dl>{{else}}<p class="bad">No task metadata: {{.TaskErr}}</p>{{end}}
<h2>Telemetry daemon</h2>
<p id="telemetry" data-reached="{{.Reached}}" class="{{if .Reached}}ok{{else}}bad{{end}}">
{{if .Reached}}Reached{{else}}Not reached:{{end}} {{.Telemetry}} ({{.Note}}): {{.Reply}}</p>
<p><small>Request from {{.RemoteAddr}} at {{.RequestedAt}}</small></p>
</body></html>
`))
