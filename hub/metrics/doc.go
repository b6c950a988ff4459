// Package metrics owns the hub's flotilla_* metrics: the fleet's state, read from the
// caches at each scrape (so it costs no write and never disagrees with the objects), and the
// counters and histograms the controllers observe where they write what they count. It writes
// nothing to the API server.
package metrics
