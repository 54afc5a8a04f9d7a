//go:build !unix

package checkpoint

import "os"

// idOf: no inode here, so nothing is remembered (every file is read).
func idOf(os.FileInfo) (fileID, bool) { return fileID{}, false }
