package namespace

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestValidatePath(t *testing.T) {
	long := "/" + strings.Repeat("a", MaxNameBytes)
	deep := strings.Repeat("/abcdefg", MaxPathBytes/8) // exactly MaxPathBytes
	for _, tc := range []struct {
		path string
		ok   bool
	}{
		{"/", true},
		{"/a", true},
		{"/a/b/c", true},
		{"/dir with space/ünïcødé", true},
		{"/.hidden", true},
		{"/a..b", true},
		{long, true},
		{deep, true},
		{"", false},
		{"a", false},
		{"a/b", false},
		{"/a/", false},
		{"//a", false},
		{"/a//b", false},
		{"/.", false},
		{"/..", false},
		{"/a/./b", false},
		{"/a/../b", false},
		{"/a/..", false},
		{"/a\x00b", false},
		{"/a\xffb", false},
		{long + "a", false},
		{deep + "/x", false},
	} {
		t.Run(tc.path, func(t *testing.T) {
			err := ValidatePath(tc.path)
			if tc.ok {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalidPath)
			code, ok := CodeOf(err)
			require.True(t, ok)
			require.Equal(t, CodeInvalidPath, code)
		})
	}
}

func TestComponents(t *testing.T) {
	require.Empty(t, components("/"))
	require.Equal(t, []string{"a"}, components("/a"))
	require.Equal(t, []string{"a", "b", "c"}, components("/a/b/c"))
}
