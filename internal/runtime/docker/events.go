package docker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/client"

	"github.com/capstanhq/capstan/internal/runtime"
)

// eventActions are the container actions passed on; the engine also
// reports exec, attach, resize and more, which the agent has no use for
// (a health check alone makes three exec events per probe).
var eventActions = []string{
	runtime.EventCreate, runtime.EventStart, runtime.EventDie, runtime.EventStop,
	runtime.EventKill, runtime.EventOOM, runtime.EventDestroy, runtime.EventHealth,
}

// attrNotLabels are the actor attributes the engine adds beside the
// container's labels.
var attrNotLabels = map[string]bool{"image": true, "name": true, "exitCode": true, "signal": true, "execDuration": true}

// Events streams container events from the moment it returns. The events
// channel closes when the stream ends; the error channel, buffered, has
// then received its one value: nil if ctx ended, else why the stream broke.
func (r *Runtime) Events(ctx context.Context) (<-chan runtime.Event, <-chan error) {
	f := client.Filters{}
	f.Add("type", string(events.ContainerEventType))
	f.Add("event", eventActions...)
	// The engine flushes the response head before it subscribes; asking
	// for events since now replays any that fall in that gap.
	since := time.Now().UTC().Format(time.RFC3339Nano)
	res := r.c.Events(ctx, client.EventsListOptions{Since: since, Filters: f})

	out := make(chan runtime.Event)
	errc := make(chan error, 1)
	go func() {
		defer close(out)
		for {
			select {
			case m := <-res.Messages:
				ev, ok := toEvent(m)
				if !ok {
					continue
				}
				select {
				case out <- ev:
				case <-ctx.Done():
					errc <- nil
					return
				}
			case err := <-res.Err:
				if ctx.Err() != nil {
					err = nil
				} else if err == nil {
					err = errors.New("docker events: stream closed")
				} else {
					err = fmt.Errorf("docker events: %w", err)
				}
				errc <- err
				return
			case <-ctx.Done():
				errc <- nil
				return
			}
		}
	}()
	return out, errc
}

// toEvent maps an engine message; ok is false for anything not passed on.
func toEvent(m events.Message) (runtime.Event, bool) {
	if m.Type != events.ContainerEventType {
		return runtime.Event{}, false
	}
	action, detail, _ := strings.Cut(string(m.Action), ":")
	ev := runtime.Event{ContainerID: m.Actor.ID, Action: action}
	switch action {
	case runtime.EventCreate, runtime.EventStart, runtime.EventStop, runtime.EventKill,
		runtime.EventOOM, runtime.EventDestroy:
	case runtime.EventDie:
		if code, err := strconv.Atoi(m.Actor.Attributes["exitCode"]); err == nil {
			ev.ExitCode = code
		}
	case runtime.EventHealth:
		ev.Health = strings.TrimSpace(detail)
		if ev.Health != runtime.HealthStarting && ev.Health != runtime.HealthHealthy && ev.Health != runtime.HealthUnhealthy {
			return runtime.Event{}, false // e.g. newer engines' "running" probe notice
		}
	default:
		return runtime.Event{}, false
	}
	for k, v := range m.Actor.Attributes {
		if attrNotLabels[k] {
			continue
		}
		if ev.Labels == nil {
			ev.Labels = map[string]string{}
		}
		ev.Labels[k] = v
	}
	switch {
	case m.TimeNano != 0:
		ev.Time = time.Unix(0, m.TimeNano)
	case m.Time != 0:
		ev.Time = time.Unix(m.Time, 0)
	}
	return ev, true
}
