package logroom

import "github.com/roomlog/roomlog/zkx"

// metaMaxDepth bounds the nesting of a meta znode's msgpack value: metas are
// flat maps, so anything deeper is foreign data.
const metaMaxDepth = 4

// CheckMsgpack verifies that data holds exactly one msgpack value, nested at
// most maxDepth deep, whose every declared length (string, bin, ext, array,
// map) fits in the bytes that remain. Decoding a value that passes it
// allocates O(len(data)) and cannot recurse deeply, whatever the input: run
// it on znode data (input, not truth) before msgpack.Unmarshal. It is
// zkx.CheckMsgpack (package zkx), exported here for other modules.
func CheckMsgpack(data []byte, maxDepth int) error { return zkx.CheckMsgpack(data, maxDepth) }

func checkMsgpack(data []byte, maxDepth int) error { return zkx.CheckMsgpack(data, maxDepth) }
