// Package faultfs is a Pebble file system (vfs.FS) over the real disk that
// can stall or slow its writes on demand, for tests of what a store and a
// replica do when their disk stops answering.
//
// While stalled, every write-side operation — Write, WriteAt, Sync,
// SyncData, SyncTo and Preallocate on a file; Create, Link, Remove,
// RemoveAll, Rename, ReuseForWrite and MkdirAll on the file system — blocks
// until Resume, as a write to a hung device blocks in the kernel. Reads pass
// (a stalled device often still serves reads from the page cache). With a
// delay set, every write-side operation takes at least that long: a slow
// disk that still completes.
//
// Operations that started before Stall complete normally; the blocking
// happens at the start of an operation, so a stalled operation has done
// nothing yet.
package faultfs

import (
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// FS wraps a vfs.FS. The zero value is not usable; use New.
type FS struct {
	vfs.FS
	mu      sync.Mutex
	cond    sync.Cond
	stalled bool // guarded by mu
	blocked atomic.Int64
	delay   atomic.Int64 // nanoseconds
}

// New wraps inner (vfs.Default when nil).
func New(inner vfs.FS) *FS {
	if inner == nil {
		inner = vfs.Default
	}
	f := &FS{FS: inner}
	f.cond.L = &f.mu
	return f
}

// Stall makes every later write-side operation block until Resume.
func (f *FS) Stall() {
	f.mu.Lock()
	f.stalled = true
	f.mu.Unlock()
}

// Resume releases the blocked operations and stops stalling.
func (f *FS) Resume() {
	f.mu.Lock()
	f.stalled = false
	f.cond.Broadcast()
	f.mu.Unlock()
}

// SetDelay makes every write-side operation take at least d (0: none).
func (f *FS) SetDelay(d time.Duration) { f.delay.Store(int64(d)) }

// Blocked is the number of operations blocked by Stall right now.
func (f *FS) Blocked() int { return int(f.blocked.Load()) }

// gate is called at the start of every write-side operation.
func (f *FS) gate() {
	if d := time.Duration(f.delay.Load()); d > 0 {
		time.Sleep(d)
	}
	f.mu.Lock()
	if f.stalled {
		f.blocked.Add(1)
		for f.stalled {
			f.cond.Wait()
		}
		f.blocked.Add(-1)
	}
	f.mu.Unlock()
}

// Unwrap is part of vfs.FS.
func (f *FS) Unwrap() vfs.FS { return f.FS }

func (f *FS) wrap(file vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return &gatedFile{File: file, fs: f}, nil
}

// Create is part of vfs.FS.
func (f *FS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f.gate()
	return f.wrap(f.FS.Create(name, category))
}

// Open is part of vfs.FS.
func (f *FS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	return f.wrap(f.FS.Open(name, opts...))
}

// OpenReadWrite is part of vfs.FS.
func (f *FS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return f.wrap(f.FS.OpenReadWrite(name, category, opts...))
}

// OpenDir is part of vfs.FS.
func (f *FS) OpenDir(name string) (vfs.File, error) {
	return f.wrap(f.FS.OpenDir(name))
}

// Link is part of vfs.FS.
func (f *FS) Link(oldname, newname string) error {
	f.gate()
	return f.FS.Link(oldname, newname)
}

// Remove is part of vfs.FS.
func (f *FS) Remove(name string) error {
	f.gate()
	return f.FS.Remove(name)
}

// RemoveAll is part of vfs.FS.
func (f *FS) RemoveAll(name string) error {
	f.gate()
	return f.FS.RemoveAll(name)
}

// Rename is part of vfs.FS.
func (f *FS) Rename(oldname, newname string) error {
	f.gate()
	return f.FS.Rename(oldname, newname)
}

// ReuseForWrite is part of vfs.FS.
func (f *FS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f.gate()
	return f.wrap(f.FS.ReuseForWrite(oldname, newname, category))
}

// MkdirAll is part of vfs.FS.
func (f *FS) MkdirAll(dir string, perm os.FileMode) error {
	f.gate()
	return f.FS.MkdirAll(dir, perm)
}

// gatedFile gates a file's write-side operations.
type gatedFile struct {
	vfs.File
	fs *FS
}

func (w *gatedFile) Write(p []byte) (int, error) {
	w.fs.gate()
	return w.File.Write(p)
}

func (w *gatedFile) WriteAt(p []byte, off int64) (int, error) {
	w.fs.gate()
	return w.File.WriteAt(p, off)
}

func (w *gatedFile) Preallocate(off, n int64) error {
	w.fs.gate()
	return w.File.Preallocate(off, n)
}

func (w *gatedFile) Sync() error {
	w.fs.gate()
	return w.File.Sync()
}

func (w *gatedFile) SyncData() error {
	w.fs.gate()
	return w.File.SyncData()
}

func (w *gatedFile) SyncTo(length int64) (bool, error) {
	w.fs.gate()
	return w.File.SyncTo(length)
}

var _ vfs.FS = (*FS)(nil)
