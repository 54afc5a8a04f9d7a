package zkx

import (
	"log/slog"
	"sort"
	"sync"
)

// Foreign is a znode that breaks its directory's acceptance rules (a
// replica's members/ or election/, a recipe's directory), and why.
type Foreign struct {
	Path   string
	Reason string
}

// ForeignSet records the foreign znodes of one directory. Each is logged
// once (Warn) when first reported with a given reason. Safe for concurrent
// use: mu guards byPath.
type ForeignSet struct {
	log  *slog.Logger
	what string

	mu     sync.Mutex
	byPath map[string]string // path -> reason
}

// NewForeignSet returns an empty set; what names the kind of znode in log
// lines ("member", "election candidate", "lock contender").
func NewForeignSet(log *slog.Logger, what string) *ForeignSet {
	return &ForeignSet{log: log, what: what, byPath: map[string]string{}}
}

// Report records path as foreign.
func (f *ForeignSet) Report(path, reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reportLocked(path, reason)
}

func (f *ForeignSet) reportLocked(path, reason string) {
	if f.byPath[path] == reason {
		return
	}
	f.byPath[path] = reason
	f.log.Warn("foreign "+f.what+" znode ignored", "path", path, "reason", reason)
}

// Drop forgets path (it is gone or now acceptable).
func (f *ForeignSet) Drop(path string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.byPath, path)
}

// Replace makes the set exactly m (path -> reason), logging new entries.
func (f *ForeignSet) Replace(m map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for p := range f.byPath {
		if _, ok := m[p]; !ok {
			delete(f.byPath, p)
		}
	}
	for p, r := range m {
		f.reportLocked(p, r)
	}
}

// List returns the set sorted by path.
func (f *ForeignSet) List() []Foreign {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Foreign, 0, len(f.byPath))
	for p, r := range f.byPath {
		out = append(out, Foreign{Path: p, Reason: r})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}
