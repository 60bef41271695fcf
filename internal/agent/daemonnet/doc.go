// Package daemonnet gives an instance's daemons one network namespace with
// a fixed address that application tasks reach as "daemon", the way ECS
// Managed Daemons share daemon_bridge at 169.254.172.2.
//
// # What it makes
//
// Per instance, on the Docker Engine:
//
//   - a bridge network capstan-<end of the instance ID> on a subnet of its
//     own, labelled com.capstan.instance and com.capstan.role=daemon-network;
//     the host takes the subnet's first address;
//   - a namespace holder, capstan-<id>-daemons, on that network at the
//     daemon address (by default the subnet's second address), labelled
//     com.capstan.instance and com.capstan.role=daemon-namespace. It runs
//     `capstan pause` from an image capstan/pause:<hash of the executable>
//     imported from a one-file tar of the agent's own (static) executable,
//     so no registry is needed. It runs as nobody, with no capabilities and
//     a read-only root. Pause images of other executables (earlier agent
//     versions) that no container uses and that are over an hour old are
//     removed.
//
// Per awsvpc task, a holder of its own (Attach, Detach): the same pause
// image, named capstan-<end of the task ID>-ns and labelled
// com.capstan.role=task-namespace and com.capstan.network-of=<task ARN>,
// on the instance network at an address Docker picks. The task's
// containers join it by ID, so they have that address; its hosts file
// (which they share) has "daemon". A running holder is adopted after an
// agent restart; the engine detaches it once the task's containers have
// stopped, and removes any whose task it does not know.
//
// On the host, with a Firewall (the agent's: the iptables Docker uses), two
// rules in Docker's DOCKER-USER chain, marked with the network's name:
// accept from the default bridge (docker0) to the daemon address on the
// instance bridge, and accept the replies. Rules of networks whose
// interface is gone are removed whenever the rules are set.
//
// The engine then runs daemon tasks in "container:<holder name>" (Docker
// resolves the name when each container is created, so new daemons join
// whichever holder is current), bridge tasks on Docker's default bridge
// (on the instance network without the rules), and gives every container
// the host entry daemon:<address>; daemons get it from the holder's hosts
// file, which they share.
//
// # Decisions
//
//   - Bridge tasks stay on Docker's default bridge, as in ECS: a start
//     there costs ~100-200 ms less than on a user-defined network, whose
//     embedded DNS Docker sets up in each container. Docker keeps bridges
//     apart, so the rules let through exactly the daemon address and the
//     replies; other containers on the instance network stay unreachable.
//     Traffic to the daemons is masqueraded by Docker's own rule, so
//     daemons see the instance bridge's address as the source, as on ECS.
//     Without the rules (no iptables, not root, CAPSTAN_TASK_BRIDGE=instance)
//     bridge tasks run on the instance network instead, which Docker lets
//     reach the daemons; ports, links and hostnames work the same there.
//     Host-network tasks reach the address through the host's route to
//     the instance bridge.
//   - Several local instances share docker0, so their bridge tasks reach
//     one another, as the bridge tasks of one ECS instance do; each still
//     resolves "daemon" to its own instance's address.
//     CAPSTAN_TASK_BRIDGE=instance keeps them apart.
//   - Subnet: unset, the first of 169.254.172.0/24, 169.254.173.0/24, ...
//     169.254.254.0/24 that Docker does not refuse as overlapping, so the
//     only instance on a host gets ECS's 169.254.172.2 and several local
//     instances each get their own without configuration. A configured
//     subnet is used or the agent stops with an error naming the variable;
//     a network of another instance in the way is removed first if that
//     instance has nothing left on the host (no container attached, none
//     labelled for it), as after an agent was killed and its containers
//     cleaned up.
//   - Idempotent: the network and the holder are found by their labels
//     after a restart and adopted; an agent that stops leaves both (and its
//     daemons) running. The pause image is built only when a holder must be
//     made, so an adopted holder survives an upgrade or a restart with an
//     executable that could not build it. Only retiring a deregistered
//     instance removes them, and the rules (Remove).
//   - The holder is kept up by the agent, not by a Docker restart policy: a
//     holder that dies or is removed is made again at once on the same
//     address (after a back-off if it keeps dying young), and the state is
//     checked every CheckInterval in case events were lost. Any restart of
//     a holder makes a new namespace, so daemon containers still running
//     in the old one have lost their network: they are stopped, so their
//     tasks stop and are replaced in the new namespace.
//   - Fallback: when the executable cannot be the holder (dynamically
//     linked, i.e. built with cgo; or not capstan, like a test binary) or
//     the holder does not start, the agent logs why and daemon tasks run in
//     the host network, with "daemon" resolving to the host's address on
//     the instance network (its gateway); daemons listening on all
//     addresses are reached there. With no free subnet at all, bridge
//     tasks use the default bridge and "daemon" is the docker0 address.
//   - Daemons share one namespace, so two daemons cannot bind the same
//     port: the second exits, and the engine stops its task with the
//     container's last output (say "bind: Address already in use") as its
//     reason.
package daemonnet
