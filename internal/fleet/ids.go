package fleet

import (
	"crypto/rand"
	"strconv"
	"sync"
	"time"
)

// idSource hands out identifiers that sort by creation time, so listing a
// key prefix yields objects oldest first.
type idSource struct {
	mu   sync.Mutex
	now  func() time.Time
	last int64
}

func newIDSource(now func() time.Time) *idSource { return &idSource{now: now} }

func (s *idSource) next() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.now().UnixNano()
	if n <= s.last {
		n = s.last + 1
	}
	s.last = n
	return n
}

// numeric is a 19-digit decimal id (daemon revisions use this form).
func (s *idSource) Numeric() string { return strconv.FormatInt(s.next(), 10) }

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// alnum is a 21-character id: 11 time characters then 10 random ones.
func (s *idSource) Alnum() string {
	n := s.next()
	var b [21]byte
	for i := 10; i >= 0; i-- {
		b[i] = base62[n%62]
		n /= 62
	}
	var r [10]byte
	rand.Read(r[:])
	for i, x := range r {
		b[11+i] = base62[int(x)%62]
	}
	return string(b[:])
}
