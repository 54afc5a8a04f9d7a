// Package cli holds the conventions both binaries (cmd/roomlog,
// cmd/dfsmaster-demo) share: exit codes by class, the ROOMLOG_*
// environment variables (older names accepted with a deprecation
// warning), and how -h/--help is recognised.
//
// Exit codes (ExitCodesHelp is the text both print in their help):
//
//	0  ok
//	1  a fault found (verify), or a failure of no class below
//	2  usage: a bad command line
//	3  ZooKeeper unreachable
//	4  room not found, or lost (logroom.ErrRoomLost: deleted or replaced
//	   under a member that holds its state)
//	5  access denied
//
// Class maps an error to its code through errors.Is on the sentinels of
// zk, zkx and logroom, so every layer keeps wrapping with %w.
package cli

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"

	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/roomlog/roomlog/version"
)

// Exit codes.
const (
	ExitOK          = 0
	ExitFault       = 1
	ExitUsage       = 2
	ExitUnreachable = 3
	ExitNoRoom      = 4
	ExitDenied      = 5
)

// ExitCodesHelp documents the exit codes in a binary's help.
const ExitCodesHelp = `exit codes:
  0  ok
  1  a fault found (verify), or a failure of no class below
  2  usage: a bad command line
  3  ZooKeeper unreachable (no session within the timeout, or the connection lost)
  4  room not found (or lost: deleted or replaced under a member that holds its state)
  5  access denied (the room's ACL grants this client nothing, or a foreign ACL)
`

// UsageError marks an error in the command line found after parsing
// (Class: ExitUsage).
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// ErrUnreachable marks a failure to get or keep a ZooKeeper session.
var ErrUnreachable = errors.New("ZooKeeper unreachable")

// Class returns the exit code of err (nil: ExitOK).
func Class(err error) int {
	var ue UsageError
	var ne net.Error
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ue):
		return ExitUsage
	case errors.Is(err, zk.ErrNoAuth), errors.Is(err, logroom.ErrForeignACL):
		return ExitDenied
	case errors.Is(err, logroom.ErrNoRoom), errors.Is(err, logroom.ErrRoomLost):
		return ExitNoRoom
	case errors.Is(err, ErrUnreachable), errors.Is(err, zk.ErrConnectionClosed), errors.Is(err, zk.ErrNoServer),
		errors.Is(err, zk.ErrSessionExpired), errors.As(err, &ne):
		return ExitUnreachable
	}
	return ExitFault
}

// Getenv returns the environment variable name, or else the first of the
// deprecated names old that is set, warning on stderr that it is
// deprecated and which name replaces it.
func Getenv(stderr io.Writer, prog, name string, old ...string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	for _, o := range old {
		if v := os.Getenv(o); v != "" {
			fmt.Fprintf(stderr, "%s: warning: environment variable %s is deprecated; set %s instead\n", prog, o, name)
			return v
		}
	}
	return ""
}

// WantsHelp reports whether args ask for help (-h, -help or --help before
// any "--").
func WantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

// Version is what 'version --json' prints in both binaries.
type Version struct {
	Release  string `json:"release"`
	Commit   string `json:"commit"` // "" when not built from a checkout
	Modified bool   `json:"modified"`
	Go       string `json:"go"`
	RoomMin  int    `json:"room_min"`
	RoomMax  int    `json:"room_max"`
}

// VersionOf returns b as 'version --json' prints it.
func VersionOf(b version.Build) Version {
	return Version{Release: b.Release, Commit: b.Commit, Modified: b.Modified, Go: b.GoVersion,
		RoomMin: version.RoomMin, RoomMax: version.RoomMax}
}
