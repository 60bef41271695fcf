// Package fault is the fault-injection suite: real servers, real agents
// provisioned by the local provisioner, real Docker, and faults injected
// from outside (kill -9, a TCP proxy that blackholes an agent, docker kill,
// bad daemon revisions, replayed and reordered agent messages). After each
// fault the tests wait for convergence within a stated deadline and check
// the fleet's invariants against the API, Docker and the recorded event
// history. See docs/faults.md.
package fault
