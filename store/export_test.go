package store

// appliedBatch returns the Batch of the last applied entry (zero for an
// empty store, or a store whose last Apply carried none).
func (s *Store) appliedBatch() BatchRef {
	_, _, b := s.AppliedPosition()
	return b
}
