package namespace

import (
	"fmt"
	"strings"
)

// ApplyEntry runs one encoded command against b and returns the encoded
// Response. A rejected command (bad encoding, invalid path, a check against
// the state failing) writes nothing and is answered with a Response carrying
// its Code; only a storage failure or a corrupt stored record returns an
// error. Deterministic: see the package documentation.
func ApplyEntry(b Batch, entry []byte) ([]byte, error) {
	resp, err := applyCommand(b, entry)
	if err != nil {
		return nil, err
	}
	return EncodeResponse(resp)
}

func applyCommand(b Batch, entry []byte) (Response, error) {
	c, err := DecodeCommand(entry)
	if err != nil {
		return rejectResponse(err), nil
	}
	var blockID uint64
	switch c.Op {
	case OpMkdir:
		err = mkdir(b, c)
	case OpCreate:
		err = create(b, c)
	case OpAddBlock:
		blockID, err = addBlock(b, c)
	case OpRename:
		err = rename(b, c)
	case OpDelete:
		err = remove(b, c)
	case OpAddReplica:
		err = addReplica(b, c)
	case OpLoseServer:
		err = loseServer(b, c)
	default:
		// DecodeCommand validated the op.
		panic(fmt.Sprintf("namespace: validated command has op %d", c.Op))
	}
	if err != nil {
		if _, ok := CodeOf(err); ok {
			return rejectResponse(err), nil
		}
		return Response{}, fmt.Errorf("namespace: %s %s: %w", c.Op, c.Path, err)
	}
	return Response{BlockID: blockID}, nil
}

// walk follows comps from the root as far as they exist: chain[0] is the
// root, chain[i] the record of comps[i-1], so len(chain)-1 components exist.
// Meeting a file before the last component is ErrNotADirectory.
func walk(r Reader, p string, comps []string) ([]record, error) {
	chain := make([]record, 1, len(comps)+1)
	chain[0] = rootRecord
	for i, name := range comps {
		cur := chain[i]
		if cur.Type != TypeDir {
			return nil, reject(ErrNotADirectory, "%s: %s is a file", p, "/"+strings.Join(comps[:i], "/"))
		}
		rec, ok, err := lookup(r, cur.ID, name)
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		chain = append(chain, rec)
	}
	return chain, nil
}

// target is an existing path: its record and its parent directory's id.
type target struct {
	rec    record
	parent uint64
	name   string
}

// resolve finds an existing path, or ErrNotFound. The root resolves to
// itself with parent 0 and name "": callers that would write its entry
// refuse the root first.
func resolve(r Reader, op, p string) (target, error) {
	comps := components(p)
	if len(comps) == 0 {
		return target{rec: rootRecord}, nil
	}
	chain, err := walk(r, p, comps)
	if err != nil {
		return target{}, fmt.Errorf("%s: %w", op, err)
	}
	if len(chain) != len(comps)+1 {
		return target{}, reject(ErrNotFound, "%s %s: no such file or directory", op, p)
	}
	return target{rec: chain[len(comps)], parent: chain[len(comps)-1].ID, name: comps[len(comps)-1]}, nil
}

// parentOf finds the parent directory of a non-root path that must not
// exist yet. It returns the chain from the root to that parent.
func parentOf(r Reader, op, p string) ([]record, error) {
	comps := components(p)
	if len(comps) == 0 {
		return nil, reject(ErrAlreadyExists, "%s %s: the root exists", op, p)
	}
	chain, err := walk(r, p, comps)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	switch {
	case len(chain) == len(comps)+1:
		return nil, reject(ErrAlreadyExists, "%s %s: already exists", op, p)
	case len(chain) < len(comps):
		return nil, reject(ErrNotFound, "%s %s: parent directory %s does not exist", op, p, parentPath(comps))
	}
	// walk checked that chain[len(comps)-1] is a directory before looking
	// up the last component in it.
	return chain, nil
}

func parentPath(comps []string) string {
	return "/" + strings.Join(comps[:len(comps)-1], "/")
}

// allocInodes reserves n inode ids and returns the first.
func allocInodes(b Batch, n uint64) (uint64, error) {
	first, err := counter(b, keyNextInode, RootID+1)
	if err != nil {
		return 0, err
	}
	if err := b.Set(keyNextInode, u64(first+n)); err != nil {
		return 0, fmt.Errorf("namespace: set %q: %w", keyNextInode, err)
	}
	return first, nil
}

func mkdir(b Batch, c Command) error {
	comps := components(c.Path)
	chain, err := walk(b, c.Path, comps)
	if err != nil {
		return fmt.Errorf("mkdir: %w", err)
	}
	found := len(chain) - 1
	if found == len(comps) {
		if c.Parents && chain[found].Type == TypeDir {
			return nil // like mkdir -p: nothing to do
		}
		return reject(ErrAlreadyExists, "mkdir %s: already exists", c.Path)
	}
	missing := comps[found:]
	if len(missing) > 1 && !c.Parents {
		return reject(ErrNotFound, "mkdir %s: parent directory %s does not exist", c.Path, parentPath(comps))
	}
	// Every check passed: write.
	id, err := allocInodes(b, uint64(len(missing)))
	if err != nil {
		return err
	}
	parent := chain[found].ID
	for _, name := range missing {
		if err := setRecord(b, parent, name, record{ID: id, Type: TypeDir}); err != nil {
			return err
		}
		parent, id = id, id+1
	}
	return nil
}

func create(b Batch, c Command) error {
	chain, err := parentOf(b, "create", c.Path)
	if err != nil {
		return err
	}
	comps := components(c.Path)
	id, err := allocInodes(b, 1)
	if err != nil {
		return err
	}
	return setRecord(b, chain[len(comps)-1].ID, comps[len(comps)-1], record{ID: id, Type: TypeFile, Replication: c.Replication})
}

func addBlock(b Batch, c Command) (uint64, error) {
	t, err := resolve(b, "addblock", c.Path)
	if err != nil {
		return 0, err
	}
	if t.rec.Type != TypeFile {
		return 0, reject(ErrIsADirectory, "addblock %s: is a directory", c.Path)
	}
	if t.rec.Blocks >= MaxBlocksPerFile {
		return 0, reject(ErrBadRequest, "addblock %s: file already has %d blocks (max %d)", c.Path, t.rec.Blocks, MaxBlocksPerFile)
	}
	if len(c.Servers) > t.rec.Replication {
		return 0, reject(ErrBadRequest, "addblock %s: %d servers for a file of replication %d", c.Path, len(c.Servers), t.rec.Replication)
	}
	id, err := counter(b, keyNextBlock, 1)
	if err != nil {
		return 0, err
	}
	if err := b.Set(keyNextBlock, u64(id+1)); err != nil {
		return 0, fmt.Errorf("namespace: set %q: %w", keyNextBlock, err)
	}
	key := blockKey(t.rec.ID, uint64(t.rec.Blocks))
	if err := b.Set(key, encodeBlock(Block{ID: id, Size: c.Size})); err != nil {
		return 0, fmt.Errorf("namespace: set %q: %w", key, err)
	}
	if len(c.Servers) > 0 {
		if err := setPlacement(b, Placement{Block: id, RF: t.rec.Replication, Servers: c.Servers}); err != nil {
			return 0, err
		}
	}
	t.rec.Blocks++
	t.rec.Size += c.Size
	return id, setRecord(b, t.parent, t.name, t.rec)
}

func rename(b Batch, c Command) error {
	if c.Path == "/" {
		return reject(ErrInvalidPath, "rename /: cannot move the root")
	}
	src, err := resolve(b, "rename", c.Path)
	if err != nil {
		return err
	}
	chain, err := parentOf(b, "rename", c.Dst)
	if err != nil {
		return err
	}
	for _, anc := range chain {
		if anc.ID == src.rec.ID {
			return reject(ErrInvalidPath, "rename %s to %s: cannot move a directory into itself", c.Path, c.Dst)
		}
	}
	// Every check passed: write. The subtree hangs off src.rec.ID and moves with it.
	comps := components(c.Dst)
	key := direntKey(src.parent, src.name)
	if err := b.Delete(key); err != nil {
		return fmt.Errorf("namespace: delete %q: %w", key, err)
	}
	return setRecord(b, chain[len(comps)-1].ID, comps[len(comps)-1], src.rec)
}

func remove(b Batch, c Command) error {
	if c.Path == "/" {
		return reject(ErrInvalidPath, "delete /: cannot delete the root")
	}
	t, err := resolve(b, "delete", c.Path)
	if err != nil {
		return err
	}
	if t.rec.Type == TypeDir && !c.Recursive {
		nonEmpty, err := hasChildren(b, t.rec.ID)
		if err != nil {
			return err
		}
		if nonEmpty {
			return reject(ErrNotEmpty, "delete %s: directory not empty (use recursive)", c.Path)
		}
	}
	// Every check passed: write.
	if t.rec.Type == TypeDir {
		if err := deleteTree(b, t.rec.ID); err != nil {
			return err
		}
	} else {
		lo, hi := blocksRange(t.rec.ID)
		if err := deletePlacements(b, lo, hi); err != nil {
			return err
		}
		if err := deleteRange(b, lo, hi); err != nil {
			return err
		}
	}
	key := direntKey(t.parent, t.name)
	if err := b.Delete(key); err != nil {
		return fmt.Errorf("namespace: delete %q: %w", key, err)
	}
	return nil
}

// deleteTree removes everything under directory dir (not dir's own entry),
// depth first with an explicit stack, visiting children in key order.
func deleteTree(b Batch, dir uint64) error {
	stack := []uint64{dir}
	for len(stack) > 0 {
		d := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		lo, hi := childrenRange(d)
		var files []uint64
		err := b.Scan(lo, hi, func(k, v []byte) error {
			rec, err := decodeRecord(k, v)
			if err != nil {
				return err
			}
			if rec.Type == TypeDir {
				stack = append(stack, rec.ID)
			} else {
				files = append(files, rec.ID)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("namespace: scan children of inode %d: %w", d, err)
		}
		for _, f := range files {
			blo, bhi := blocksRange(f)
			if err := deletePlacements(b, blo, bhi); err != nil {
				return err
			}
			if err := deleteRange(b, blo, bhi); err != nil {
				return err
			}
		}
		if err := deleteRange(b, lo, hi); err != nil {
			return err
		}
	}
	return nil
}

func deleteRange(b Batch, lo, hi []byte) error {
	if err := b.DeleteRange(lo, hi); err != nil {
		return fmt.Errorf("namespace: delete range [%q, %q): %w", lo, hi, err)
	}
	return nil
}
