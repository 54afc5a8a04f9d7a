package store

// Reader is the read side of a Store, for a holder that must not write:
// it has no Apply, Checkpoint, Sync or Close. *Store satisfies it;
// replica.Replica.Store returns one that follows the replica's store across
// bootstraps. Every method is safe for concurrent use and returns ErrClosed
// once the store it reads is closed. To scan, open a View (View.Scan,
// View.ScanPrefix): it is one consistent picture.
type Reader interface {
	// Get returns a copy of key's value, or ErrNotFound (Store.Get).
	Get(key []byte) ([]byte, error)
	// View returns a consistent read view of the current state; close it
	// when done (Store.View).
	View() (*View, error)
	// StateHash returns the hash of the user state and the applied index
	// it reflects (Store.StateHash; doc.go defines the hash).
	StateHash() (hash string, index uint64, err error)
	// AppliedIndex returns the index of the last applied entry (0: none).
	AppliedIndex() uint64
	// LookupRequest returns the request table's record of id (ok false:
	// not in the table) (Store.LookupRequest).
	LookupRequest(id RequestID) (rec RequestRecord, ok bool, err error)
	// RequestTableLen counts the records in the request table (a scan:
	// for tests and tools, not hot paths).
	RequestTableLen() (int, error)
}

var _ Reader = (*Store)(nil)
