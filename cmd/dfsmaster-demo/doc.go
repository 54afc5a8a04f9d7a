// Command dfsmaster-demo is a small DFS metadata master built on roomlog: a
// namespace of directories and files with blocks (package namespace, the
// replicated state machine), served over an HTTP JSON API (package api), and
// a command-line client for that API (ctl, over package client).
//
// Usage:
//
//	dfsmaster-demo ctl [--addr host:port] [--timeout d] <command> [flags] [args]
//
// ctl's commands: mkdir [-p] PATH, create [-r N] PATH, addblock PATH SIZE,
// rename SRC DST, delete [-r] PATH, ls [--min-index N] PATH,
// stat [--min-index N] PATH, status, hash [--min-index N]. The address
// defaults to $DFSMASTER_ADDR, else 127.0.0.1:8080. Answers are printed as
// indented JSON; a failure prints "dfsmaster-demo ctl <command>: <code>:
// <message>" to stderr and exits 1; a bad command line exits 2.
//
// The binary uses only roomlog's public packages. Subcommands are listed in
// subcommands() (main.go); the master itself plugs into package api through
// its Master interface.
package main
