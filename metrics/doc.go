// Package metrics exports the counters of tensorpress's services as
// Prometheus collectors, so that the library packages themselves never
// import the Prometheus client: each service keeps plain counters and
// gives a snapshot of them (hub.Hub.Stats, proxy.Stats.Detail, the
// natsfan Publisher's and Relay's fields), and a collector here reads it
// at each scrape, with no bookkeeping of its own.
//
// Register the collectors of what a process runs, with the Go and process
// collectors, and serve them with Handler:
//
//	http.Handle("/metrics", metrics.Handler(metrics.Hub(h), metrics.NATS(pub, nil)))
//
// The metric names, with their labels, are listed on Hub, Proxy and NATS.
// Label values that come from peers (addresses, recipes) are bounded by the
// services (hub.MaxAccounts, the proxy's 64 peers), then "other".
package metrics
