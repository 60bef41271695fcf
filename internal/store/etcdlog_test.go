package store

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"go.uber.org/zap"
)

func TestEtcdLogReachesTheServersLogAtWarn(t *testing.T) {
	var buf bytes.Buffer
	lg := etcdLogger(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	lg.Info("applied entries")
	lg.Warn("simple token is not cryptographically signed")
	lg.With(zap.String("member", "m1")).Warn("slow fdatasync", zap.Duration("took", 2e9))
	lg.Error("failed to commit tx", zap.Error(errTest("no space left on device")))
	out := buf.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("want the warning and the error only, got:\n%s", out)
	}
	for _, want := range []string{`"level":"WARN"`, `"msg":"etcd: slow fdatasync"`, `"component":"etcd"`, `"member":"m1"`, `"took"`} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("warning lacks %s: %s", want, lines[0])
		}
	}
	for _, want := range []string{`"level":"ERROR"`, `"msg":"etcd: failed to commit tx"`, `no space left on device`} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("error lacks %s: %s", want, lines[1])
		}
	}
}

type errTest string

func (e errTest) Error() string { return string(e) }
