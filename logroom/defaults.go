package logroom

import (
	"strings"

	"github.com/roomlog/roomlog/zkx"
)

// DefaultSessionTimeout is the ZooKeeper session timeout Dial asks for when
// DialConfig.SessionTimeout is zero. Packages that dial for a room (replica,
// the commands) take their default from here; DefaultBase, the other
// layout-wide default, is declared with the room layout in room.go.
// It is zkx.DefaultSessionTimeout.
const DefaultSessionTimeout = zkx.DefaultSessionTimeout

// SplitServers parses a ZooKeeper connect string ("host:port,host:port",
// spaces and empty items ignored) into DialConfig.Servers.
func SplitServers(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
