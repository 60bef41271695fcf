package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
)

func logsNoun() *noun {
	return &noun{
		name:    "logs",
		summary: "Print a task's container output (or a service's or daemon's tasks'); --follow streams it.",
		run: &verb{
			args:    "TASK | --service NAME | --daemon NAME [--instance ID] [--container C] [--follow] [--since D] [--tail N] [--timestamps]",
			summary: "Print a container's output, read from its instance's agent.",
			details: `
The output is read from the instance's agent over its session with the
server: a stopped task's output can be read while its containers are kept
on the instance. --container names the container when the task has more
than one. --since takes a duration (10m) or an RFC 3339 time; --tail the
number of last lines to start with. --service and --daemon print every
running task's lines, each prefixed by its task ID and container; --instance
keeps the daemon's task on one instance. --follow prints new lines as they
come until interrupted (or, for one task, until it has stopped).
Standard error lines go to standard error. -o json prints one line per
output line with its task, container, stream and time.`,
			bind: logsRun,
		},
	}
}

type getTaskLogsInput struct {
	Cluster     string `json:"cluster,omitempty"`
	Task        string `json:"task"`
	Container   string `json:"container,omitempty"`
	StartTime   string `json:"startTime,omitempty"`
	NextToken   string `json:"nextToken,omitempty"`
	Tail        *int32 `json:"tail,omitempty"`
	WaitSeconds int32  `json:"waitSeconds,omitempty"`
	MaxBytes    int32  `json:"maxBytes,omitempty"`
}

type taskLogEvent struct {
	Timestamp string `json:"timestamp"`
	Stream    string `json:"stream"`
	Message   string `json:"message"`
}

type getTaskLogsOutput struct {
	Container  string         `json:"container"`
	Events     []taskLogEvent `json:"events"`
	NextToken  string         `json:"nextToken"`
	Truncated  bool           `json:"truncated"`
	TaskStatus string         `json:"taskStatus"`
}

// logsPageBytes keeps a page's answer within what callExtension reads.
const logsPageBytes = 256 << 10

func logsRun(fs *flag.FlagSet) action {
	var cluster, container, since, service, daemon, instance string
	var follow, timestamps bool
	var tail int
	fs.StringVar(&cluster, "cluster", "", "`cluster` (default: the default cluster)")
	fs.StringVar(&container, "container", "", "`container` name (needed when a task has more than one)")
	fs.StringVar(&since, "since", "", "only lines from `D` ago (10m, 2h) or since an RFC 3339 time")
	fs.IntVar(&tail, "tail", 0, "start with the last `N` lines")
	fs.BoolVar(&follow, "follow", false, "keep printing new lines until interrupted")
	fs.BoolVar(&timestamps, "timestamps", false, "print each line's time")
	fs.StringVar(&service, "service", "", "every running task of service `NAME`")
	fs.StringVar(&daemon, "daemon", "", "every running task of daemon `NAME`")
	fs.StringVar(&instance, "instance", "", "with --daemon, only the task on container instance `ID`")
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 0, 1, ""); err != nil {
			return err
		}
		chosen := 0
		for _, set := range []bool{len(args) == 1, service != "", daemon != ""} {
			if set {
				chosen++
			}
		}
		if chosen != 1 {
			return usageErrorf("give one of TASK, --service NAME or --daemon NAME")
		}
		if instance != "" && daemon == "" {
			return usageErrorf("--instance goes with --daemon")
		}
		if tail < 0 || tail > 10000 {
			return usageErrorf("--tail %d: want 1 to 10000", tail)
		}
		in := getTaskLogsInput{Cluster: cluster, Container: container, MaxBytes: logsPageBytes}
		if tail > 0 {
			in.Tail = aws.Int32(int32(tail))
		}
		if since != "" {
			at, err := parseSince(since, time.Now())
			if err != nil {
				return err
			}
			in.StartTime = at.UTC().Format(time.RFC3339Nano)
		}
		c, err := s.client(ctx)
		if err != nil {
			return err
		}
		tasks := args
		if len(args) == 0 {
			lt := &ecs.ListTasksInput{}
			if cluster != "" {
				lt.Cluster = aws.String(cluster)
			}
			if service != "" {
				lt.ServiceName = aws.String(service)
			} else {
				lt.DaemonName = aws.String(daemon)
				if instance != "" {
					lt.ContainerInstance = aws.String(instance)
				}
			}
			for p := ecs.NewListTasksPaginator(c, lt); p.HasMorePages(); {
				page, err := p.NextPage(ctx)
				if err != nil {
					return err
				}
				tasks = append(tasks, page.TaskArns...)
			}
			if len(tasks) == 0 {
				return fmt.Errorf("no running tasks of %s", strings.TrimSpace("service "+service+" daemon "+daemon))
			}
		}
		p := &logPrinter{s: s, timestamps: timestamps, prefix: len(args) == 0}
		if len(tasks) == 1 {
			return taskLogs(ctx, s, in, tasks[0], follow, p)
		}
		var wg sync.WaitGroup
		errs := make([]error, len(tasks))
		for i, t := range tasks {
			if !follow {
				errs[i] = taskLogs(ctx, s, in, t, false, p)
				continue
			}
			wg.Go(func() { errs[i] = taskLogs(ctx, s, in, t, true, p) })
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return err
			}
		}
		return nil
	}
}

// parseSince reads a duration before now or an RFC 3339 time.
func parseSince(v string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	return time.Time{}, usageErrorf("--since %q: want a duration (10m, 2h) or an RFC 3339 time (2026-01-02T15:04:05Z)", v)
}

// taskLogs prints one task's lines page by page; following, it asks again
// from the last line, waiting for new ones, until ctx ends or the task
// has stopped and printed its last line.
func taskLogs(ctx context.Context, s *session, in getTaskLogsInput, task string, follow bool, p *logPrinter) error {
	in.Task = task
	for {
		var out getTaskLogsOutput
		err := s.callExtension(ctx, "GetTaskLogs", in, &out)
		if err != nil {
			if follow && ctx.Err() != nil {
				return nil
			}
			return err
		}
		p.print(task, out)
		in.Tail, in.StartTime = nil, ""
		if out.NextToken != "" {
			in.NextToken = out.NextToken
		}
		if out.Truncated {
			in.WaitSeconds = 0
			continue
		}
		if !follow || (out.TaskStatus == "STOPPED" && in.WaitSeconds > 0 && len(out.Events) == 0) {
			return nil
		}
		in.WaitSeconds = 20
	}
}

type logPrinter struct {
	s          *session
	timestamps bool
	prefix     bool
	mu         sync.Mutex
}

func (p *logPrinter) print(task string, out getTaskLogsOutput) {
	p.mu.Lock()
	defer p.mu.Unlock()
	id := task[strings.LastIndexByte(task, '/')+1:]
	for _, e := range out.Events {
		if p.s.json() {
			b, _ := json.Marshal(struct {
				Task      string `json:"task"`
				Container string `json:"container"`
				taskLogEvent
			}{task, out.Container, e})
			fmt.Fprintln(p.s.stdout, string(b))
			continue
		}
		var b strings.Builder
		if p.prefix {
			fmt.Fprintf(&b, "[%s/%s] ", id, out.Container)
		}
		if p.timestamps {
			b.WriteString(e.Timestamp + " ")
		}
		b.WriteString(e.Message)
		w := p.s.stdout
		if e.Stream == "stderr" {
			w = p.s.stderr
		}
		fmt.Fprintln(w, b.String())
	}
}
