package zkensemble

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// DataCopy is a copy of every server's data directory (snapshots and
// transaction logs), taken by CopyData, for RestoreData: the test form of
// "the ensemble was restored from an older backup".
type DataCopy struct {
	dir string // <dir>/server-<i>: a copy of server i's data dir
}

// CopyData copies every server's data directory into a new directory
// under dir, with the servers running (as a file-level backup of a live
// ensemble would be: ZooKeeper ignores a torn last transaction on load).
func (e *Ensemble) CopyData(dir string) (*DataCopy, error) {
	dst, err := os.MkdirTemp(dir, "zkdata-")
	if err != nil {
		return nil, fmt.Errorf("zkensemble: copy data: %w", err)
	}
	for _, s := range e.servers {
		to := filepath.Join(dst, fmt.Sprintf("server-%d", s.index))
		// A server may roll to a new transaction log (or write a
		// snapshot) while its directory is copied: copy again until a
		// pass finds no file the previous one missed, so the copy holds
		// every transaction acknowledged before CopyData was called.
		//
		// Transaction logs ("log.<zxid>") are copied again, whole, after
		// the snapshots of each pass: a snapshot is fuzzy (written while
		// transactions apply) and is made consistent on load by replaying
		// the transactions logged after it began, so the copied logs must
		// be at least as new as the newest copied snapshot. (Copied once,
		// before the snapshot, they restored a tree missing a channel
		// between two that remained.)
		seen := map[string]bool{}
		for pass := 0; ; pass++ {
			n, err := copyNew(s.dataDir(), to, seen)
			if err == nil {
				err = copyLogs(s.dataDir(), to)
			}
			if err != nil {
				return nil, fmt.Errorf("zkensemble: copy data of server %d: %w", s.index, err)
			}
			if n == 0 || pass == 10 {
				break
			}
		}
	}
	return &DataCopy{dir: dst}, nil
}

// copyNew copies the files under src not in seen (relative paths) into
// dst, adds them to seen, and returns how many it copied. A file is copied
// once: it then holds every transaction acknowledged before CopyData was
// called (ZooKeeper fsyncs before it acknowledges); what a later pass
// finds is a file created meanwhile (a new log, a snapshot).
func copyNew(src, dst string, seen map[string]bool) (int, error) {
	n := 0
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		if !d.Type().IsRegular() || seen[rel] || isTxnLog(rel) {
			return nil
		}
		seen[rel] = true
		n++
		return copyFile(p, to)
	})
	return n, err
}

// isTxnLog reports whether rel names a ZooKeeper transaction log.
func isTxnLog(rel string) bool { return strings.HasPrefix(filepath.Base(rel), "log.") }

// copyLogs copies every transaction log under src into dst, whole (a log
// grows while the server runs; a copy taken earlier is overwritten).
func copyLogs(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil || d.IsDir() || !d.Type().IsRegular() || !isTxnLog(rel) {
			return err
		}
		to := filepath.Join(dst, rel)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		return copyFile(p, to)
	})
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// RestoreData stops every server, replaces each data directory with its
// copy in c, and starts the ensemble again: ZooKeeper comes back with the
// tree (and last zxid) of the moment the copy was taken. Clients that saw
// a newer zxid are refused by every server from then on.
func (e *Ensemble) RestoreData(ctx context.Context, c *DataCopy) error {
	return e.replaceData(ctx, func(s *server) error {
		return copyTree(filepath.Join(c.dir, fmt.Sprintf("server-%d", s.index)), s.dataDir())
	})
}

// WipeData stops every server, empties each data directory (keeping only
// myid) and starts the ensemble again, empty: the test form of an
// operator or an orchestrator deleting ZooKeeper's data.
func (e *Ensemble) WipeData(ctx context.Context) error {
	return e.replaceData(ctx, func(s *server) error {
		myid, err := os.ReadFile(filepath.Join(s.dataDir(), "myid"))
		if err != nil {
			return err
		}
		if err := os.MkdirAll(s.dataDir(), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(s.dataDir(), "myid"), myid, 0o644)
	})
}

// replaceData stops every server, removes each data dir, lets fill write
// it again, and starts the ensemble.
func (e *Ensemble) replaceData(ctx context.Context, fill func(*server) error) error {
	var errs []error
	for i := range e.servers {
		errs = append(errs, e.Stop(i))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("zkensemble: stop for data replacement: %w", err)
	}
	for _, s := range e.servers {
		keep, err := os.ReadFile(filepath.Join(s.dataDir(), "myid"))
		if err != nil {
			return fmt.Errorf("zkensemble: server %d: %w", s.index, err)
		}
		if err := os.RemoveAll(s.dataDir()); err != nil {
			return fmt.Errorf("zkensemble: server %d: %w", s.index, err)
		}
		if err := os.MkdirAll(s.dataDir(), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(s.dataDir(), "myid"), keep, 0o644); err != nil {
			return err
		}
		if err := fill(s); err != nil {
			return fmt.Errorf("zkensemble: server %d: fill data dir: %w", s.index, err)
		}
	}
	return e.StartAll(ctx)
}

// copyTree copies the regular files and directories under src into dst
// (created as needed; existing files are overwritten).
func copyTree(src, dst string) error {
	if _, err := copyNew(src, dst, map[string]bool{}); err != nil {
		return err
	}
	return copyLogs(src, dst)
}

// Remove deletes the copy. Idempotent; nil-safe.
func (c *DataCopy) Remove() error {
	if c == nil {
		return nil
	}
	return os.RemoveAll(c.dir)
}
