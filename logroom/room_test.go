package logroom

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"
)

func TestValidateName(t *testing.T) {
	cases := []struct {
		name string
		ok   bool
	}{
		{"room", true},
		{"a.b-c_d", true},
		{"ünïcode", true},
		{strings.Repeat("x", MaxNameBytes), true},
		{"", false},
		{"a/b", false},
		{"/", false},
		{".", false},
		{"..", false},
		{"zookeeper", false},
		{"epoch", false},
		{"channels", false},
		{"members", false},
		{strings.Repeat("x", MaxNameBytes+1), false},
		{"tab\there", false},
		{"nul\x00", false},
		{"del\x7f", false},
		{"bad\xffutf8", false},
		{"private\ue000use", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateName(tc.name)
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, ErrBadName)
			}
		})
	}
}

func TestOpenRoomBadNamesWriteNothing(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	ctx := testCtx(t, 30*time.Second)
	base := testBase(t)
	for _, name := range []string{"", "a/b", "..", "zookeeper", "x\x01"} {
		_, err := OpenRoom(ctx, c, name, RoomOptions{Base: base})
		require.ErrorIs(t, err, ErrBadName, "name %q", name)
	}
	for _, b := range []string{"relative", "/", "/trailing/", "/a//b"} {
		_, err := OpenRoom(ctx, c, "ok", RoomOptions{Base: b})
		require.ErrorIs(t, err, ErrBadName, "base %q", b)
	}
	ok, _, err := c.Conn().Exists(base)
	require.NoError(t, err)
	require.False(t, ok, "nothing may be written for bad names")
}

func TestOpenRoomConcurrentIdempotent(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	ctx := testCtx(t, 30*time.Second)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = OpenRoom(ctx, c, "same", RoomOptions{Base: testBase(t)})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	r := openRoom(t, c, "same")
	require.Equal(t, testBase(t)+"/same/members", r.Path("members"))
	ep, err := r.Epoch(ctx)
	require.NoError(t, err)
	require.Zero(t, ep)
	chs, err := r.Channels(ctx)
	require.NoError(t, err)
	require.Empty(t, chs)

	// A foreign znode where a room should be is refused.
	_, err = c.Conn().Create(testBase(t)+"/foreign", []byte("not msgpack"), 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	_, err = OpenRoom(ctx, c, "foreign", RoomOptions{Base: testBase(t)})
	require.ErrorIs(t, err, ErrCorrupt)
}

func TestDigestAuth(t *testing.T) {
	e := sharedZK(t)
	ctx := testCtx(t, 30*time.Second)
	c, err := Dial(ctx, DialConfig{Servers: e.Addrs(), Auth: &Digest{User: "alice", Password: "secret"}})
	require.NoError(t, err)
	defer c.Close()
	r, err := OpenRoom(ctx, c, "locked", RoomOptions{Base: testBase(t)})
	require.NoError(t, err)
	w, err := r.NewWriter(ctx, WriterConfig{})
	require.NoError(t, err)
	defer w.Close()
	_, err = w.Append(ctx, []byte("x"))
	require.NoError(t, err)

	acl, _, err := c.Conn().GetACL(r.Path("channels"))
	require.NoError(t, err)
	require.Equal(t, zk.DigestACL(zk.PermAll, "alice", "secret"), acl)

	anon := dial(t, e.Addrs())
	_, _, err = anon.Conn().Get(r.Path(epochNode))
	require.True(t, errors.Is(err, zk.ErrNoAuth), "got %v", err)
}

func TestDialConfigValidate(t *testing.T) {
	err := DialConfig{SessionTimeout: -1, Servers: []string{" "}, Auth: &Digest{}}.Validate()
	require.ErrorIs(t, err, ErrBadConfig)
	for _, want := range []string{"SessionTimeout", "empty address", "Auth.User"} {
		require.Contains(t, err.Error(), want)
	}
	require.ErrorIs(t, DialConfig{}.Validate(), ErrBadConfig)
}

func TestWriterConfigValidate(t *testing.T) {
	require.NoError(t, WriterConfig{}.Validate())
	err := WriterConfig{MaxBatchBytes: HardMaxBatchBytes + 1, Linger: -2, MaxInFlight: -1, EagerInFlight: 9,
		MaxChannelBatches: MaxChannelBatchesLimit + 1, MaxRoomBytes: -1, Compression: CompressionZstd + 1, MaxRoomVersion: -1}.Validate()
	require.ErrorIs(t, err, ErrBadConfig)
	for _, want := range []string{"MaxBatchBytes", "Linger", "MaxInFlight", "EagerInFlight", "MaxChannelBatches", "MaxRoomBytes", "Compression", "MaxRoomVersion"} {
		require.Contains(t, err.Error(), want)
	}
}

func TestOpenRoomRefusesForeignACL(t *testing.T) {
	e := sharedZK(t)
	ctx := testCtx(t, 30*time.Second)
	anon := dial(t, e.Addrs())
	_, err := OpenRoom(ctx, anon, "open", RoomOptions{Base: testBase(t)})
	require.NoError(t, err)
	alice, err := Dial(ctx, DialConfig{Servers: e.Addrs(), Auth: &Digest{User: "alice", Password: "pw"}})
	require.NoError(t, err)
	defer alice.Close()
	_, err = OpenRoom(ctx, alice, "open", RoomOptions{Base: testBase(t)})
	require.ErrorIs(t, err, ErrForeignACL)
	// Her own room opens; an anonymous client cannot read it.
	_, err = OpenRoom(ctx, alice, "hers", RoomOptions{Base: testBase(t)})
	require.NoError(t, err)
	_, err = OpenRoom(ctx, anon, "hers", RoomOptions{Base: testBase(t)})
	require.ErrorIs(t, err, zk.ErrNoAuth)
}
