package main

import "context"

// runPause is the daemon namespace holder's process: it only keeps the
// namespace alive and exits 0 on SIGTERM or SIGINT, which main turns into
// the end of ctx.
func runPause(ctx context.Context) error {
	<-ctx.Done()
	return nil
}
