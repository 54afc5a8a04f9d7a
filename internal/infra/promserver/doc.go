// Package promserver runs a real Prometheus server and promtool for tests
// (Debian's prometheus package, installed by scripts/install-prometheus.sh).
//
// Binaries are found through $PROMETHEUS_HOME (prometheus and promtool in
// that directory), else on PATH. When they are missing, Require fails the
// test under CI=true (a skip would make CI green while testing nothing) and
// skips it otherwise, naming the install script.
//
// Start writes a configuration that scrapes the given targets every
// ScrapeInterval (job "roomlog"), runs `prometheus` on a free loopback
// port with its storage in a temporary directory, waits (bounded) until
// /-/ready answers, and stops it (SIGTERM, then SIGKILL after 5 s) at the
// test's cleanup. StartWith also loads rule files and takes another
// interval (scrape and rule evaluation). Query runs an instant PromQL query through the HTTP API
// (/api/v1/query) and returns the vector's samples. CheckMetrics pipes an
// exposition body through `promtool check metrics` and returns its
// complaints (none: nil).
//
// Every wait is bounded by the caller's context or a fixed timeout; the
// server's output goes to the test log on failure.
package promserver
