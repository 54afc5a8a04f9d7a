package namespace

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzDecodeCommand: any entry either decodes into a valid command that
// re-encodes to an equal command, or is rejected with ErrBadRequest or
// ErrInvalidPath; never a panic.
func FuzzDecodeCommand(f *testing.F) {
	for _, c := range []Command{
		cmdMkdir("/a/b", true), cmdCreate("/f", 3), cmdAddBlock("/f", 1<<27),
		cmdRename("/a", "/b"), cmdDelete("/a", true),
	} {
		b, err := EncodeCommand(c)
		require.NoError(f, err)
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{CommandVersion, 0x80})
	f.Fuzz(func(t *testing.T, entry []byte) {
		c, err := DecodeCommand(entry)
		if err != nil {
			code, ok := CodeOf(err)
			require.True(t, ok, "%v", err)
			require.Contains(t, []Code{CodeBadRequest, CodeInvalidPath}, code)
			return
		}
		b, err := EncodeCommand(c)
		require.NoError(t, err)
		again, err := DecodeCommand(b)
		require.NoError(t, err)
		require.Equal(t, c, again)
	})
}
