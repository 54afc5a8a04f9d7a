// Package internal holds what roomlog's tests and tools share but do not
// export, split by floor so that each room only looks down. The library's
// own ZooKeeper boundary is not here: it is the top-level package zkx,
// below every library package.
//
//	internal/infra/...  the ground floor of the test and tool harness:
//	                    zkensemble (real ZooKeeper servers), faultnet
//	                    (userspace TCP fault proxies), faultfs (a Pebble
//	                    file system whose writes stall on demand), spawn (child
//	                    processes), procstat (CPU accounting), promserver
//	                    (a real Prometheus). They import nothing of roomlog
//	                    but each other, so logroom's and replica's own tests
//	                    can use them.
//	internal/harness/...  above replica: testnode (replica processes with
//	                    an HTTP API, clusters, load, history checkers), for
//	                    failover, chaos, the bench and the demo's tests.
//
// TestFloors (floors_test.go) holds these rules: no package below replica
// imports internal/harness, zkx imports nothing of roomlog, and
// internal/infra imports nothing of roomlog outside its own floor.
package internal
