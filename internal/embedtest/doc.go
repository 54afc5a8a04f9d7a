// Package embedtest builds programs outside this module that require
// roomlog, as an embedder's would, and runs them; it has no Go API.
//
// Each test writes a temporary module whose go.mod requires
// github.com/roomlog/roomlog with only
// `replace github.com/roomlog/roomlog => <this checkout>`, and builds it
// with the module cache this repository already filled (GOPROXY=off, so
// nothing is fetched behind the test's back). Go applies replace
// directives only in the main module: what such a program compiles
// against is what an embedder gets.
//
//   - TestEmbedderRaceFree: the patched ZooKeeper client
//     (third_party/zk, see its PATCHED.md) reaches embedders. The program
//     dials a real ZooKeeper through a faultnet proxy, appends to a room
//     through logroom, and on a raw connection of third_party/zk keeps a
//     child watch armed and requests flowing while the test resets the
//     proxy's connections again and again: every reconnect runs
//     sendSetWatches beside recvLoop, the lastZxid race of
//     go-zookeeper/zk v1.0.4. Built with -race, it must exit 0 with no
//     race report. The same program built against upstream v1.0.4 is run
//     too when that module can be had, and what it did is logged, not
//     asserted.
//   - TestReadmeEmbedExample: the README's embed example (the first go
//     block of its "Embed it" section) is such a program: it passes go
//     vet, builds, and run against a real ZooKeeper becomes primary and
//     commits an entry through its Applier, logging through its Logger.
package embedtest
