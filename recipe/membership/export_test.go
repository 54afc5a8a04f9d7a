package membership

import "github.com/roomlog/roomlog/third_party/zk"

// SetBeforeRead makes w's listings call f (nil: nothing) before reading
// each child, on the watcher's loop goroutine: a test pauses a refresh
// there.
func SetBeforeRead(w *Watcher, f func(id string)) {
	if f == nil {
		w.beforeRead.Store(nil)
		return
	}
	w.beforeRead.Store(&f)
}

// SetKeeperEventHook makes r's keeper call f (nil: nothing) after it
// handled each session event, on the keeper's goroutine.
func SetKeeperEventHook(r *Registration, f func(zk.Event)) {
	if f == nil {
		r.afterEvent.Store(nil)
		return
	}
	r.afterEvent.Store(&f)
}
