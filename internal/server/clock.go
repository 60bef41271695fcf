package server

import (
	"fmt"
	"os"
	"time"
)

// ClockOffsetEnv names the test-only setting that shifts a server's clock
// (ClockOffset), e.g. "60s" or "-1m": fault tests run servers whose clocks
// disagree, as unsynchronised machines' do. There is no flag for it.
const ClockOffsetEnv = "CAPSTAN_TEST_CLOCK_OFFSET"

// ClockOffsetFromEnv reads ClockOffsetEnv: 0 when unset.
func ClockOffsetFromEnv() (time.Duration, error) {
	v := os.Getenv(ClockOffsetEnv)
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a duration such as 60s or -1m", ClockOffsetEnv, v)
	}
	return d, nil
}

// now is the server's clock: the wall clock shifted by ClockOffset. The
// shift keeps the monotonic reading, so durations measured on one server
// are true; only what servers compare across machines is skewed.
func (c Config) now() func() time.Time {
	off := c.ClockOffset
	if off == 0 {
		return time.Now
	}
	return func() time.Time { return time.Now().Add(off) }
}
