package fault

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// proxy forwards TCP to the server and can partition single agent
// processes from it. A partitioned connection is not closed and loses no
// byte: what it carries is held until the partition heals, as TCP would
// retransmit it, so a short cut only delays a session while a long one
// lets both ends' silence limits end it. Connections are told apart by the
// process that owns the client socket.
type proxy struct {
	ln net.Listener

	mu     sync.Mutex
	target string // set once the server listens
	cond   *sync.Cond
	cut    map[int]bool // partitioned agent pids
	closed bool
	conns  []net.Conn
}

// startProxy listens at once, so that the server can advertise it; the
// server's own address comes later (setTarget), picked by the server
// itself: a port picked free here and bound by a server started after a
// build could be taken by then.
func startProxy(t *testing.T) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, cut: map[int]bool{}}
	p.cond = sync.NewCond(&p.mu)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) setTarget(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = addr
}

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		pid := socketOwner(c.RemoteAddr().(*net.TCPAddr).Port, p.ln.Addr().(*net.TCPAddr).Port)
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		if target == "" {
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		go p.pipe(up, c, pid)
		go p.pipe(c, up, pid)
	}
}

// pipe copies src to dst, holding data (and the close) while pid is cut.
func (p *proxy) pipe(dst, src net.Conn, pid int) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if !p.wait(pid) {
			return
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// wait blocks while pid is partitioned; false when the proxy closed.
func (p *proxy) wait(pid int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.cut[pid] && !p.closed {
		p.cond.Wait()
	}
	return !p.closed
}

// partition cuts the agent process pid off the server; heal ends it.
func (p *proxy) partition(pid int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut[pid] = true
}

func (p *proxy) heal(pid int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.cut, pid)
	p.cond.Broadcast()
}

func (p *proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for _, c := range p.conns {
		c.Close()
	}
	p.cond.Broadcast()
	p.mu.Unlock()
}

// socketOwner finds the process holding the client end of a loopback
// connection from port to serverPort: its inode from /proc/net/tcp, then
// the process with that socket open. 0 when not found.
func socketOwner(port, serverPort int) int {
	local := fmt.Sprintf("0100007F:%04X", port)
	remote := fmt.Sprintf("0100007F:%04X", serverPort)
	inode := ""
	if fh, err := os.Open("/proc/net/tcp"); err == nil {
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) > 9 && fs[1] == local && fs[2] == remote {
				inode = fs[9]
			}
		}
		fh.Close()
	}
	if inode == "" || inode == "0" {
		return 0
	}
	want := "socket:[" + inode + "]"
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range procs {
		fds, err := os.ReadDir(filepath.Join(dir, "fd"))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if l, err := os.Readlink(filepath.Join(dir, "fd", fd.Name())); err == nil && l == want {
				pid, _ := strconv.Atoi(filepath.Base(dir))
				return pid
			}
		}
	}
	return 0
}
