package server

import (
	"context"
	"strings"

	"github.com/capstanhq/capstan/internal/audit"
	"github.com/capstanhq/capstan/internal/gateway"
	"github.com/capstanhq/capstan/internal/ops"
	"github.com/capstanhq/capstan/internal/protocol"
)

// execRelay starts ExecuteCommand's sessions through the gateway.
type execRelay struct{ gw *gateway.Gateway }

func (r execRelay) OpenExec(ctx context.Context, cluster, instance string, st protocol.ExecStart) (ops.ExecConn, error) {
	es, err := r.gw.Exec(ctx, cluster, instance, st)
	if err != nil {
		return nil, err
	}
	return es, nil
}

// opsExecConfig: sessions stream from this server's own address (ws:// or
// wss:// as its API is served) and are recorded in the audit trail.
func opsExecConfig(gw *gateway.Gateway, trail *audit.Trail, url string) ops.ExecConfig {
	return ops.ExecConfig{Relay: execRelay{gw}, StreamURL: "ws" + strings.TrimPrefix(url, "http"), Record: trail.RecordExecSession}
}
