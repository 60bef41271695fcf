// Package benchkit holds what the benchmark programs under bench share:
// the program entry point, the machine description, the in-memory request
// body for the ECS client, small sampling helpers, and (fleet.go) the
// local-fleet fixture of bench/managed and bench/rollout.
package benchkit

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ecs"
)

// Main is a benchmark program's main: it parses the arguments (-h ends the
// program quietly, a bad flag with status 2), runs until done, interrupted
// or terminated, and exits with status 1 when run fails. Errors are
// printed to stderr after "bench/NAME:".
func Main[O any](name string, parse func([]string) (O, error), run func(context.Context, O, io.Writer) error) {
	o, err := parse(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench/%s: %v\n", name, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "bench/%s: %v\n", name, err)
		os.Exit(1)
	}
}

// InMemoryBody hands net/http the request body as a bytes.Reader.
//
// smithy-go closes the request body as soon as response headers arrive,
// and its closed body answers WriteTo with io.EOF. net/http streams a body
// it does not know to be in memory straight to the socket, then reads it
// once more to check for extra bytes; when the server answered first that
// read fails, the transport closes the connection under the response
// still being read ("use of closed network connection") and redials. With
// a bytes.Reader net/http buffers the request and the race cannot happen.
type InMemoryBody struct{ Next ecs.HTTPClient }

func (c InMemoryBody) Do(req *http.Request) (*http.Response, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return c.Next.Do(req)
	}
	b, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, fmt.Errorf("buffer request body: %w", err)
	}
	r := req.Clone(req.Context())
	r.Body = io.NopCloser(bytes.NewReader(b))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	r.ContentLength = int64(len(b))
	return c.Next.Do(r)
}

// CPUModel is the first "model name" of /proc/cpuinfo, or "".
func CPUModel() string {
	bs, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(bs)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// VCSRevision is the vcs.revision the build stamped, or "" (go run stamps
// none).
func VCSRevision() string {
	rev := ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				rev = s.Value
			}
		}
	}
	return rev
}

// LoadAvg is the three load averages of /proc/loadavg, or "".
func LoadAvg() string {
	bs, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(bs))
	return strings.Join(f[:min(3, len(f))], " ")
}

// Pct is the nearest-rank percentile of sorted samples (0 for none).
func Pct[T ~int64 | ~float64](sorted []T, p float64) T {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// Ms is d in milliseconds, to the microsecond.
func Ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// RandomID is n random characters of [a-z0-9].
func RandomID(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	bs := make([]byte, n)
	rand.Read(bs)
	for i := range bs {
		bs[i] = alphabet[int(bs[i])%len(alphabet)]
	}
	return string(bs)
}

// RandomHex is n random hexadecimal digits.
func RandomHex(n int) string {
	buf := make([]byte, (n+1)/2)
	rand.Read(buf)
	return hex.EncodeToString(buf)[:n]
}

// Sleep waits d or until ctx ends, whichever is first.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// WriteJSON writes v to path as indented JSON and a newline.
func WriteJSON(path string, v any) error {
	buf, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(buf, '\n'), 0o644)
}
