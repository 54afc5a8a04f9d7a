// Package ops holds what an operator deploys beside roomlog, and the tests
// that keep it true; it has no Go API.
//
//   - prometheus/roomlog-alerts.yml: alerting rules. Every alert carries
//     the room (and the member at fault, when there is one), a severity
//     and a runbook_url, a path in this repository under docs/runbooks/.
//   - prometheus/roomlog-alerts_test.yml: promtool unit tests, a case
//     where each alert fires and one where it does not.
//   - grafana/roomlog-dashboard.json: a Grafana dashboard over the same
//     metrics (a Prometheus data source and a room variable).
//
// TestAlertRules runs `promtool check rules` and `promtool test rules`,
// and checks that every alert has both kinds of case, that its runbook
// exists, and that every metric the rules and the dashboard name is one
// roomlog exports. Without promtool (scripts/install-prometheus.sh) it
// fails under CI=true and skips elsewhere. cmd/dfsmaster-demo's
// TestAlertsLive loads the same rules into a real Prometheus scraping a
// live room, makes the faults happen, and evaluates every panel's query.
package ops
