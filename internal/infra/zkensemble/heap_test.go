package zkensemble

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseHeapInfo(t *testing.T) {
	g1 := `12345:
 garbage-first heap   total 1048576K, used 21503K [0x00000000c0000000, 0x0000000100000000)
  region size 1024K, 2 young (2048K), 0 survivors (0K)
 Metaspace       used 12345K, committed 12544K, reserved 1114112K
  class space    used 1234K, committed 1344K, reserved 1048576K
`
	n, err := parseHeapInfo(g1)
	require.NoError(t, err)
	require.Equal(t, int64(21503)<<10, n)
	serial := ` def new generation   total 314560K, used 8409K [0x…)
  eden space 279616K,   3% used [0x…)
 tenured generation   total 699072K, used 10000K [0x…)
 Metaspace       used 1K, committed 2K, reserved 3K
`
	n, err = parseHeapInfo(serial)
	require.NoError(t, err)
	require.Equal(t, int64(8409+10000)<<10, n)
	_, err = parseHeapInfo("12345:\nCommand executed successfully\n")
	require.Error(t, err, "no heap line")
}

// TestLiveHeap measures a running server: a live heap between 1 MiB and
// the 1 GiB -Xmx.
func TestLiveHeap(t *testing.T) {
	RequireJcmd(t)
	e := ForTest(t, Options{Servers: 1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := e.LiveHeap(ctx, 0)
	require.NoError(t, err)
	require.Greater(t, n, int64(1<<20))
	require.Less(t, n, int64(DefaultHeapMB)<<20)
	_, err = e.LiveHeap(ctx, 3)
	require.Error(t, err, "no server 3")
}
