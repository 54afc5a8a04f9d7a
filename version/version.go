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

// The commit stamped by the linker when the toolchain records none (a
// build with -buildvcs=false, or outside a checkout): 'make build' passes
//
//	-ldflags "-X github.com/roomlog/roomlog/version.stampCommit=<40 hex>
//	          -X github.com/roomlog/roomlog/version.stampModified=true"
//
// Set only by the linker; never written at run time.
var (
	stampCommit   string
	stampModified string
)

// Info reports this binary's build: vcs.revision and vcs.modified from the
// toolchain's build information, else the commit the linker stamped.
func Info() Build {
	buildOnce.Do(func() {
		bi, _ := debug.ReadBuildInfo()
		build = readBuild(bi, stampCommit, stampModified)
	})
	return build
}

// readBuild is Info's pure part: bi (nil: none recorded) and the linker's
// stamps.
func readBuild(bi *debug.BuildInfo, commit, modified string) Build {
	b := Build{Release: Release}
	if bi != nil {
		b.GoVersion = bi.GoVersion
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Commit = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	if b.Commit == "" && commit != "" {
		b.Commit, b.Modified = commit, modified == "true"
	}
	return b
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
