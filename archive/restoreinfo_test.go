package archive

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReadRestoreInfoRefusesForgedVersion: a restore record is read from a
// data dir an operator may have copied or edited; a room version outside
// what this binary knows is an error naming the file, not a version a
// re-seed would create the room at (above: the old room deleted, then the
// seed refused; below zero: max(-5, 1) quietly lowered a v2 room).
func TestReadRestoreInfoRefusesForgedVersion(t *testing.T) {
	for _, tc := range []struct {
		body string
		ok   bool
	}{
		{`{"Room":"r","Index":5,"RoomVersion":2}`, true},
		{`{"Room":"r","Index":5}`, true}, // unknown: the re-seed decides
		{`{"Room":"r","Index":5,"RoomVersion":999}`, false},
		{`{"Room":"r","Index":5,"RoomVersion":-5}`, false},
		{`{"Room":`, false},
	} {
		dir := t.TempDir()
		path := filepath.Join(dir, RestoreInfoName)
		require.NoError(t, os.WriteFile(path, []byte(tc.body), 0o644))
		ri, err := ReadRestoreInfo(dir)
		if tc.ok {
			require.NoError(t, err, tc.body)
			require.NotNil(t, ri)
			continue
		}
		require.Error(t, err, tc.body)
		require.Contains(t, err.Error(), path, "the error names the file")
	}
}
