package namespace

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The tree every TestApply case starts from:
//
//	/a/          dir
//	/a/b/        dir
//	/a/b/c/      dir
//	/a/b/g       file, replication 2, no blocks
//	/a/f         file, replication 3, blocks 1 (10 bytes) and 2 (20 bytes)
//	/e/          empty dir
var applySetup = []Command{
	cmdMkdir("/a/b/c", true),
	cmdCreate("/a/f", 3),
	cmdAddBlock("/a/f", 10),
	cmdAddBlock("/a/f", 20),
	cmdCreate("/a/b/g", 2),
	cmdMkdir("/e", false),
}

func TestApply(t *testing.T) {
	type check func(t *testing.T, n *nsStore)
	exists := func(p, typ string) check {
		return func(t *testing.T, n *nsStore) {
			info, err := n.stat(p)
			require.NoError(t, err, p)
			require.Equal(t, typ, info.Type, p)
		}
	}
	gone := func(p string) check {
		return func(t *testing.T, n *nsStore) {
			_, err := n.stat(p)
			require.ErrorIs(t, err, ErrNotFound, p)
		}
	}
	children := func(p string, names ...string) check {
		return func(t *testing.T, n *nsStore) {
			if names == nil {
				names = []string{}
			}
			require.Equal(t, names, n.names(p), p)
		}
	}
	for _, tc := range []struct {
		name   string
		c      Command
		code   Code   // "" = success
		block  uint64 // addblock success: the id expected
		checks []check
	}{
		// mkdir
		{name: "mkdir", c: cmdMkdir("/a/d", false), checks: []check{exists("/a/d", "dir"), children("/a", "b", "d", "f")}},
		{name: "mkdir parents", c: cmdMkdir("/x/y/z", true), checks: []check{exists("/x", "dir"), exists("/x/y", "dir"), exists("/x/y/z", "dir"), children("/x/y", "z")}},
		{name: "mkdir parents partly existing", c: cmdMkdir("/a/b/c/d/e", true), checks: []check{exists("/a/b/c/d/e", "dir")}},
		{name: "mkdir parents existing dir", c: cmdMkdir("/a/b", true), checks: []check{children("/a/b", "c", "g")}},
		{name: "mkdir parents root", c: cmdMkdir("/", true)},
		{name: "mkdir exists", c: cmdMkdir("/a/b", false), code: CodeAlreadyExists},
		{name: "mkdir exists as file", c: cmdMkdir("/a/f", false), code: CodeAlreadyExists},
		{name: "mkdir parents exists as file", c: cmdMkdir("/a/f", true), code: CodeAlreadyExists},
		{name: "mkdir root", c: cmdMkdir("/", false), code: CodeAlreadyExists},
		{name: "mkdir missing parent", c: cmdMkdir("/x/y", false), code: CodeNotFound},
		{name: "mkdir under file", c: cmdMkdir("/a/f/x", false), code: CodeNotADirectory},
		{name: "mkdir parents under file", c: cmdMkdir("/a/f/x/y", true), code: CodeNotADirectory},
		{name: "mkdir invalid path", c: cmdMkdir("/a/../b", false), code: CodeInvalidPath},
		{name: "mkdir relative path", c: cmdMkdir("a", false), code: CodeInvalidPath},

		// create
		{name: "create", c: cmdCreate("/e/h", 1), checks: []check{exists("/e/h", "file"), children("/e", "h")}},
		{name: "create exists", c: cmdCreate("/a/f", 3), code: CodeAlreadyExists},
		{name: "create exists as dir", c: cmdCreate("/a/b", 3), code: CodeAlreadyExists},
		{name: "create root", c: cmdCreate("/", 3), code: CodeAlreadyExists},
		{name: "create missing parent", c: cmdCreate("/x/h", 3), code: CodeNotFound},
		{name: "create under file", c: cmdCreate("/a/f/h", 3), code: CodeNotADirectory},
		{name: "create replication 0", c: cmdCreate("/e/h", 0), code: CodeBadRequest},
		{name: "create replication too high", c: cmdCreate("/e/h", MaxReplication+1), code: CodeBadRequest},
		{name: "create invalid path", c: cmdCreate("/e/h/", 3), code: CodeInvalidPath},

		// addblock
		{name: "addblock", c: cmdAddBlock("/a/b/g", 7), block: 3},
		{name: "addblock again", c: cmdAddBlock("/a/f", 30), block: 3},
		{name: "addblock size 0", c: cmdAddBlock("/a/f", 0), block: 3},
		{name: "addblock missing", c: cmdAddBlock("/a/nope", 1), code: CodeNotFound},
		{name: "addblock missing parent", c: cmdAddBlock("/x/nope", 1), code: CodeNotFound},
		{name: "addblock dir", c: cmdAddBlock("/a/b", 1), code: CodeIsADirectory},
		{name: "addblock root", c: cmdAddBlock("/", 1), code: CodeIsADirectory},
		{name: "addblock under file", c: cmdAddBlock("/a/f/x", 1), code: CodeNotADirectory},
		{name: "addblock negative size", c: cmdAddBlock("/a/f", -1), code: CodeBadRequest},
		{name: "addblock size too big", c: cmdAddBlock("/a/f", MaxBlockSize+1), code: CodeBadRequest},

		// rename
		{name: "rename file", c: cmdRename("/a/f", "/e/f2"), checks: []check{gone("/a/f"), exists("/e/f2", "file"), children("/a", "b")}},
		{name: "rename file same dir", c: cmdRename("/a/f", "/a/a"), checks: []check{children("/a", "a", "b")}},
		{name: "rename dir with subtree", c: cmdRename("/a/b", "/e/b2"), checks: []check{
			gone("/a/b"), gone("/a/b/c"), exists("/e/b2", "dir"), exists("/e/b2/c", "dir"), exists("/e/b2/g", "file"), children("/e/b2", "c", "g")}},
		{name: "rename dir up", c: cmdRename("/a/b/c", "/c"), checks: []check{exists("/c", "dir"), children("/a/b", "g")}},
		{name: "rename dir to sibling prefix", c: cmdRename("/a", "/ab"), checks: []check{exists("/ab/b/c", "dir"), gone("/a")}},
		{name: "rename dst exists", c: cmdRename("/a/f", "/a/b/g"), code: CodeAlreadyExists},
		{name: "rename dst exists dir", c: cmdRename("/a/f", "/e"), code: CodeAlreadyExists},
		{name: "rename onto itself", c: cmdRename("/a/f", "/a/f"), code: CodeAlreadyExists},
		{name: "rename dst root", c: cmdRename("/a/f", "/"), code: CodeAlreadyExists},
		{name: "rename src missing", c: cmdRename("/a/nope", "/e/x"), code: CodeNotFound},
		{name: "rename dst parent missing", c: cmdRename("/a/f", "/x/f"), code: CodeNotFound},
		{name: "rename dst parent file", c: cmdRename("/a/b/g", "/a/f/g"), code: CodeNotADirectory},
		{name: "rename src through file", c: cmdRename("/a/f/x", "/e/x"), code: CodeNotADirectory},
		{name: "rename dir into itself", c: cmdRename("/a", "/a/x"), code: CodeInvalidPath},
		{name: "rename dir into descendant", c: cmdRename("/a", "/a/b/c/x"), code: CodeInvalidPath},
		{name: "rename root", c: cmdRename("/", "/x"), code: CodeInvalidPath},
		{name: "rename invalid dst", c: cmdRename("/a/f", "/e//f"), code: CodeInvalidPath},

		// delete
		{name: "delete file", c: cmdDelete("/a/f", false), checks: []check{gone("/a/f"), children("/a", "b")}},
		{name: "delete empty dir", c: cmdDelete("/e", false), checks: []check{gone("/e"), children("/", "a")}},
		{name: "delete empty dir recursive", c: cmdDelete("/e", true), checks: []check{gone("/e")}},
		{name: "delete recursive", c: cmdDelete("/a", true), checks: []check{gone("/a"), gone("/a/b/c"), children("/", "e")}},
		{name: "delete not empty", c: cmdDelete("/a/b", false), code: CodeNotEmpty},
		{name: "delete missing", c: cmdDelete("/nope", true), code: CodeNotFound},
		{name: "delete through file", c: cmdDelete("/a/f/x", true), code: CodeNotADirectory},
		{name: "delete root", c: cmdDelete("/", true), code: CodeInvalidPath},
		{name: "delete invalid path", c: cmdDelete("/a/./b", true), code: CodeInvalidPath},

		// malformed
		{name: "unknown op", c: Command{Op: 42, Path: "/a"}, code: CodeBadRequest},
		{name: "stray field", c: Command{Op: OpDelete, Path: "/a", Size: 3}, code: CodeBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNSStore(t)
			for _, c := range applySetup {
				n.ok(c)
			}
			before, keysBefore := n.hash(), n.nsKeys()
			r := n.do(tc.c)
			if tc.code != "" {
				require.Equal(t, tc.code, r.Code, r.Message)
				require.NotEmpty(t, r.Message)
				code, ok := CodeOf(r.Err())
				require.True(t, ok)
				require.Equal(t, tc.code, code)
				require.Zero(t, r.BlockID)
				require.Equal(t, before, n.hash(), "a rejected command changed the state")
				require.Equal(t, keysBefore, n.nsKeys())
			} else {
				require.NoError(t, r.Err())
				require.Equal(t, tc.block, r.BlockID)
			}
			for _, c := range tc.checks {
				c(t, n)
			}
		})
	}
}

func TestApplyRejectedEntryIsNotAnError(t *testing.T) {
	n := newNSStore(t)
	for _, entry := range [][]byte{nil, {0}, {CommandVersion}, {CommandVersion + 1, 0x80}, []byte("garbage")} {
		r := n.applyEntries(entry)[0]
		require.Equal(t, CodeBadRequest, r.Code)
	}
	require.Equal(t, uint64(5), n.s.AppliedIndex())
	require.Empty(t, n.nsKeys())
}

func TestStatAndLs(t *testing.T) {
	n := newNSStore(t)
	for _, c := range applySetup {
		n.ok(c)
	}
	info, err := n.stat("/a/f")
	require.NoError(t, err)
	require.Equal(t, Info{Path: "/a/f", Type: "file", Size: 30, Replication: 3, Blocks: 2,
		BlockList: []Block{{ID: 1, Size: 10}, {ID: 2, Size: 20}}}, info)

	info, err = n.stat("/")
	require.NoError(t, err)
	require.Equal(t, Info{Path: "/", Type: "dir", BlockList: []Block{}}, info)

	info, err = n.stat("/a/b")
	require.NoError(t, err)
	require.Equal(t, Info{Path: "/a/b", Type: "dir", BlockList: []Block{}}, info)

	entries, err := n.ls("/a")
	require.NoError(t, err)
	require.Equal(t, []Entry{
		{Name: "b", Type: "dir"},
		{Name: "f", Type: "file", Size: 30, Replication: 3, Blocks: 2},
	}, entries)

	entries, err = n.ls("/a/f") // a file lists as itself
	require.NoError(t, err)
	require.Equal(t, []Entry{{Name: "f", Type: "file", Size: 30, Replication: 3, Blocks: 2}}, entries)

	entries, err = n.ls("/e")
	require.NoError(t, err)
	require.NotNil(t, entries)
	require.Empty(t, entries)

	for p, want := range map[string]error{
		"/nope":     ErrNotFound,
		"/a/nope/x": ErrNotFound,
		"/a/f/x":    ErrNotADirectory,
		"a":         ErrInvalidPath,
		"/a/":       ErrInvalidPath,
	} {
		_, err := n.ls(p)
		require.ErrorIs(t, err, want, p)
		_, err = n.stat(p)
		require.ErrorIs(t, err, want, p)
	}
}

// Names sort by bytes, and a name that is a prefix of another, or of another
// directory's id, never leaks into the wrong listing.
func TestLsOrderAndIsolation(t *testing.T) {
	n := newNSStore(t)
	names := []string{"b", "a", "ab", "a b", "B", "ä", "z", "aa"}
	n.ok(cmdMkdir("/d", false))
	n.ok(cmdMkdir("/d2", false))
	for _, name := range names {
		n.ok(cmdCreate("/d/"+name, 1))
	}
	n.ok(cmdCreate("/d2/other", 1))
	require.Equal(t, []string{"B", "a", "a b", "aa", "ab", "b", "z", "ä"}, n.names("/d"))
	require.Equal(t, []string{"other"}, n.names("/d2"))
	require.Equal(t, []string{"d", "d2"}, n.names("/"))
}

// Block ids come from the log and are never reused, even after the file that
// held them is deleted and a file of the same name is created again.
func TestBlockIDsNeverReused(t *testing.T) {
	n := newNSStore(t)
	n.ok(cmdCreate("/f", 3))
	seen := map[uint64]bool{}
	for round := 0; round < 3; round++ {
		for i := 0; i < 4; i++ {
			r := n.ok(cmdAddBlock("/f", int64(i)))
			require.False(t, seen[r.BlockID], "block id %d reused", r.BlockID)
			seen[r.BlockID] = true
		}
		n.ok(cmdDelete("/f", false))
		n.ok(cmdCreate("/f", 3))
	}
	require.Len(t, seen, 12)
	for id := uint64(1); id <= 12; id++ {
		require.True(t, seen[id])
	}
}

// Deleting a subtree removes every key it owned: afterwards only the
// counters remain.
func TestDeleteSubtreeLeavesNoKeys(t *testing.T) {
	n := newNSStore(t)
	n.ok(cmdMkdir("/t", false))
	for i := 0; i < 5; i++ {
		dir := fmt.Sprintf("/t/d%d/e%d", i, i)
		n.ok(cmdMkdir(dir, true))
		for j := 0; j < 3; j++ {
			f := fmt.Sprintf("%s/f%d", dir, j)
			n.ok(cmdCreate(f, 2))
			n.ok(cmdAddBlock(f, 100))
			n.ok(cmdAddBlock(f, 200))
		}
	}
	n.ok(cmdRename("/t/d1", "/t/d0/e0/moved")) // a moved subtree is deleted with its new parent
	n.ok(cmdDelete("/t", true))
	require.Equal(t, []string{string(keyNextBlock), string(keyNextInode)}, n.nsKeys())
	require.Equal(t, []string{}, n.names("/"))
}

// Renaming a directory moves its whole subtree: everything stays reachable
// under the new path with the same content, and further changes through the
// new path work.
func TestRenameSubtree(t *testing.T) {
	n := newNSStore(t)
	n.ok(cmdMkdir("/src/x/y", true))
	n.ok(cmdCreate("/src/x/y/f", 2))
	n.ok(cmdAddBlock("/src/x/y/f", 5))
	n.ok(cmdCreate("/src/g", 1))
	n.ok(cmdMkdir("/dst", false))
	fBefore, err := n.stat("/src/x/y/f")
	require.NoError(t, err)

	n.ok(cmdRename("/src", "/dst/moved"))
	_, err = n.stat("/src")
	require.ErrorIs(t, err, ErrNotFound)
	fAfter, err := n.stat("/dst/moved/x/y/f")
	require.NoError(t, err)
	fBefore.Path = fAfter.Path
	require.Equal(t, fBefore, fAfter)
	require.Equal(t, []string{"g", "x"}, n.names("/dst/moved"))

	r := n.ok(cmdAddBlock("/dst/moved/x/y/f", 6))
	require.Equal(t, uint64(2), r.BlockID)
	n.ok(cmdRename("/dst/moved/x", "/x"))
	require.Equal(t, []string{"g"}, n.names("/dst/moved"))
	require.Equal(t, []string{"dst", "x"}, n.names("/"))
	info, err := n.stat("/x/y/f")
	require.NoError(t, err)
	require.Equal(t, []Block{{ID: 1, Size: 5}, {ID: 2, Size: 6}}, info.BlockList)
	// The old name of a moved directory is free again.
	n.ok(cmdMkdir("/src", false))
	require.Equal(t, []string{}, n.names("/src"))
}

func TestDeepPath(t *testing.T) {
	n := newNSStore(t)
	deep := strings.Repeat("/d", MaxPathBytes/2)
	n.ok(cmdMkdir(deep, true))
	n.ok(cmdCreate(deep[:len(deep)-2]+"/f", 1))
	n.ok(cmdDelete("/d", true))
	require.Equal(t, []string{}, n.names("/"))
}
