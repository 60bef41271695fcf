// Package engine is the agent's task engine: it makes the instance's
// containers match the desired task set the server sends, and reports every
// task's state in ECS terms. A task admitted at once reports PENDING first,
// and a pending task's pull times, container IDs and digests wait for its
// next report: each report is a write on the server.
//
// # Model
//
// Each task has one goroutine that owns its state. Everything else talks to
// it through an unbounded inbox (desired changes, runtime events, periodic
// listings, admission answers, results of runtime calls), so SetDesired, the
// event watcher and the reader of Changes never wait on a task. Runtime
// calls (pull, create, start, stop, inspect, remove) each run in their own
// goroutine with a deadline and report back, so a slow pull or a hung
// Docker call holds up only the container it is for: the task still takes a
// stop order meanwhile (a pull in flight is cancelled).
//
// Containers move through NONE → PULLED → CREATED → RUNNING → STOPPED and
// never back, except that a container seen running again after it stopped
// is tracked again until its task has finished. The task's lastStatus is
// PROVISIONING while it waits for room, PENDING until every container has
// started and every essential one runs, then RUNNING; once desired STOPPED
// it is STOPPING until every container has stopped, then STOPPED. It never
// moves back. Every change is written to the Store before it is put on
// Changes, with a Seq one higher than the task's last.
//
// # Decisions
//
//   - Images of all containers are ensured as soon as the task is admitted,
//     in parallel, not when each container's dependencies are met: starts
//     are faster and a missing image fails the task before anything runs.
//     Any pull failure stops the task (CannotPullContainerError).
//   - dependsOn: START waits have no deadline of their own (the dependency's
//     own waits and the runtime call timeouts bound them). COMPLETE, SUCCESS
//     and HEALTHY waits end the dependency's startTimeout (else
//     StartTimeout) after the dependency first started; the task then stops
//     with a DependencyError reason naming both containers. A condition that
//     can no longer be met (SUCCESS after a non-zero exit, HEALTHY after the
//     dependency stopped) stops the task at once.
//   - pidMode/ipcMode "task": the first essential container without
//     dependencies owns the namespaces and the others join it; each gets an
//     implicit START dependency on it, which cannot make a cycle.
//   - links become START dependencies plus host entries (name and alias to
//     the linked container's address); volumesFrom copies the source
//     container's mounts, since every task volume is a host directory.
//   - Stop order is the reverse of start order: a container is stopped only
//     after those depending on it have stopped. Stop failures are retried
//     with back-off (1s doubling to 30s) until the runtime says it exited.
//   - Restart policy: a container that ran at least restartAttemptPeriod is
//     restarted at once, as in ECS. A faster exit is not abandoned (ECS
//     never restarts it again); it is restarted after 1s, 2s, 4s ... capped
//     at restartAttemptPeriod, so a crash loop costs at most one start per
//     period and a flaky container still comes back. The back-off resets
//     after a run of a full period. While waiting, the container is still
//     reported RUNNING (the task is not stopping); TaskInfo shows the exit
//     code and RestartCount.
//   - A container that exits non-zero on its own, for no reason the
//     runtime knows (not out of memory, not a start error), gets the last
//     lines it printed as its reason ("exited with code 1; last output:
//     ..."): a daemon that cannot bind its port says so in DescribeTasks.
//     The line is read by the inspect that follows the exit (or the start,
//     for a fast crash); a listing that sees the exit first leaves it to
//     such an inspect.
//   - CPU: a container's cpu becomes its CPU shares; without one, it gets
//     an even share of what the task-level cpu leaves, at least 2. Memory:
//     a container without its own hard limit gets the task's memory as one,
//     since there is no task cgroup to contain it.
//   - Network modes bridge (default), host and none run as such; "daemon"
//     (daemon tasks) runs in Config.DaemonNetworkMode, host if unset;
//     awsvpc tasks get a namespace of their own from Config.TaskNetwork
//     (refused without one) before their containers are created, joined
//     by every container, reported as the task's attachment and removed
//     once every container has stopped; a holder that dies stops its task
//     (ReasonNetworkLost). Anything else stops the task with a reason. Bridge tasks run on
//     Config.BridgeNetwork when set (the agent's per-instance network, when
//     it cannot let Docker's default bridge reach the daemons),
//     with ports, hostnames and links as on the default bridge.
//   - Volumes: host volumes with a sourcePath are bind mounts; scratch
//     volumes and task-scoped Docker volumes are directories under
//     Config.VolumeDir/tasks/<task id>, removed with the task; shared
//     Docker volumes live under VolumeDir/shared and are kept.
//   - Admission (package resources): by priority, daemon > service >
//     standalone. A task waits only while stopping tasks hold what it
//     lacks; one that cannot fit even then is STOPPED at once with a
//     RESOURCE:... reason. Resources are released when the task is STOPPED.
//   - Names are capstan-<family>-<revision>-<container>-<last 12 characters
//     of the task ID> and labels carry task ARN, container name, cluster,
//     instance, family and revision. A failed create first looks for the
//     container by its labels (never by name alone) and adopts it.
//
// # Restarts of the agent
//
// Run reads the Store and lists the runtime's containers labelled for this
// instance (the runtime is the truth for what exists), adopts every one
// (running or exited) into its task, and never stops a container because
// the agent restarted. A record that cannot be read is dropped with a log
// line; its containers make a placeholder task, known by labels only, whose
// Seq starts from the clock so its states still sort after any sent before.
// The first desired set gives a placeholder its definition, or, if it is
// not in the set, stops it, reports it STOPPED and removes its containers.
// Containers of unknown tasks found later are removed, but only once a
// desired set has arrived: an agent that restarts before its session is
// back kills nothing. Containers of the instance without a task label
// (the daemon namespace holder) are not the engine's and are left alone. Each restored task reports its state once more with
// a new Seq, so a state persisted but not delivered before a crash is sent.
//
// A record that cannot be written is logged and written again with the
// task's next change; the state is still reported, since holding every
// task's reports back on a broken disk would help nobody. Snapshot and Task
// are updated before a state goes out on Changes, so they never lag it.
//
// Besides events, the engine lists the instance's containers every
// ReconcileInterval (and right after the event stream breaks), so a death
// or removal missed while events were lost is still noticed; a container
// that is gone is reported STOPPED with reason "container vanished outside
// the agent".
//
// A stopped task's containers and record are removed CleanupWait after it
// stopped, and only once its STOPPED state has been emitted. A container
// that starts after its task has stopped (a start that timed out but went
// through, or a start by hand) is stopped again without being reported.
package engine
