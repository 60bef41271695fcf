package agent

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"

	"github.com/capstanhq/capstan/internal/agent/state"
)

// listenMetadata opens the task metadata endpoint's listener on addr and
// returns the address it took. With port 0 (several agents on one host)
// it takes the port it had before, recorded in the agent's database: the
// containers it adopts after a restart hold a URI with that port in their
// environment. Only when that port is taken does it pick a new one.
func listenMetadata(db *state.DB, addr string, log *slog.Logger) (net.Listener, string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port != "0" {
		ln, err := net.Listen("tcp", addr)
		return ln, addr, err
	}
	prev, err := db.MetadataPort()
	if err != nil {
		return nil, "", err
	}
	if prev != 0 {
		again := net.JoinHostPort(host, strconv.Itoa(prev))
		ln, err := net.Listen("tcp", again)
		if err == nil {
			return ln, again, nil
		}
		log.Warn("the task metadata endpoint's port of the last start is taken; picking a new one: containers started before keep a metadata URI that no longer answers",
			"port", prev, "err", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", err
	}
	taken := ln.Addr().(*net.TCPAddr).Port
	if err := db.SetMetadataPort(taken); err != nil {
		ln.Close()
		return nil, "", fmt.Errorf("record the task metadata port: %w", err)
	}
	return ln, net.JoinHostPort(host, strconv.Itoa(taken)), nil
}
