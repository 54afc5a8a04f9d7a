package logroom

import "time"

// DefaultSessionTimeout is the ZooKeeper session timeout Dial asks for when
// DialConfig.SessionTimeout is zero. Packages that dial for a room (replica,
// the commands) take their default from here; DefaultBase, the other
// layout-wide default, is declared with the room layout in room.go.
const DefaultSessionTimeout = 4 * time.Second
