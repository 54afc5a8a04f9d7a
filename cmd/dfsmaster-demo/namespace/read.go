package namespace

import "fmt"

// Entry is one line of a listing.
type Entry struct {
	Name        string `json:"name"`
	Type        string `json:"type"` // "dir" or "file"
	Size        int64  `json:"size"`
	Replication int    `json:"replication"`
	Blocks      int    `json:"blocks"` // number of blocks
}

// Info describes one path.
type Info struct {
	Path        string  `json:"path"`
	Type        string  `json:"type"` // "dir" or "file"
	Size        int64   `json:"size"`
	Replication int     `json:"replication"`
	Blocks      int     `json:"blocks"`     // number of blocks
	BlockList   []Block `json:"block_list"` // the blocks in order (empty for a directory)
}

func entryOf(name string, rec record) Entry {
	return Entry{Name: name, Type: rec.Type.String(), Size: rec.Size, Replication: rec.Replication, Blocks: rec.Blocks}
}

// stat resolves any valid path, the root included.
func stat(r Reader, op, p string) (record, string, error) {
	if err := ValidatePath(p); err != nil {
		return record{}, "", err
	}
	t, err := resolve(r, op, p)
	return t.rec, t.name, err
}

// Ls lists a directory's children in name order, or a file as one entry
// (like ls). Errors wrap ErrInvalidPath, ErrNotFound, ErrNotADirectory, or
// are storage failures.
func Ls(r Reader, p string) ([]Entry, error) {
	rec, name, err := stat(r, "ls", p)
	if err != nil {
		return nil, err
	}
	if rec.Type == TypeFile {
		return []Entry{entryOf(name, rec)}, nil
	}
	entries := []Entry{}
	lo, hi := childrenRange(rec.ID)
	err = r.Scan(lo, hi, func(k, v []byte) error {
		child, err := decodeRecord(k, v)
		if err != nil {
			return err
		}
		entries = append(entries, entryOf(nameOf(k), child))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("namespace: ls %s: %w", p, err)
	}
	return entries, nil
}

// Stat describes one path, with its block list for a file.
func Stat(r Reader, p string) (Info, error) {
	rec, _, err := stat(r, "stat", p)
	if err != nil {
		return Info{}, err
	}
	info := Info{Path: p, Type: rec.Type.String(), Size: rec.Size, Replication: rec.Replication, Blocks: rec.Blocks, BlockList: []Block{}}
	if rec.Type != TypeFile {
		return info, nil
	}
	lo, hi := blocksRange(rec.ID)
	err = r.Scan(lo, hi, func(k, v []byte) error {
		blk, err := decodeBlock(k, v)
		if err != nil {
			return err
		}
		info.BlockList = append(info.BlockList, blk)
		return nil
	})
	if err != nil {
		return Info{}, fmt.Errorf("namespace: stat %s: %w", p, err)
	}
	if len(info.BlockList) != rec.Blocks {
		return Info{}, fmt.Errorf("%w: stat %s: record says %d blocks, found %d", ErrCorrupt, p, rec.Blocks, len(info.BlockList))
	}
	return info, nil
}
