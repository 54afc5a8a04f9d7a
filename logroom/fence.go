package logroom

import "github.com/roomlog/roomlog/third_party/zk"

// FenceOps returns the checks every write of w begins with (its epoch
// znode at the version its takeover produced, its token): a Multi of the
// caller's that begins with them lands only while w's epoch holds.
func (w *Writer) FenceOps() []interface{} { return w.fenceOps() }

// FenceRefused reports whether a Multi that began with FenceOps failed on
// them (a newer epoch, or the room or the token gone).
func FenceRefused(res []zk.MultiResponse, err error) bool {
	i, e := multiErr(res, err)
	return fenceRefused(i, e)
}
