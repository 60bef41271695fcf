package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/events"
)

func eventsNoun() *noun {
	return &noun{
		name:    "events",
		summary: "Show recent events (tasks, instances, daemon deployments); --follow streams them.",
		run: &verb{
			args:    "[--cluster C] [--daemon NAME|ARN] [--type DETAIL-TYPE] [--follow]",
			summary: "Show a cluster's recent events, oldest first.",
			details: `
Events are ECS EventBridge events (source aws.ecs) the server keeps for an
hour. --type takes a detail type ("ECS Task State Change") or one of task,
instance, deployment, daemon-action, launch (failed instance launches).
--daemon keeps the events that name the daemon (its deployments and start
failures); a daemon given by ARN also names its cluster. --follow prints new events as they come until interrupted.
-o json prints one event per line, as EventBridge delivers it.`,
			bind: eventsRun,
		},
	}
}

var eventTypeAliases = map[string]string{
	"task":          events.TaskStateChange,
	"instance":      events.ContainerInstanceStateChange,
	"deployment":    events.DaemonDeploymentStateChange,
	"daemon-action": events.DaemonServiceAction,
	"launch":        events.CapacityProviderAction,
}

func eventType(v string) (string, error) {
	if t, ok := eventTypeAliases[strings.ToLower(v)]; ok {
		return t, nil
	}
	for _, t := range events.DetailTypes {
		if strings.EqualFold(v, t) {
			return t, nil
		}
	}
	return "", usageErrorf("--type %q: want task, instance, deployment, daemon-action, launch or a detail type (%s)", v, strings.Join(events.DetailTypes, ", "))
}

type listEventsInput struct {
	Cluster     string `json:"cluster"`
	After       string `json:"after,omitempty"`
	DetailType  string `json:"detailType,omitempty"`
	Resource    string `json:"resource,omitempty"`
	MaxResults  int    `json:"maxResults,omitempty"`
	WaitSeconds int    `json:"waitSeconds,omitempty"`
}

type listEventsOutput struct {
	Events []events.Event `json:"events"`
	Cursor string         `json:"cursor"`
}

// eventsPage is small enough that a page of large task events stays well
// within what callExtension reads.
const eventsPage = 100

func eventsRun(fs *flag.FlagSet) action {
	var cluster, daemon, typ string
	var follow bool
	fs.StringVar(&cluster, "cluster", "", "`cluster` (default: the default cluster, or the daemon's)")
	fs.StringVar(&daemon, "daemon", "", "only events about daemon `NAME|ARN`")
	fs.StringVar(&typ, "type", "", "only events of detail type `TYPE`")
	fs.BoolVar(&follow, "follow", false, "keep printing new events until interrupted")
	return func(ctx context.Context, s *session, args []string) error {
		if err := wantArgs(args, 0, 0, ""); err != nil {
			return err
		}
		in := listEventsInput{Cluster: cluster, MaxResults: eventsPage}
		if typ != "" {
			t, err := eventType(typ)
			if err != nil {
				return err
			}
			in.DetailType = t
		}
		c, err := s.client(ctx)
		if err != nil {
			return err
		}
		if daemon != "" {
			arn, err := resolveDaemon(ctx, c, daemon, cluster)
			if err != nil {
				return err
			}
			in.Resource = arn
			if in.Cluster == "" {
				in.Cluster, _ = daemonClusterName(arn)
			}
		}
		if in.Cluster == "" {
			in.Cluster = "default"
		}
		p := newEventPrinter(s)
		p.header()
		return readPages(ctx, s, follow, in.MaxResults, func(wait int) (out listEventsOutput, err error) {
			in.WaitSeconds = wait
			err = s.callExtension(ctx, "ListEvents", in, &out)
			return out, err
		}, func(out listEventsOutput) int {
			p.print(out.Events)
			in.After = out.Cursor
			return len(out.Events)
		})
	}
}

// readPages reads page after page with fetch, which asks the server to
// wait up to wait seconds for records, and hands each to use, which says
// how many records it had. Without follow it stops after a page of fewer
// than max; with follow it goes on until ctx ends, waiting 20 seconds a
// call after the first, and retries fetch while the server is away.
func readPages[P any](ctx context.Context, s *session, follow bool, max int, fetch func(wait int) (P, error), use func(P) int) error {
	backoff, wait := time.Second, 0
	for {
		page, err := fetch(wait)
		if follow && ctx.Err() != nil {
			return nil // interrupted: the normal end of --follow
		}
		var ae *apiError
		if err != nil && follow && !errors.As(err, &ae) {
			// The server is away (restarting, say): wait and fetch again
			// from the same cursor.
			s.warn("%v; retrying in %s", err, backoff)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		if err != nil {
			return err
		}
		backoff = time.Second
		if n := use(page); !follow && n < max {
			return nil
		}
		if follow {
			wait = 20
		}
	}
}

// eventPrinter writes events as table rows or JSON lines. Rows have fixed
// widths rather than a tabwriter's, so that followed rows line up.
//
// Every write of a task records an event, so a task whose health or
// desired status was written again has events that read the same as the
// one before; a row that repeats its resource's previous row is left out.
// An event seen twice (a page read again after a retry) prints once.
type eventPrinter struct {
	s    *session
	seen map[string]bool   // event IDs printed
	last map[string]string // resource → its last row's type and summary
}

func newEventPrinter(s *session) *eventPrinter {
	return &eventPrinter{s: s, seen: map[string]bool{}, last: map[string]string{}}
}

// fresh reports whether e says something not yet printed, and notes it.
func (p *eventPrinter) fresh(e events.Event) bool {
	if len(p.seen) > 100_000 {
		clear(p.seen) // a long --follow; by now old IDs will not come back
	}
	if e.ID != "" {
		if p.seen[e.ID] {
			return false
		}
		p.seen[e.ID] = true
	}
	// Only state changes repeat themselves; two failures are two events.
	if p.s.json() || e.DetailType != events.TaskStateChange && e.DetailType != events.ContainerInstanceStateChange {
		return true
	}
	subject, said := e.Subject(), e.DetailType+"\x00"+e.Summary()
	if p.last[subject] == said {
		return false
	}
	p.last[subject] = said
	return true
}

const eventRow = "%-25s  %-35s  %-56s  %s\n"

func (p *eventPrinter) header() {
	if !p.s.json() {
		fmt.Fprintf(p.s.stdout, eventRow, "TIME", "TYPE", "RESOURCE", "SUMMARY")
	}
}

func (p *eventPrinter) print(evs []events.Event) {
	for _, e := range evs {
		if !p.fresh(e) {
			continue
		}
		if p.s.json() {
			b, _ := json.Marshal(e)
			fmt.Fprintln(p.s.stdout, string(b))
			continue
		}
		at := e.Time
		if t, err := time.Parse(time.RFC3339, e.Time); err == nil {
			at = t.Local().Format(time.RFC3339)
		}
		clean := strings.NewReplacer("\t", " ", "\n", " ")
		fmt.Fprintf(p.s.stdout, eventRow, at, e.DetailType, shortArn(e.Subject()), clean.Replace(e.Summary()))
	}
}

// shortArn drops the ARN's partition, service, region and account:
// arn:aws:ecs:us-east-1:123456789012:task/c/id is task/c/id.
func shortArn(arn string) string {
	if !strings.HasPrefix(arn, "arn:") {
		return arn
	}
	parts := strings.SplitN(arn, ":", 6)
	return parts[len(parts)-1]
}
