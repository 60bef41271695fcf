package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"time"
)

// profile starts the CPU profiles when they cover phase ("" for the whole
// run, where the child profiles itself); the returned func stops them.
// agents is the hollow instances' host, nil for the whole run.
func (o options) profile(phase string, agents host) (func(), error) {
	if o.profilePhase != phase {
		return func() {}, nil
	}
	stopAgents := func() {}
	if agents != nil && o.agentProfile != "" {
		if err := agents.CPUProfile(true); err != nil {
			return nil, fmt.Errorf("hollow agents' profile: %w", err)
		}
		stopAgents = func() {
			if err := agents.CPUProfile(false); err != nil {
				fmt.Fprintln(os.Stderr, "hollow agents' profile:", err)
			}
		}
	}
	stopTrace := o.traceInPhase()
	stop := func() { stopTrace(); stopAgents() }
	if o.cpuProfile == "" {
		return stop, nil
	}
	f, err := os.Create(o.cpuProfile)
	if err != nil {
		stop()
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		stop()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close(); stop() }, nil
}

// traceInPhase records the execution trace for one window in the middle of
// a phase: a whole phase at thousands of sessions would be gigabytes. The
// returned func ends it early if the phase ends first.
func (o options) traceInPhase() func() {
	if o.traceOut == "" {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		select {
		case <-done:
			return
		case <-time.After(o.traceWindow):
		}
		f, err := os.Create(o.traceOut)
		if err != nil {
			fmt.Fprintln(os.Stderr, "trace:", err)
			return
		}
		defer f.Close()
		if err := trace.Start(f); err != nil {
			fmt.Fprintln(os.Stderr, "trace:", err)
			return
		}
		select {
		case <-done:
		case <-time.After(o.traceWindow):
		}
		trace.Stop()
	}()
	return func() { close(done); <-finished }
}

func writeHeapProfile(path string) {
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		return
	}
	defer f.Close()
	runtime.GC()
	pprof.WriteHeapProfile(f)
}
