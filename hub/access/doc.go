// Package access owns what an agent may read and act as: its cluster's namespace (admitted,
// moved, removed), its ServiceAccount, its Role over its own BundleDeployments, and the
// grants to the Content those deployments reference (its own Role, or a shared grant when
// several clusters run the same content). The cluster-access controller keeps them in step
// with each Cluster; the content-grant controller prunes shared grants nothing uses.
//
// It writes Namespaces, ServiceAccounts, Roles, RoleBindings, Leases (through liveness) and a
// Cluster's Admitted condition; it reads Clusters and BundleDeployments from the cache.
package access
