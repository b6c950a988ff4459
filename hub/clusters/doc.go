// Package clusters holds the controllers of the fleet's membership: registration-token
// (a token's Secret and ServiceAccount, with the agents' address and CA that AgentEndpoint
// resolves), cluster-registration (a Cluster created or claimed for an agent that presents a
// token, and its sealed credentials), and cluster-status and clustergroup-status (counts, and
// online or offline as liveness judges). It writes those kinds and their status; a cluster's
// namespace and agent identity are package access's: a registration waits for the
// cluster-access controller to admit its Cluster (the agent's Lease, created last, wakes it),
// so each object of a new cluster is written once.
package clusters
