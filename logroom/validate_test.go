package logroom

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestValidateBase(t *testing.T) {
	cases := []struct {
		base string
		why  string // "" when valid, else what the error must say
	}{
		{DefaultBase, ""},
		{"/a/b/c", ""},
		{"/app/channels", ""}, // a room child's name below the first component
		{"/app/epoch/members", ""},
		{"relative", "must be absolute"},
		{"", "must be absolute"},
		{"/", "must be absolute"},
		{"/trailing/", "no trailing '/'"},
		{"/a//b", `component "": empty`},
		{"/a/./b", `component ".": is a relative path element`},
		{"/zookeeper", `component "zookeeper": reserved`},
		{"/a/zookeeper", `component "zookeeper": reserved`},
		{"/channels", `component "channels": reserved`},
		{"/a/x\x01", "contains character U+0001"},
		{"/" + strings.Repeat("x", MaxNameBytes+1), "bytes, at most"},
	}
	for _, tc := range cases {
		t.Run(tc.base, func(t *testing.T) {
			err := ValidateBase(tc.base)
			if tc.why == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrBadName)
			require.ErrorContains(t, err, tc.why)
			require.ErrorContains(t, err, "base path")
		})
	}
}

func TestDefaultSessionTimeout(t *testing.T) {
	require.Equal(t, 4*time.Second, DefaultSessionTimeout)
	require.Equal(t, "/roomlog", DefaultBase)
	require.NoError(t, ValidateBase(DefaultBase))
}
