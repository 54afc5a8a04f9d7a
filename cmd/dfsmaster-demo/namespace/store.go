package namespace

import (
	"errors"

	"github.com/roomlog/roomlog/store"
)

// Applier is the namespace as a store.Applier. It holds no state: everything
// lives in the store.
type Applier struct{}

var (
	_ store.Applier = Applier{}
	_ Batch         = store.Batch(nil)
	_ Reader        = (*store.View)(nil)
	_ Reader        = (*store.Store)(nil)
)

// Apply implements store.Applier: see ApplyEntry.
func (Applier) Apply(b store.Batch, e store.Entry) ([]byte, error) {
	return ApplyEntry(b, e.Data)
}

// IsNotFound reports whether err is the store's not-found error.
func IsNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }
