package election

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/roomlog/roomlog/recipe/internal/zkr"
	"github.com/roomlog/roomlog/zkx"
)

// Sentinel errors, wrapped by the errors this package returns (check with
// errors.Is). ZooKeeper errors stay visible in the chain.
var (
	// ErrBadConfig: a Config field (or an Observe argument) is invalid.
	// Nothing was sent.
	ErrBadConfig = errors.New("election: bad config")
	// ErrNotLeader: StepDown or Designate by a candidate that does not
	// lead right now (no active term).
	ErrNotLeader = errors.New("election: not the leader")
	// ErrLeadershipLost: the term ended other than by StepDown, Designate
	// or Resign — its node was deleted or written by someone else, its
	// session expired, or the client stayed disconnected longer than
	// SuspendGrace. A guarded write that gets it applied nothing.
	ErrLeadershipLost = errors.New("election: leadership lost")
	// ErrSteppedDown: the term ended by StepDown, Designate or Resign.
	ErrSteppedDown = errors.New("election: stepped down")
	// ErrNoCandidate: Designate names no live candidate.
	ErrNoCandidate = errors.New("election: no such candidate")
	// ErrResigned: the candidate resigned (Resign); it takes no further
	// part.
	ErrResigned = errors.New("election: resigned")
)

// Defaults.
const (
	DefaultDesignationTTL = 30 * time.Second
	// MaxDataBytes bounds Config.Data (candidate data is read by every
	// observer on every change).
	MaxDataBytes = 64 << 10
)

// Config configures a candidate.
type Config struct {
	// Client is the ZooKeeper client (required). The candidate shares its
	// session and creates nodes with its ACL.
	Client *zkx.Client
	// Dir is the election's directory (required); missing components are
	// created (persistent).
	Dir string
	// ID names the participant (required, a valid znode name): observers
	// report it and Designate takes it. Participants should use distinct
	// IDs; Designate picks the lowest candidate of an ID.
	ID string
	// Data is published with the candidacy (e.g. an address), at most
	// MaxDataBytes.
	Data []byte
	// GUID identifies this candidate's nodes (32 lowercase hex; default
	// random). Two candidates must never share one: a node carrying it in
	// the candidate's session is taken as its own.
	GUID string
	// SuspendGrace is how long a term survives a disconnection (default 0:
	// it ends at the first disconnection; a disconnected leader cannot
	// know it still leads). It must be below a third of the client's
	// session timeout (Validate refuses it otherwise; see the package
	// doc).
	SuspendGrace time.Duration
	// DesignationTTL bounds how long a candidate honours a designation
	// record naming another candidate, from when it first saw the record
	// (its own monotonic clock; no clock is compared across machines).
	// Default DefaultDesignationTTL.
	DesignationTTL time.Duration
	// Logger receives the candidate's logs (nil: discard).
	Logger *slog.Logger
}

// Validate reports every invalid field at once.
func (c Config) Validate() error {
	errs := validateCandidacy(c.Client, c.Dir, c.ID, c.Data, c.GUID)
	if c.SuspendGrace < 0 {
		errs = append(errs, fmt.Errorf("%w: SuspendGrace %v < 0", ErrBadConfig, c.SuspendGrace))
	}
	if err := zkr.CheckGrace(c.Client, c.SuspendGrace); err != nil {
		errs = append(errs, fmt.Errorf("%w: %v", ErrBadConfig, err))
	}
	if c.DesignationTTL < 0 {
		errs = append(errs, fmt.Errorf("%w: DesignationTTL %v < 0", ErrBadConfig, c.DesignationTTL))
	}
	return errors.Join(errs...)
}
