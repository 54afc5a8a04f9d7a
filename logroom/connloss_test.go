package logroom

import (
	"context"
	"fmt"
	"testing"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"
)

// TestIsConnLoss checks the public delegation to zkx.IsConnLoss (tested in
// full there, raw transport errors included) on logroom's own errors.
func TestIsConnLoss(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{zk.ErrConnectionClosed, true},
		{zkError("logroom: get", zk.ErrNoServer), true}, // ErrUnavailable keeps the cause
		{fmt.Errorf("wrapped: %w", zk.ErrSessionExpired), true},
		{zk.ErrNoNode, false},
		{zk.ErrClosing, false},
		{ErrCorrupt, false},
		{ErrClosed, false},
		{context.DeadlineExceeded, false},
	} {
		require.Equal(t, tc.want, IsConnLoss(tc.err), "%v", tc.err)
		require.Equal(t, tc.want, isConnErr(tc.err), "%v", tc.err)
	}
}
