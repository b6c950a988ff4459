// Package liveness judges whether each cluster's agent is online: it watches the agents'
// Leases (and, for older agents, their Clusters' status.agentLastSeen) and judges each
// heartbeat on the hub's monotonic clock, so a stepped wall clock keeps no stopped agent
// online. Controllers ask it (Check, Offline) and wake on its handlers when an agent comes
// back. It writes one object: an agent's Lease, created when its cluster is admitted
// (EnsureLease, called by the cluster-access controller).
package liveness
