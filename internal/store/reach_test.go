package store

import (
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// holdProxy forwards a unix socket to another; cut, it holds every byte
// both ways, as a partition does (connections stay open and silent).
type holdProxy struct {
	ln   net.Listener
	mu   sync.Mutex
	cond *sync.Cond
	cut  bool
	done bool
}

func startHoldProxy(t *testing.T, target string) *holdProxy {
	t.Helper()
	path := filepath.Join(t.TempDir(), "proxy.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	p := &holdProxy{ln: ln}
	p.cond = sync.NewCond(&p.mu)
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		p.done = true
		for _, c := range conns {
			c.Close()
		}
		p.cond.Broadcast()
		p.mu.Unlock()
	})
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("unix", target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			conns = append(conns, in, out)
			p.mu.Unlock()
			go p.pipe(in, out)
			go p.pipe(out, in)
		}
	}()
	return p
}

func (p *holdProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		for p.cut && !p.done {
			p.cond.Wait()
		}
		p.mu.Unlock()
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				dst.Close()
			}
			return
		}
	}
}

func (p *holdProxy) setCut(cut bool) {
	p.mu.Lock()
	p.cut = cut
	p.cond.Broadcast()
	p.mu.Unlock()
}

// A store cut off from its etcd member: reads that bypass the cache and
// lease grants give up with ErrUnavailable (commitTimeout) rather than
// hang, as transactions do; Reachable turns false with the reason and
// true again once etcd answers.
func TestCutOffStoreIsUnavailable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	m, err := StartMember(ctx, MemberConfig{Dir: t.TempDir(), CompactEvery: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p := startHoldProxy(t, strings.TrimPrefix(m.ClientURL(), "unix://"))
	s, err := Open(ctx, Config{Endpoints: []string{"unix://" + p.ln.Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Txn().Put("r/a", obj{"x", 1}).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, why := s.Reachable(); !ok {
		t.Fatalf("a store that just wrote is unreachable: %s", why)
	}
	changed := s.ReachChanged()

	p.setCut(true)
	// The caller's deadline is far: only the store's own bound ends these.
	calls := map[string]func() error{
		"read from etcd": func() error { _, err := s.RawJSON(ctx, "r/a"); return err },
		"schema":         func() error { _, _, err := s.Schema(ctx); return err },
		"lease grant":    func() error { _, err := s.Grant(ctx, 10*time.Second); return err },
		"txn":            func() error { _, err := s.Txn().Put("r/b", obj{"y", 2}).Commit(ctx); return err },
	}
	var wg sync.WaitGroup
	for name, call := range calls {
		wg.Go(func() {
			err := call()
			if !errors.Is(err, ErrUnavailable) {
				t.Errorf("%s cut off from etcd: %v; want ErrUnavailable", name, err)
				return
			}
			if msg, ok := UnavailableMessage(err); !ok || !strings.HasPrefix(msg, ErrUnavailable.Error()) {
				t.Errorf("%s: UnavailableMessage(%v) = %q, %v", name, err, msg, ok)
			}
		})
	}
	wg.Wait()
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("Reachable never changed while cut off")
	}
	if ok, why := s.Reachable(); ok || !strings.HasPrefix(why, "the store (etcd) is unavailable: no quorum, or not reachable from this server: no answer for ") {
		t.Errorf("cut off: Reachable() = %v, %q; want false with the reason", ok, why)
	}

	changed = s.ReachChanged()
	p.setCut(false)
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("Reachable never changed back after the cut healed")
	}
	if ok, why := s.Reachable(); !ok {
		t.Errorf("healed: Reachable() = false, %q", why)
	}
	if b, err := s.RawJSON(ctx, "r/a"); err != nil || !strings.Contains(string(b), `"x"`) {
		t.Errorf("read after the heal: %s, %v", b, err)
	}
}
