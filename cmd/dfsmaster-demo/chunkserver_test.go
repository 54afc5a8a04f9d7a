package main

import (
	"bufio"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/zkx"
)

// TestChunkServerWaitsForTaskDir: a chunk server started before any
// master creates nothing in ZooKeeper (it would create the task
// directory with its own ACL, granting itself all of it, where the
// masters' per-worker ACLs grant it its own directory only); it joins
// once <dir>/workers exists, as the primary's assigner creates it.
func TestChunkServerWaitsForTaskDir(t *testing.T) {
	ens := zkensemble.ForTest(t, zkensemble.Options{})
	const room = "cs-wait"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	zc, err := logroom.Dial(ctx, logroom.DialConfig{Servers: ens.Addrs(), SessionTimeout: 2 * time.Second})
	require.NoError(t, err)
	defer zc.Close()

	csCtx, stop := context.WithCancel(ctx)
	defer stop()
	pr, pw := io.Pipe()
	exited := make(chan int, 1)
	go func() {
		defer pw.Close()
		exited <- runChunkServer(csCtx, []string{"--zk", ens.ConnString(), "--room", room, "--id", "cs1", "--session-timeout", "2s"}, pw, io.Discard)
	}()
	joined := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), chunkServingPrefix) {
				close(joined)
			}
		}
	}()

	dir := chunkDir(room)
	time.Sleep(1500 * time.Millisecond)
	for _, p := range []string{"/dfsmaster-demo", dir} {
		ok, _, err := zc.Conn().Exists(p)
		require.NoError(t, err)
		require.False(t, ok, "%s created by a chunk server that no master let in", p)
	}
	select {
	case <-joined:
		t.Fatal("the chunk server joined without a task directory")
	default:
	}

	require.NoError(t, zkx.EnsurePath(ctx, zc, dir+"/workers"))
	select {
	case <-joined:
	case <-time.After(20 * time.Second):
		t.Fatal("the chunk server did not join once <dir>/workers existed")
	}
	ok, _, err := zc.Conn().Exists(dir + "/workers/cs1")
	require.NoError(t, err)
	require.True(t, ok, "its membership node")
	stop()
	select {
	case code := <-exited:
		require.Equal(t, exitOK, code)
	case <-time.After(20 * time.Second):
		t.Fatal("the chunk server did not stop")
	}
}
