package testnode

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/replica"
	"github.com/roomlog/roomlog/store"
)

// Outcome is what a client knows about one proposal.
type Outcome int

const (
	// OutcomeNotCommitted: surely not committed (not_primary, queue_full,
	// fenced, canceled before sending, connection refused, …). Safe to retry.
	OutcomeNotCommitted Outcome = iota
	// OutcomeAcked: committed at Index and applied on the answering node.
	OutcomeAcked
	// OutcomeCommitted: committed at Index, response unavailable
	// (no_response, or outcome_unknown carrying an index).
	OutcomeCommitted
	// OutcomeUnknown: may or may not be committed. Never resent without a
	// request id; a proposal with one (Proposal.RequestID) may be resent
	// with the same id, which the replicas apply at most once. Either way
	// the checker requires it applied once or not at all.
	OutcomeUnknown
)

func (o Outcome) String() string {
	switch o {
	case OutcomeNotCommitted:
		return "not_committed"
	case OutcomeAcked:
		return "acked"
	case OutcomeCommitted:
		return "committed"
	case OutcomeUnknown:
		return "unknown"
	default:
		return fmt.Sprintf("Outcome(%d)", int(o))
	}
}

// Classify maps the result of Client.Propose or Client.ProposeRequest to an
// Outcome (an answer with Duplicate set is acknowledged: the request was
// applied, at the index answered). request_conflict is not committed: that
// attempt's entry was not applied.
func Classify(res ProposeResponse, err error) Outcome {
	switch {
	case err == nil:
		return OutcomeAcked
	case errors.Is(err, replica.ErrNoResponse):
		return OutcomeCommitted
	case errors.Is(err, replica.ErrOutcomeUnknown):
		if res.Index != 0 {
			return OutcomeCommitted
		}
		return OutcomeUnknown
	case errors.Is(err, ErrUnreachable):
		if errors.Is(err, ErrNotSent) {
			return OutcomeNotCommitted
		}
		return OutcomeUnknown
	case errors.Is(err, replica.ErrNotPrimary), errors.Is(err, replica.ErrQueueFull),
		errors.Is(err, replica.ErrFenced), errors.Is(err, ErrCanceled),
		errors.Is(err, ErrStarting), errors.Is(err, logroom.ErrEntryTooLarge),
		errors.Is(err, logroom.ErrRoomFull), errors.Is(err, ErrBadRequest),
		errors.Is(err, replica.ErrRequestConflict):
		return OutcomeNotCommitted
	default: // closed, failed, internal, timeout, …: assume the worst
		return OutcomeUnknown
	}
}

// Proposal is one logical proposal (a unique payload) and its final outcome
// after every attempt.
type Proposal struct {
	Key     string
	SHA256  string // EntrySHA of the payload
	Outcome Outcome
	// Index: Acked / Committed. For an ack with Duplicate set it is the
	// index where the request was first applied. For Committed (no
	// response) it may also be the index of a later copy of the request
	// that the replicas deduplicated.
	Index uint64
	Node  string // node of the last attempt
	// RequestID is the request id every attempt carried (lowercase hex);
	// "" when the proposal was sent with plain Propose.
	RequestID string
	// Duplicate: the final answer said the request id had already been
	// applied (a resend after an unknown outcome whose first copy had
	// landed).
	Duplicate bool
	Attempts  int
	// Unknowns counts the attempts whose outcome was unknown.
	Unknowns int
	Err      string // last error
	Start    time.Time
	End      time.Time // when the last answer arrived
}

// History records proposals and their outcomes; safe for concurrent use.
type History struct {
	mu    sync.Mutex // guards props
	props []Proposal
}

// Add records a finished proposal.
func (h *History) Add(p Proposal) {
	h.mu.Lock()
	h.props = append(h.props, p)
	h.mu.Unlock()
}

// Proposals returns a copy of every recorded proposal.
func (h *History) Proposals() []Proposal {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.props)
}

// Count returns how many proposals ended with each outcome.
func (h *History) Count() map[Outcome]int {
	out := map[Outcome]int{}
	for _, p := range h.Proposals() {
		out[p.Outcome]++
	}
	return out
}

// Acked returns the number of acknowledged proposals.
func (h *History) Acked() int { return h.Count()[OutcomeAcked] }

// FirstAckAfter returns the earliest-answered acknowledged proposal whose
// answer arrived after t from a node other than exclude.
func (h *History) FirstAckAfter(t time.Time, exclude string) (Proposal, bool) {
	var best Proposal
	found := false
	for _, p := range h.Proposals() {
		if p.Outcome == OutcomeAcked && p.End.After(t) && p.Node != exclude && (!found || p.End.Before(best.End)) {
			best, found = p, true
		}
	}
	return best, found
}

// MaxAckedIndex returns the highest acknowledged or committed index.
func (h *History) MaxAckedIndex() uint64 {
	var m uint64
	for _, p := range h.Proposals() {
		if p.Outcome == OutcomeAcked || p.Outcome == OutcomeCommitted {
			m = max(m, p.Index)
		}
	}
	return m
}

// SetEntry returns an OpsApplier entry setting key to value.
func SetEntry(key string, value []byte) ([]byte, error) {
	b, err := store.EncodeOps([]store.Op{{Kind: store.OpSet, Key: []byte(key), Value: value}})
	if err != nil {
		return nil, fmt.Errorf("testnode: encode set %q: %w", key, err)
	}
	return b, nil
}
