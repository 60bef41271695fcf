package audit

import (
	"cmp"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/store"
)

// Records are stored in pages, as events are: the records of one write are
// one key, "audit/<first eventID>.<count>", so that a busy API costs one
// etcd write per batch and listing or trimming reads keys, not values.
const prefix = "audit/"

// page is a page's stored value, its records in eventID order.
type page struct {
	Records []Event `json:"records"`
}

func pageKey(first string, n int) string { return prefix + first + "." + strconv.Itoa(n) }

// pageOf parses a page's key (without the prefix) into its first eventID
// and record count.
func pageOf(name string) (first string, n int) {
	id, count, _ := strings.Cut(name, ".")
	n, err := strconv.Atoi(count)
	if err != nil || n < 1 {
		return id, 1
	}
	return id, n
}

// ids hands out UUIDv7s (RFC 9562): the millisecond leads, so they sort by
// the time they were taken, and a counter in the next 12 bits keeps one
// process's IDs strictly increasing within a millisecond.
type ids struct {
	mu    sync.Mutex
	ms    int64
	count uint16
}

func (g *ids) next(now time.Time) string {
	g.mu.Lock()
	ms := now.UnixMilli()
	switch {
	case ms > g.ms:
		var b [2]byte
		rand.Read(b[:])
		g.ms, g.count = ms, binary.BigEndian.Uint16(b[:])&0x7ff // room to count up
	case g.count == 0xfff:
		g.ms, g.count = g.ms+1, 0 // borrow the next millisecond
	default:
		g.count++ // same millisecond, or the clock stepped back
	}
	ms, count := g.ms, g.count
	g.mu.Unlock()
	var b [16]byte
	rand.Read(b[8:])
	binary.BigEndian.PutUint64(b[:8], uint64(ms)<<16|0x7000|uint64(count))
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

var idPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// idFloor is a key fragment that sorts before every ID taken at or after t.
func idFloor(t time.Time) string {
	ms := max(t.UnixMilli(), 0)
	return fmt.Sprintf("%08x-%04x", uint64(ms)>>16, uint64(ms)&0xffff)
}

func idTime(id string) time.Time {
	if len(id) < 13 {
		return time.Time{}
	}
	hi, _ := strconv.ParseUint(id[0:8], 16, 64)
	lo, _ := strconv.ParseUint(id[9:13], 16, 64)
	return time.UnixMilli(int64(hi<<16 | lo))
}

// Cursor marks how far a reader has got: every record with an eventID up
// to id that was committed by store revision rev has been returned or
// filtered out. Records are written a moment after their IDs are taken,
// so one committed late may sort before the cursor; the revision finds it.
type Cursor struct {
	id     string
	rev    int64
	hasRev bool
}

func (c Cursor) String() string {
	if c.id == "" && !c.hasRev {
		return ""
	}
	return c.id + "@" + strconv.FormatInt(c.rev, 10)
}

// ParseCursor reads a nextToken from an earlier listing, or a bare eventID
// (everything up to it counts as seen).
func ParseCursor(s string) (Cursor, error) {
	if s == "" {
		return Cursor{}, nil
	}
	bad := fault.Invalid("nextToken", "must be a nextToken returned by ListAuditEvents or an eventID (got %q)", clip(s, 80))
	id, rev, hasRev := strings.Cut(s, "@")
	c := Cursor{id: id, hasRev: hasRev}
	if id != "" && !idPattern.MatchString(id) || id == "" && !hasRev {
		return Cursor{}, bad
	}
	if hasRev {
		n, err := strconv.ParseInt(rev, 10, 64)
		if err != nil || n < 0 {
			return Cursor{}, bad
		}
		c.rev = n
	}
	return c, nil
}

// merge yields stored records in eventID order from pages read in key
// order. Several servers' pages may interleave; a page's records all sort
// at or after its key, so a record can go once the next page's first ID is
// past it.
type merge struct {
	buf []stored
}

// stored is a record with the revision of the page that holds it.
type stored struct {
	ev  Event
	rev int64
}

func (m *merge) add(p store.Item[page]) []stored {
	first, _ := pageOf(p.Key[len(prefix):])
	for _, ev := range p.Value.Records {
		m.buf = append(m.buf, stored{ev, p.Rev})
	}
	slices.SortFunc(m.buf, func(a, b stored) int { return cmp.Compare(a.ev.EventID, b.ev.EventID) })
	i := 0
	for i < len(m.buf) && m.buf[i].ev.EventID < first {
		i++
	}
	return m.take(i)
}

// rest returns what is left once no page follows.
func (m *merge) rest() []stored { return m.take(len(m.buf)) }

func (m *merge) take(n int) []stored {
	out := slices.Clone(m.buf[:n])
	m.buf = slices.Delete(m.buf, 0, n)
	return out
}
