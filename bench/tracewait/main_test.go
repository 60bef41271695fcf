package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime/trace"
	"strings"
	"testing"
	"time"
)

// TestFindsEachRequestAndWhatItWaitedFor traces a server answering
// requests that each sleep 2 ms, made one after another on one keep-alive
// connection with pauses between, and checks that every request after the
// first is found, with the sleep as its blocked time.
func TestFindsEachRequestAndWhatItWaitedFor(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(2 * time.Millisecond)
		fmt.Fprint(w, "ok")
	}))
	defer srv.Close()
	c := srv.Client()
	get := func() {
		resp, err := c.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body) // read to the end, so the connection is kept
		resp.Body.Close()
	}
	get() // the connection exists before the trace starts
	// Another connection, with fewer requests, which -busiest leaves out.
	other := &http.Client{Transport: &http.Transport{}}
	getOther := func() {
		resp, err := other.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	getOther()
	var buf bytes.Buffer
	if err := trace.Start(&buf); err != nil {
		t.Fatal(err)
	}
	const n = 20
	for i := range n {
		get()
		if i%4 == 0 {
			getOther()
		}
		time.Sleep(3 * time.Millisecond)
	}
	trace.Stop()
	r, err := analyze(&buf)
	if err != nil {
		t.Fatal(err)
	}
	const others = n / 4
	if len(r.requests) < n+others-2 || len(r.requests) > n+others {
		t.Fatalf("found %d requests, made %d", len(r.requests), n+others)
	}
	r.onlyBusiest()
	if len(r.requests) < n-1 || len(r.requests) > n {
		t.Fatalf("the busiest connection's requests: %d, made %d", len(r.requests), n)
	}
	var slept time.Duration
	causes := r.causes()
	for k, v := range causes {
		if strings.Contains(k, "blocked in time.Sleep") {
			slept += v
		}
	}
	if slept < time.Duration(len(r.requests))*2*time.Millisecond {
		t.Fatalf("blocked in the handler's sleep %v over %d requests; causes: %v", slept, len(r.requests), causes)
	}
	for _, q := range r.requests {
		if q.total < q.runnable+q.running+q.blocked-time.Microsecond || q.total < 2*time.Millisecond {
			t.Fatalf("request's parts do not add up: %+v", q)
		}
	}
	var out bytes.Buffer
	r.print(&out)
	if !strings.Contains(out.String(), fmt.Sprintf("requests: %d", len(r.requests))) {
		t.Fatalf("report:\n%s", out.String())
	}
}
