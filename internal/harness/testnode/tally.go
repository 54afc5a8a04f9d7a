package testnode

// Tally is the account of proposals that every history check keeps alike:
// proposals by final outcome, what their request ids went through, and the
// two rules that need nothing but a proposal, the positions of its payload
// and a RequestIndex: exactly once (AckedIDsNotOnce) and nothing applied
// that was surely not committed (Phantom). CheckDumpsLog and the chaos
// checker add every proposal to one; each checks the rest (where the
// payload of an acknowledged proposal must be found, payloads at two
// indexes) by its own rules.
type Tally struct {
	// Acked: acknowledged with an index; Committed: committed at a known
	// index without a response. A proposal counts in one of the two.
	Acked, Committed int
	// Unknown: outcome unknown; UnknownApplied of them are in the log.
	Unknown, UnknownApplied int
	// NotCommitted: surely not committed.
	NotCommitted int

	// Retried: proposals sent more than once; DedupAcks: final answers
	// that were Duplicate (the id had been applied by an earlier attempt);
	// MetUnknown: proposals with at least one attempt of unknown outcome;
	// ResolvedByRetry: those of them a later attempt acknowledged or
	// showed committed. Counts, not violations.
	Retried, DedupAcks, MetUnknown, ResolvedByRetry int

	// AckedIDsNotOnce (a violation): acknowledged or committed proposals
	// whose request id is not applied exactly once, at the index the
	// answer reported (RequestIndex.AckedAt).
	AckedIDsNotOnce int
	// Phantom (a violation): proposals surely not committed, yet in the log.
	Phantom int
}

// Verdict is what Tally.Add found for one proposal.
type Verdict struct {
	// Committed: the proposal was acknowledged or is known committed; its
	// payload must be found at Index (the index answered, or for an answer
	// naming a deduplicated copy the request's application).
	Committed bool
	Index     uint64
	// NotOnce: the exactly-once rule fails for its request id, as Why says.
	NotOnce bool
	Why     string
	// Phantom: surely not committed, yet its payload is in the log.
	Phantom bool
}

// Add counts p; at are the indexes its payload is held at, ri knows where
// request ids are applied.
func (t *Tally) Add(p Proposal, at []uint64, ri *RequestIndex) Verdict {
	if p.Attempts > 1 {
		t.Retried++
	}
	if p.Unknowns > 0 {
		t.MetUnknown++
	}
	var v Verdict
	switch p.Outcome {
	case OutcomeAcked, OutcomeCommitted:
		if p.Outcome == OutcomeAcked {
			t.Acked++
		} else {
			t.Committed++
		}
		if p.Duplicate {
			t.DedupAcks++
		}
		if p.Unknowns > 0 {
			t.ResolvedByRetry++
		}
		v.Committed, v.Index = true, p.Index
		if p.RequestID != "" {
			var ok bool
			if v.Index, ok, v.Why = ri.AckedAt(p); !ok {
				v.NotOnce = true
				t.AckedIDsNotOnce++
			}
		}
	case OutcomeUnknown:
		t.Unknown++
		if len(at) > 0 {
			t.UnknownApplied++
		}
	default:
		t.NotCommitted++
		if len(at) > 0 {
			v.Phantom = true
			t.Phantom++
		}
	}
	return v
}
