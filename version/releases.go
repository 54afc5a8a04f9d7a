package version

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// ReleaseLine is one line of the RELEASES file.
type ReleaseLine struct {
	Release string // "v0.1.0"
	Commit  string // 40 hex digits, or "" for the tree the file is in
	RoomMin int
	RoomMax int
}

var (
	releaseRE = regexp.MustCompile(`^v\d+\.\d+\.\d+$`)
	commitRE  = regexp.MustCompile(`^[0-9a-f]{40}$`)
)

// ParseReleases reads a RELEASES file: comment lines start with '#', every
// other non-empty line is "RELEASE COMMIT MIN..MAX", oldest first. Only
// the last line may name commit "-".
func ParseReleases(r io.Reader) ([]ReleaseLine, error) {
	var out []ReleaseLine
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			return nil, fmt.Errorf("RELEASES line %d: want RELEASE COMMIT MIN..MAX, got %q", n, line)
		}
		rl := ReleaseLine{Release: f[0]}
		if !releaseRE.MatchString(f[0]) {
			return nil, fmt.Errorf("RELEASES line %d: release %q is not vMAJOR.MINOR.PATCH", n, f[0])
		}
		switch {
		case f[1] == "-":
		case commitRE.MatchString(f[1]):
			rl.Commit = f[1]
		default:
			return nil, fmt.Errorf("RELEASES line %d: commit %q is neither 40 hex digits nor -", n, f[1])
		}
		lo, hi, ok := strings.Cut(f[2], "..")
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if !ok || err1 != nil || err2 != nil || a < 1 || b < a {
			return nil, fmt.Errorf("RELEASES line %d: room versions %q are not MIN..MAX", n, f[2])
		}
		rl.RoomMin, rl.RoomMax = a, b
		if len(out) > 0 && out[len(out)-1].Commit == "" {
			return nil, fmt.Errorf("RELEASES line %d: only the last release may name commit -", n)
		}
		out = append(out, rl)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("RELEASES: %w", err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("RELEASES: no release listed")
	}
	return out, nil
}

// Previous returns the release listed before rel, or false when rel is the
// first or not listed.
func Previous(lines []ReleaseLine, rel string) (ReleaseLine, bool) {
	for i, l := range lines {
		if l.Release == rel && i > 0 {
			return lines[i-1], true
		}
	}
	return ReleaseLine{}, false
}
