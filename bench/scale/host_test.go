package main

import (
	"bufio"
	"encoding/json"
	"io"
	"sync"
	"testing"
	"time"
)

// Calls to the hollow host overlap: a slow one (a termination waiting for
// its agent to stop) does not hold back the others, and each caller gets
// its own answer, whatever order the child answers in.
func TestHostCallsOverlap(t *testing.T) {
	reqR, reqW := io.Pipe()
	respR, respW := io.Pipe()
	h := talkTo(reqW, respR)
	release := make(chan struct{})
	go func() {
		// The child: "slow" is answered only once the others have been.
		sc := bufio.NewScanner(reqR)
		var mu sync.Mutex
		enc := json.NewEncoder(respW)
		for sc.Scan() {
			var r request
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Error(err)
				return
			}
			go func() {
				if r.ID == "slow" {
					<-release
				}
				mu.Lock()
				defer mu.Unlock()
				enc.Encode(response{Seq: r.Seq, Arn: "arn-of-" + r.ID})
			}()
		}
		respW.Close()
	}()

	slow := make(chan string, 1)
	go func() {
		arn, err := h.Arn("slow")
		if err != nil {
			t.Error(err)
		}
		slow <- arn
	}()
	var wg sync.WaitGroup
	for _, id := range []string{"a", "b", "c"} {
		wg.Go(func() {
			if arn, err := h.Arn(id); err != nil || arn != "arn-of-"+id {
				t.Errorf("Arn(%s) = %q, %v", id, arn, err)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("calls waited behind a slow one")
	}
	close(release)
	if arn := <-slow; arn != "arn-of-slow" {
		t.Fatalf("slow call got %q", arn)
	}
	// The child gone, calls fail instead of waiting.
	reqW.Close()
	if _, err := h.Arn("after"); err == nil {
		t.Fatal("a call after the child exited did not fail")
	}
}

// An answer that cannot be read fails the calls waiting instead of leaving
// one of them waiting for ever.
func TestHostGarbledAnswerFailsCalls(t *testing.T) {
	reqR, reqW := io.Pipe()
	respR, respW := io.Pipe()
	h := talkTo(reqW, respR)
	go func() {
		sc := bufio.NewScanner(reqR)
		for sc.Scan() {
			respW.Write([]byte("{garbled\n"))
		}
	}()
	done := make(chan error, 1)
	go func() { _, err := h.Arn("x"); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a call answered with garbage succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call still waits after a garbled answer")
	}
	reqW.Close()
	respW.Close()
}
