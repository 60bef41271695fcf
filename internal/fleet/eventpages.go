package fleet

import (
	"cmp"
	"context"
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
// order.
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
		n += pageCount(prefix, k)
	}
	return n, nil
}

// pageCount is how many events the page at key holds.
func pageCount(prefix, key string) int {
	_, n := eventPageOf(key[len(prefix):])
	return n
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

// addPage is add for a page as read from the store under prefix.
func (m *eventMerge) addPage(prefix string, p store.Item[eventRecord]) []storedEvent {
	name := p.Key[len(prefix):]
	first, _ := eventPageOf(name)
	return m.add(first, p.Rev, pageEvents(name, p.Value))
}

// rest returns what is left once no page follows.
func (m *eventMerge) rest() []storedEvent { return m.take(len(m.buf)) }

func (m *eventMerge) take(n int) []storedEvent {
	out := slices.Clone(m.buf[:n])
	m.buf = slices.Delete(m.buf, 0, n)
	return out
}

// storedEvents lists every event a cluster keeps, in ID order.
func storedEvents(ctx context.Context, st *store.Store, cluster string) ([]events.Event, error) {
	prefix := store.EventPrefix(cluster)
	pages, _, err := store.List[eventRecord](ctx, st, prefix, "", 0)
	if err != nil {
		return nil, err
	}
	var m eventMerge
	var out []events.Event
	for _, p := range pages {
		for _, se := range m.addPage(prefix, p) {
			out = append(out, se.ev)
		}
	}
	for _, se := range m.rest() {
		out = append(out, se.ev)
	}
	return out, nil
}
