package zkr

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/zkx"
)

func TestParseSeqNode(t *testing.T) {
	g := strings.Repeat("0f", 16)
	for _, tc := range []struct {
		name string
		seq  int64
		ok   bool
	}{
		{"c-" + g + "-0000000007", 7, true},
		{"c-" + g + "-2147483647", 2147483647, true},
		{"c-" + g + "-2147483648", 0, false}, // beyond the 32-bit counter
		{"c-" + g + "--000000001", 0, false}, // negative (wrapped or forged)
		{"c-" + g + "--2147483648", 0, false},
		{"c-" + g + "-+000000007", 0, false},  // a sign is not a digit
		{"c-" + g + "-00000000007", 0, false}, // 11 digits
		{"c-" + g + "-000000001", 0, false},   // 9 digits
		{"c-" + g + "-00000000x1", 0, false},
		{"c-" + strings.ToUpper(g) + "-0000000001", 0, false},
		{"c-" + g[:31] + "-00000000001", 0, false},
		{"l-" + g + "-0000000001", 0, false}, // another prefix
		{"c-" + g + "_0000000001", 0, false},
		{"designation", 0, false},
	} {
		sn, err := ParseSeqNode("c-", tc.name)
		if !tc.ok {
			require.Error(t, err, tc.name)
			continue
		}
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.seq, sn.Seq)
		require.Equal(t, g, sn.GUID)
	}
	ns := []SeqNode{{Name: "b", Seq: 10}, {Name: "a", Seq: 9}, {Name: "c", Seq: 100}}
	SortBySeq(ns)
	require.Equal(t, []int64{9, 10, 100}, []int64{ns[0].Seq, ns[1].Seq, ns[2].Seq}, "as integers, not text")
}

func TestValidNameAndDir(t *testing.T) {
	for _, n := range []string{"a", "10.0.0.5:8080", "master-1", "ünïcode", strings.Repeat("x", zkx.MaxNameLen)} {
		require.NoError(t, zkx.ValidName(n), n)
	}
	for _, n := range []string{"", ".", "..", "a/b", "a b", "a\x00", "tab\t", strings.Repeat("x", zkx.MaxNameLen+1), "\xff", "\uf000"} {
		require.Error(t, zkx.ValidName(n), "%q", n)
	}
	for _, d := range []string{"/a", "/a/b", "/dfs/10.0.0.1:1", "/roomlog/命名 空间 a%20b/members"} {
		require.NoError(t, ValidDir(d), d)
	}
	for _, d := range []string{"", "/", "a", "/a/", "//a", "/a//b", "/zookeeper", "/zookeeper/x", "/a/./b", "/a/tab\t", "/a/\x00", "/a/\xff", "/a/\uf000", "/" + strings.Repeat("x", 256)} {
		require.Error(t, ValidDir(d), "%q", d)
	}
	require.True(t, ValidGUID(NewGUID()))
	require.False(t, ValidGUID(strings.Repeat("g", GUIDLen)))
}
