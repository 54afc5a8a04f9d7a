package logroom

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCheckChainRacingRotations: a rotation (seal + create the next
// channel, one Multi) between CheckChain's listing and its reads makes the
// last listed channel look sealed with no successor. However many times in
// a row that happens — chaos found a replica failed as "corrupt" by five
// rotations racing five attempts — it is a race, not corruption: the
// chain is checked again, and only a sealed last channel that stays so
// while nothing is created or deleted is corruption.
func TestCheckChainRacingRotations(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	r := openRoom(t, c, fmt.Sprintf("chainrace-%d", time.Now().UnixNano()))
	w := newWriter(t, r, WriterConfig{})
	ctx := testCtx(t, 60*time.Second)
	_, err := w.Append(ctx, payload(1))
	require.NoError(t, err)

	races := 0
	testHookAfterListing = func() {
		if races < 8 {
			races++
			_, err := w.Append(ctx, payload(races+1))
			require.NoError(t, err)
			_, err = w.Rotate(ctx)
			require.NoError(t, err)
		}
	}
	defer func() { testHookAfterListing = nil }()
	infos, err := r.CheckChain(ctx)
	require.NoError(t, err)
	require.Equal(t, 8, races)
	require.False(t, infos[len(infos)-1].Sealed)
	require.Len(t, infos, 9)
}
