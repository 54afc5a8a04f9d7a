package logroom

import (
	"context"
	"log/slog"

	"github.com/roomlog/roomlog/zkx"
)

// The ZooKeeper client is package zkx's: logroom, replica and the recipes
// share it. These names keep logroom's callers whole.
type (
	// Digest holds ZooKeeper digest credentials (zkx.Digest). When set, the
	// client authenticates with them and creates every znode with a digest
	// ACL granting all permissions to that user only.
	Digest = zkx.Digest
	// DialConfig configures Dial (zkx.DialConfig).
	DialConfig = zkx.DialConfig
	// Client owns one ZooKeeper connection and its session (zkx.Client).
	Client = zkx.Client
)

// Dial connects to ZooKeeper and waits until a session is established (or
// ctx ends): zkx.Dial.
func Dial(ctx context.Context, cfg DialConfig) (*Client, error) { return zkx.Dial(ctx, cfg) }

// LeaderProbeTimeout bounds one probe of the ensemble's roles
// (zkx.LeaderProbeTimeout).
const LeaderProbeTimeout = zkx.LeaderProbeTimeout

func discardLogger(l *slog.Logger) *slog.Logger {
	if l != nil {
		return l
	}
	return slog.New(slog.DiscardHandler)
}
