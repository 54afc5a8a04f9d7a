package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNSGenSorted(t *testing.T) {
	g := newNSGen(demoUsers, 200_000, 1)
	var prev []byte
	n, users := 0, map[string]bool{}
	for {
		c := g.chunk()
		if len(c.pairs) == 0 {
			break
		}
		for _, kv := range c.pairs {
			require.Positive(t, bytes.Compare(kv[0], prev), "%q after %q", kv[0], prev)
			prev = append(prev[:0], kv[0]...)
			require.NotEmpty(t, kv[1])
			users[string(bytes.Split(kv[0], []byte("/"))[2])] = true
			n++
		}
	}
	require.InDelta(t, 200_000, n, 20_000)
	require.Len(t, users, len(demoUsers), "every user gets records")
	zoe := newNSGen([]string{"zoe"}, 0, 2)
	e := zoe.entry(4096)
	require.InDelta(t, 4096, len(e), 600)
	require.Positive(t, bytes.Compare([]byte("/user/zoe/"), prev), "the new user's keys sort after the ingested ones")
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"10GiB": 10 << 30, "1G": 1 << 30, "512MiB": 512 << 20, "1.5GiB": 3 << 29, "4096": 4096} {
		got, err := parseSize(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	_, err := parseSize("ten")
	require.Error(t, err)
}
