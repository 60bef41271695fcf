package store

import (
	"context"
	"log/slog"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// etcdLogger passes the embedded member's warnings and errors to the
// server's log: slow disks, long applies, alarms, and the last words of a
// member that ends the process (a write that met a full disk).
func etcdLogger(log *slog.Logger) *zap.Logger {
	return zap.New(&slogCore{log: log, min: zapcore.WarnLevel})
}

// slogCore is a zap core writing to a slog logger.
type slogCore struct {
	log    *slog.Logger
	min    zapcore.Level
	fields []zapcore.Field
}

func (c *slogCore) Enabled(l zapcore.Level) bool { return l >= c.min }

func (c *slogCore) With(fs []zapcore.Field) zapcore.Core {
	return &slogCore{log: c.log, min: c.min, fields: append(append([]zapcore.Field(nil), c.fields...), fs...)}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

// etcdNoise are warnings etcd gives at every start that do not apply to
// the embedded member: it serves a unix socket only, without etcd's auth.
var etcdNoise = map[string]bool{
	"Running http and grpc server on single port. This is not recommended for production.": true,
	"simple token is not cryptographically signed":                                         true,
}

func (c *slogCore) Write(e zapcore.Entry, fs []zapcore.Field) error {
	if e.Level < zapcore.ErrorLevel && etcdNoise[e.Message] {
		return nil
	}
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fs {
		f.AddTo(enc)
	}
	attrs := make([]slog.Attr, 0, len(enc.Fields)+1)
	attrs = append(attrs, slog.String("component", "etcd"))
	for k, v := range enc.Fields {
		attrs = append(attrs, slog.Any(k, v))
	}
	lvl := slog.LevelWarn
	if e.Level > zapcore.WarnLevel {
		lvl = slog.LevelError
	}
	c.log.LogAttrs(context.Background(), lvl, "etcd: "+e.Message, attrs...)
	return nil
}

func (c *slogCore) Sync() error { return nil }
