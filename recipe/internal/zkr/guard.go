package zkr

import (
	"context"
	"errors"
	"fmt"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/zkx"
)

// ErrGuardFailed: the guard's version check failed (its node is gone or
// changed); nothing of the Multi was applied.
var ErrGuardFailed = errors.New("guard check failed")

// Guard returns ops preceded by a check that path exists at version: a
// Multi of them commits all or nothing, so it commits only while the
// guard node is there.
func Guard(path string, version int32, ops ...any) []any {
	out := make([]any, 0, len(ops)+1)
	out = append(out, &zk.CheckVersionRequest{Path: path, Version: version})
	return append(out, ops...)
}

// GuardedMulti runs Guard(path, version, ops...) once, bounded by ctx, and
// returns the responses of ops (without the check's). A failed check is
// ErrGuardFailed wrapping ZooKeeper's error; a failed op is its error
// wrapped with its index; a connection loss is returned as it is (the
// outcome is unknown: read back before retrying a non-idempotent write).
func GuardedMulti(ctx context.Context, s *Session, path string, version int32, ops ...any) ([]zk.MultiResponse, error) {
	all := Guard(path, version, ops...)
	res, err := Do(ctx, s, func() ([]zk.MultiResponse, error) { return s.Conn().Multi(all...) }, nil)
	if err == nil {
		return res[1:], nil
	}
	if zkx.IsConnLoss(err) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || len(res) != len(all) {
		return nil, err
	}
	// A failed Multi reports the first failing op's error as err and on
	// that op; the others carry OK or "runtime inconsistency".
	if errors.Is(res[0].Error, zk.ErrNoNode) || errors.Is(res[0].Error, zk.ErrBadVersion) {
		return nil, fmt.Errorf("%w: %s at version %d: %w", ErrGuardFailed, path, version, res[0].Error)
	}
	for i, r := range res[1:] {
		if errors.Is(r.Error, err) {
			return nil, fmt.Errorf("op %d: %w", i, err)
		}
	}
	return nil, err
}
