package store

import "context"

// Yield lets a caller holding a share of something bounded (the gateway's
// admission of agent messages) give it back while the store makes it wait:
// for a commit, for the cache to catch up, between retries. The share then
// bounds only the callers using the cores, not those waiting on etcd.
type Yield struct {
	Leave func()
	Enter func(context.Context) error
}

type yieldKey struct{}

// WithYield returns ctx whose waits in the store give y's share back.
func WithYield(ctx context.Context, y *Yield) context.Context {
	return context.WithValue(ctx, yieldKey{}, y)
}

// waiting runs wait, a wait on etcd or the cache, with the caller's share
// given back meanwhile.
func waiting(ctx context.Context, wait func() error) error {
	y, _ := ctx.Value(yieldKey{}).(*Yield)
	if y == nil {
		return wait()
	}
	y.Leave()
	err := wait()
	if eerr := y.Enter(ctx); err == nil {
		err = eerr
	}
	return err
}

// Waiting runs wait, a wait on something other than the cores (an event
// write, say), with the caller's share given back meanwhile, as the
// store's own waits do.
func Waiting(ctx context.Context, wait func() error) error { return waiting(ctx, wait) }
