package dev

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// printer writes progress lines stamped with the time since the start.
type printer struct {
	mu    sync.Mutex
	w     io.Writer
	began time.Time
}

func newPrinter(w io.Writer) *printer { return &printer{w: w, began: time.Now()} }

func (p *printer) step(format string, args ...any) { p.write("", format, args...) }
func (p *printer) warn(format string, args ...any) { p.write("warning: ", format, args...) }

func (p *printer) write(prefix, format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "[%5.1fs] %s%s\n", time.Since(p.began).Seconds(), prefix, fmt.Sprintf(format, args...))
}

// summary is what a newcomer reads: what runs, where, and what to try.
func (p *printer) summary(st Status) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.w
	fmt.Fprintf(w, "\nCapstan dev is running. Ctrl-C stops it and everything it started.\n\n")
	table(w, st)
	if st.Telemetry != "" {
		verdict := "does not reach"
		if st.TelemetryReached {
			verdict = "reaches"
		}
		fmt.Fprintf(w, "\n  The web app %s the telemetry daemon: %s\n", verdict, st.Telemetry)
	}

	api := "--endpoint-url " + st.Endpoint
	// The secret is read from its 0600 file by the shell, not printed:
	// terminals, scrollback and collected logs keep what is shown.
	file := filepath.Join(st.DataDir, "admin-credentials.json")
	fmt.Fprintf(w, "\nCredentials for the AWS CLI and the capstan CLI (the secret stays in %s):\n\n", file)
	fmt.Fprintf(w, "  export AWS_ACCESS_KEY_ID=%s\n", st.AccessKeyID)
	fmt.Fprintf(w, "  export AWS_SECRET_ACCESS_KEY=\"$(%s)\"\n", secretCommand(file))
	fmt.Fprintf(w, "  export AWS_DEFAULT_REGION=%s\n", st.Region)
	fmt.Fprintf(w, "  export CAPSTAN_ENDPOINT=%s\n", st.Endpoint)
	fmt.Fprintf(w, "\nThen try:\n\n")
	for _, t := range st.Web {
		if t.URL != "" {
			fmt.Fprintf(w, "  curl %s/\n", t.URL)
			fmt.Fprintf(w, "  curl %s/daemon/metrics    # the daemon's metrics, through the app\n", t.URL)
			break
		}
	}
	fmt.Fprintf(w, "  go run ./cmd/capstan dev urls      # what runs where now: tasks are replaced, and their URLs change\n")
	fmt.Fprintf(w, "  go run ./cmd/capstan daemon describe telemetry --cluster %s\n", st.Cluster)
	fmt.Fprintf(w, "  go run ./cmd/capstan events --cluster %s --follow\n", st.Cluster)
	fmt.Fprintf(w, "  aws ecs describe-services --cluster %s --services web %s\n", st.Cluster, api)
	fmt.Fprintf(w, "  aws ecs list-tasks --cluster %s %s\n", st.Cluster, api)
	fmt.Fprintf(w, "  aws ecs list-daemons --cluster-arn %s %s\n", st.Cluster, api)
	fmt.Fprintf(w, "  aws ecs update-service --cluster %s --service web --desired-count 3 %s\n", st.Cluster, api)
	fmt.Fprintf(w, "\nLogs: %s\n\n", strings.Join(st.Logs, ", "))
}

// secretCommand is a POSIX shell command printing the secret kept in the
// server's credential file (one member a line, as the server writes it).
func secretCommand(file string) string {
	return `sed -n 's/^ *"secretAccessKey": *"\([^"]*\)".*/\1/p' ` + shellQuote(file)
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// table lists the API, instances and tasks with their URLs.
func table(w io.Writer, st Status) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "  API\t%s\tcluster %s\n", st.Endpoint, st.Cluster)
	fmt.Fprintf(tw, "  console\t%s/console/\tsign in with the access key below\n", st.Endpoint)
	for _, in := range st.Instances {
		conn := "agent connected"
		switch {
		case in.Status == "INACTIVE":
			conn = "deregistered"
		case !in.Connected:
			conn = "agent not connected"
		}
		fmt.Fprintf(tw, "  instance\t%s\t%s, %s\n", in.ID, in.Status, conn)
	}
	for _, t := range st.Daemon {
		fmt.Fprintf(tw, "  daemon telemetry\ttask %s\t%s %s\n", t.ID, t.Status, t.Health)
	}
	for _, t := range st.Web {
		fmt.Fprintf(tw, "  service web\ttask %s\t%s %s\n", t.ID, t.Status, t.URL)
	}
	tw.Flush()
}

// warnings passes the server's warnings and errors on to the user as well
// as to the log: when an instance fails to start, its reason is there.
type warnings struct {
	slog.Handler
	out   *printer
	attrs []slog.Attr
	// stopping is set when dev stops the server: what its parts say
	// while shutting down (etcd's closed listeners) is no news.
	stopping *atomic.Bool
}

func (h *warnings) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn && !h.stopping.Load() {
		var b strings.Builder
		b.WriteString("server: " + r.Message)
		add := func(a slog.Attr) bool {
			v := strings.TrimSpace(a.Value.String())
			// A multi-line value (an agent's log tail) ends with its point.
			if i := strings.LastIndexByte(v, '\n'); i >= 0 {
				v = v[i+1:]
			}
			fmt.Fprintf(&b, " %s=%s", a.Key, v)
			return true
		}
		for _, a := range h.attrs {
			add(a)
		}
		r.Attrs(add)
		line := b.String()
		if len(line) > 400 {
			line = line[:400] + "..."
		}
		h.out.warn("%s", line)
	}
	return h.Handler.Handle(ctx, r)
}

func (h *warnings) WithAttrs(as []slog.Attr) slog.Handler {
	return &warnings{Handler: h.Handler.WithAttrs(as), out: h.out, attrs: append(slices.Clip(h.attrs), as...), stopping: h.stopping}
}

func (h *warnings) WithGroup(name string) slog.Handler {
	return &warnings{Handler: h.Handler.WithGroup(name), out: h.out, attrs: h.attrs, stopping: h.stopping}
}
