// Package internal holds what roomlog's tests and tools share but do not
// export, split by floor so that each room only looks down. The library's
// own ZooKeeper boundary is not here: it is the top-level package zkx, the
// ground floor of the library, below logroom and the recipes.
//
//	internal/infra/...  the ground floor of the test and tool harness:
//	                    zkensemble (real ZooKeeper servers), faultnet
//	                    (userspace TCP fault proxies), faultfs (a Pebble
//	                    file system whose writes stall on demand), spawn (child
//	                    processes), procstat (CPU accounting), promserver
//	                    (a real Prometheus). They import nothing of roomlog
//	                    but each other, so the library's own tests can use
//	                    them.
//	internal/harness/...  above the library: testnode (replica processes
//	                    with an HTTP API, clusters, load, history checkers),
//	                    for failover, chaos, the bench and the demo's tests;
//	                    recipetest (a shared server, proxied clients, forced
//	                    expiry, a leak check) for the recipes' tests.
//
// The library (zkx, store, logroom, checkpoint, recipe/..., replica)
// imports nothing under internal/ in its non-test files: only tests reach
// up into the harness. TestFloors (floors_test.go) holds the floors of the
// library and of internal/infra: version and zkx import nothing of
// roomlog (store, logroom, checkpoint and replica may import version), the
// recipes import only zkx and each other (never logroom), no library
// package imports internal/, and internal/infra imports nothing of
// roomlog outside its own floor.
package internal
