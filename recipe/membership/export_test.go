package membership

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
