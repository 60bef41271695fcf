package session

import "sync"

// endpoints is the list of servers a session may open on, and which one it
// uses now. A session stays with the server that answered until that
// server fails it; then the next one in the list is tried.
type endpoints struct {
	mu      sync.Mutex
	list    []string
	at      int
	untried int // endpoints not yet tried since a session last opened
}

func newEndpoints(one string, several []string) *endpoints {
	list := several
	if len(list) == 0 {
		list = []string{one}
	}
	return &endpoints{list: list, untried: len(list)}
}

// current is the endpoint to dial.
func (e *endpoints) current() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.list[e.at]
}

// opened records that a session opened on the current endpoint.
func (e *endpoints) opened() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.untried = len(e.list)
}

// next moves to the following endpoint after a failure, and reports
// whether it has not been tried since a session last opened: such a
// server is tried at once, while a whole round of failures backs off.
func (e *endpoints) next() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.at = (e.at + 1) % len(e.list)
	e.untried--
	if e.untried <= 0 {
		e.untried = len(e.list)
		return false
	}
	return true
}
