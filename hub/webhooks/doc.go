// Package webhooks receives git hosts' push deliveries in every replica of every shard. Its
// senders are untrusted: it finds a delivery's GitRepos in a cache of its own indexed by
// repository, checks each GitRepo's webhook secret (read at most every few seconds), and asks
// the source controller to poll (Poller) when this replica leads the GitRepo's shard, or
// forwards the delivery to the leader with an annotation write, at most one per GitRepo a
// second. It writes only that annotation.
package webhooks
