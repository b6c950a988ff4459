// Package model is what every part of the hub shares about the fleet's objects: the labels
// that tie them together, how they are read from the manager's caches and indexed, the
// revision store (what each revision is to run on each cluster, kept as Content), the
// conversions between the API's types and the rollout package's, the shard a replica owns,
// and the event handlers and condition helpers the controllers have in common.
//
// It runs no controller. It reads Bundles, BundleDeployments, Clusters, ClusterGroups and
// StagedUpdateRuns from the cache; it writes only revision records (Content, through
// hub/contentstore) and, for a shard adopting an object, that object's shard label.
package model
