package version

import (
	"fmt"
	"runtime/debug"
	"sync"
)

// Release is this binary's release. It is the last line of the
// repository's RELEASES file (a test checks).
const Release = "v0.2.0"

// The room versions this binary reads and writes.
const (
	RoomMin = 1
	RoomMax = 2
)

// Build is what the toolchain recorded about the build.
type Build struct {
	Release   string // Release
	Commit    string // vcs.revision, "" when not built from a checkout
	Modified  bool   // vcs.modified: the work tree had uncommitted changes
	GoVersion string
}

var (
	buildOnce sync.Once
	build     Build
)

// Info reports this binary's build.
func Info() Build {
	buildOnce.Do(func() {
		build = Build{Release: Release}
		bi, ok := debug.ReadBuildInfo()
		if !ok {
			return
		}
		build.GoVersion = bi.GoVersion
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				build.Commit = s.Value
			case "vcs.modified":
				build.Modified = s.Value == "true"
			}
		}
	})
	return build
}

// String is one line for --version output and logs: release, commit (12
// hex digits, "+dirty" when modified), Go version and room versions.
func (b Build) String() string {
	commit := b.Commit
	if len(commit) > 12 {
		commit = commit[:12]
	}
	if commit == "" {
		commit = "unknown"
	}
	if b.Modified {
		commit += "+dirty"
	}
	return fmt.Sprintf("%s (commit %s, %s, room versions %d..%d)", b.Release, commit, b.GoVersion, RoomMin, RoomMax)
}

// Supports reports whether this binary reads and writes room version v.
func Supports(v int) bool { return v >= RoomMin && v <= RoomMax }
