package control

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/capstanhq/capstan/internal/events"
	"github.com/capstanhq/capstan/internal/store"
)

// Events are stored in pages: the events of a cluster that one write
// records (up to maxEventBatch) are one etcd key, not one key each. A
// rollout of 5,000 instances recorded ~118,000 task and instance events,
// and the limit deleted as many: 46% of all the keys it put and deleted,
// each a raft entry, an index entry, a watch event and a tombstone for
// etcd to compact. A page's key is its first (lowest) event ID and its
// count, "<id>.<n>", so listing and trimming read no value.

// eventPage is the stored value of a page, its events in ID order.
type eventPage struct {
	Events []events.Event `json:"events"`
}

// eventPageKey is the key of a page of n events whose lowest ID is first.
func eventPageKey(cluster, first string, n int) string {
	return store.EventKey(cluster, first) + "." + strconv.Itoa(n)
}

// eventPageOf parses a page's key (without the cluster's prefix) into its
// first event ID and count. A key without a count is an event stored
// alone, as servers before pages wrote them.
func eventPageOf(name string) (first string, n int) {
	id, count, paged := strings.Cut(name, ".")
	if !paged {
		return name, 1
	}
	n, err := strconv.Atoi(count)
	if err != nil || n < 1 {
		return id, 1
	}
	return id, n
}

// pageEvents decodes a stored page, or a lone event of an older server.
func pageEvents(name string, raw eventRecord) []events.Event {
	if strings.Contains(name, ".") {
		return raw.Events
	}
	return []events.Event{raw.Event}
}

// eventRecord decodes either form: a page ({"events": [...]}) or a lone
// event (its own fields).
type eventRecord struct {
	eventPage
	events.Event
}

// newEventPages groups a write's events by cluster into pages, each in ID
// order with the lease of its newest event's bucket, so that every event
// of the page lives at least the retention.
func newEventPages(batch []*pendingEvent) map[string][]*pendingEvent {
	out := map[string][]*pendingEvent{}
	for _, p := range batch {
		out[p.cluster] = append(out[p.cluster], p)
	}
	for _, ps := range out {
		slices.SortFunc(ps, func(a, b *pendingEvent) int { return strings.Compare(a.ev.ID, b.ev.ID) })
	}
	return out
}

// storedEventCount is how many events a cluster keeps, from its pages'
// keys.
func storedEventCount(ctx context.Context, st *store.Store, cluster string) (int, error) {
	prefix := store.EventPrefix(cluster)
	keys, _, err := store.Keys(ctx, st, prefix, "", 0)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, k := range keys {
		_, c := eventPageOf(k[len(prefix):])
		n += c
	}
	return n, nil
}

// eventMerge yields a cluster's stored events in ID order from its pages
// read in key order. Pages written by one server do not overlap, but
// several servers' pages may interleave; a page's events all sort at or
// after its key, so an event can go once the next page's first ID is past
// it.
type eventMerge struct {
	buf []storedEvent
}

// storedEvent is an event with the revision of the page that holds it.
type storedEvent struct {
	ev  events.Event
	rev int64
}

// add takes in a page and returns, in order, the events no later page can
// precede.
func (m *eventMerge) add(first string, rev int64, evs []events.Event) []storedEvent {
	for _, ev := range evs {
		m.buf = append(m.buf, storedEvent{ev, rev})
	}
	slices.SortFunc(m.buf, func(a, b storedEvent) int { return cmp.Compare(a.ev.ID, b.ev.ID) })
	i := 0
	for i < len(m.buf) && m.buf[i].ev.ID < first {
		i++
	}
	return m.take(i)
}

// rest returns what is left once no page follows.
func (m *eventMerge) rest() []storedEvent { return m.take(len(m.buf)) }

func (m *eventMerge) take(n int) []storedEvent {
	out := slices.Clone(m.buf[:n])
	m.buf = slices.Delete(m.buf, 0, n)
	return out
}

// readEventPages reads the pages of prefix after the key `after`, up to
// limit of them, and returns them with their names (keys without the
// prefix), in key order.
func readEventPages(ctx context.Context, st *store.Store, prefix, after string, limit int) (pages []store.Item[eventRecord], more bool, err error) {
	items, more, err := store.List[eventRecord](ctx, st, prefix, after, limit)
	if err != nil {
		return nil, false, fmt.Errorf("read events: %w", err)
	}
	return items, more, nil
}

// storedEvents lists every event a cluster keeps, in ID order.
func storedEvents(ctx context.Context, st *store.Store, cluster string) ([]events.Event, error) {
	prefix := store.EventPrefix(cluster)
	pages, _, err := readEventPages(ctx, st, prefix, "", 0)
	if err != nil {
		return nil, err
	}
	var m eventMerge
	var out []events.Event
	for _, p := range pages {
		name := p.Key[len(prefix):]
		first, _ := eventPageOf(name)
		for _, se := range m.add(first, p.Rev, pageEvents(name, p.Value)) {
			out = append(out, se.ev)
		}
	}
	for _, se := range m.rest() {
		out = append(out, se.ev)
	}
	return out, nil
}
