package testnode

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"

	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/replica"
)

// Error codes of the HTTP API (ErrorResponse.Error).
const (
	CodeNotPrimary     = "not_primary"      // nothing sent; primary_id/primary_addr name the primary if known
	CodeOutcomeUnknown = "outcome_unknown"  // may or may not be committed (index set if known committed)
	CodeNoResponse     = "no_response"      // committed at index; response unavailable
	CodeFenced         = "fenced"           // not committed; the node was deposed
	CodeQueueFull      = "queue_full"       // nothing sent
	CodeClosed         = "closed"           // the replica is closing
	CodeFailed         = "failed"           // the replica stopped on an unrecoverable error
	CodeTooLarge       = "entry_too_large"  // nothing sent
	CodeRoomFull       = "room_full"        // nothing sent (backpressure)
	CodeTransfer       = "transfer_failed"  // TransferLeadership failed
	CodeCanceled       = "canceled"         // the request's timeout ended before anything was sent
	CodeTimeout        = "timeout"          // a wait (hash, barrier, stepdown…) timed out
	CodeStarting       = "starting"         // the replica is not open yet
	CodeBadRequest     = "bad_request"      // malformed request
	CodeBadRequestID   = "bad_request_id"   // malformed Roomlog-Request-Id header; nothing sent
	CodeConflict       = "request_conflict" // the request id was used with another entry; nothing sent
	CodeInternal       = "internal"         // anything else (message says what)
)

// Errors of the client that are not a code from the node.
var (
	// ErrUnreachable: the request could not be completed over HTTP (the node
	// is down, paused or was killed mid-request). For Propose, errors.Is(err,
	// ErrNotSent) tells whether the request surely never reached the node.
	ErrUnreachable = errors.New("testnode: node unreachable")
	// ErrNotSent marks an ErrUnreachable whose request never reached the
	// node (the connection was refused).
	ErrNotSent = errors.New("testnode: request not sent")
	// ErrCanceled: the node's Propose timed out before sending the entry.
	ErrCanceled = errors.New("testnode: canceled before sending")
	// ErrTimeout: a wait on the node timed out.
	ErrTimeout = errors.New("testnode: timed out")
	// ErrStarting: the node's replica is not open yet.
	ErrStarting = errors.New("testnode: replica starting")
	// ErrBadRequest: the node refused the request as malformed.
	ErrBadRequest = errors.New("testnode: bad request")
	// ErrInternal: any other error the node reported.
	ErrInternal = errors.New("testnode: internal error")
)

// codeSentinels maps codes to the sentinel errors.Is matches: replica's own
// sentinels where they exist, so errors.Is(err, replica.ErrNotPrimary) holds
// across the process boundary.
var codeSentinels = map[string]error{
	CodeNotPrimary:     replica.ErrNotPrimary,
	CodeOutcomeUnknown: replica.ErrOutcomeUnknown,
	CodeNoResponse:     replica.ErrNoResponse,
	CodeFenced:         replica.ErrFenced,
	CodeQueueFull:      replica.ErrQueueFull,
	CodeClosed:         replica.ErrClosed,
	CodeFailed:         replica.ErrFailed,
	CodeTooLarge:       logroom.ErrEntryTooLarge,
	CodeRoomFull:       logroom.ErrRoomFull,
	CodeTransfer:       replica.ErrTransfer,
	CodeCanceled:       ErrCanceled,
	CodeTimeout:        ErrTimeout,
	CodeStarting:       ErrStarting,
	CodeBadRequest:     ErrBadRequest,
	CodeBadRequestID:   ErrBadRequest,
	CodeConflict:       replica.ErrRequestConflict,
	CodeInternal:       ErrInternal,
}

// ErrorResponse is the JSON body of every non-2xx answer (and of a
// no_response answer to /propose).
type ErrorResponse struct {
	Error       string `json:"error"`
	Message     string `json:"message,omitempty"`
	PrimaryID   string `json:"primary_id,omitempty"`
	PrimaryAddr string `json:"primary_addr,omitempty"`
	Index       uint64 `json:"index,omitempty"`
	// Duplicate: a no_response answer to a request (Roomlog-Request-Id)
	// whose id was already applied: Index is the original's index.
	Duplicate bool `json:"duplicate,omitempty"`
}

// APIError is an error the node answered with. errors.Is matches the
// sentinel of its Code (see the Code constants).
type APIError struct {
	ErrorResponse
	Node   string // node name (client side)
	Status int    // HTTP status
}

func (e *APIError) Error() string {
	s := fmt.Sprintf("testnode %s: %s", e.Node, e.ErrorResponse.Error)
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.PrimaryID != "" || e.PrimaryAddr != "" {
		s += fmt.Sprintf(" (primary %q at %q)", e.PrimaryID, e.PrimaryAddr)
	}
	if e.Index != 0 {
		s += fmt.Sprintf(" (index %d)", e.Index)
	}
	return s
}

// Is matches the sentinel of e's code.
func (e *APIError) Is(target error) bool {
	s, ok := codeSentinels[e.ErrorResponse.Error]
	return ok && s == target
}

// RequestIDHeader carries a proposal's request id on POST /propose: 32
// lowercase hex characters (a replica.RequestID, not zero). With it the node
// calls replica.ProposeRequest, so resending the same entry with the same id
// applies it at most once.
const RequestIDHeader = "Roomlog-Request-Id"

// ProposeResponse is the JSON answer of a successful POST /propose.
type ProposeResponse struct {
	Index    uint64 `json:"index"`
	Response []byte `json:"response"` // base64 in JSON
	// Duplicate: the request id (RequestIDHeader) had already been applied;
	// Index and Response are the original application's, nothing new was
	// applied. Always false for a proposal without an id.
	Duplicate bool `json:"duplicate"`
}

// ParseRequestID parses the value of RequestIDHeader: exactly 32 lowercase
// hex characters, not all zero.
func ParseRequestID(s string) (replica.RequestID, error) {
	var id replica.RequestID
	if len(s) != 2*len(id) {
		return id, fmt.Errorf("request id %.80q: want %d lowercase hex characters, got %d", s, 2*len(id), len(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return id, fmt.Errorf("request id %.80q: byte %d (%q) is not a lowercase hex digit", s, i, c)
		}
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return id, fmt.Errorf("request id %.80q: %w", s, err)
	}
	if id.IsZero() {
		return id, fmt.Errorf("request id %q: the zero id means none", s)
	}
	return id, nil
}

// HashResponse is the answer of GET /hash.
type HashResponse struct {
	Hash  string `json:"hash"`
	Index uint64 `json:"index"`
}

// RunHashResponse is the answer of GET /runhash?index=N: the node's
// running state hash (store.RunHash) at index N, when its store still
// keeps it (Found; replica.Replica.RunHashAt): Sum is the full SHA-256
// in hex, Base the index its chain started at (only chains of one Base
// compare). Applied is the node's applied index when it answered.
type RunHashResponse struct {
	Index   uint64 `json:"index"`
	Found   bool   `json:"found"`
	Base    uint64 `json:"base"`
	Sum     string `json:"sum,omitempty"`
	Applied uint64 `json:"applied"`
}

// BarrierResponse is the answer of POST /barrier.
type BarrierResponse struct {
	Index uint64 `json:"index"`
}

// GetResponse is the answer of GET /get: the value of Key in one
// consistent view of the node's store (Found false: no such key), taken at
// applied index Index. With barrier=1, Barrier is the read point
// replica.Barrier returned before the read (Index >= Barrier): the read is
// linearizable on any member. Without it (Barrier 0) the read is a plain
// local read, which may be stale on any member, a deposed primary that
// still believes it leads included. Role and Epoch are the node's own view
// just before the read (informational: a primary's belief proves nothing).
type GetResponse struct {
	Key     string `json:"key"`
	Found   bool   `json:"found"`
	Value   []byte `json:"value,omitempty"` // base64 in JSON
	Index   uint64 `json:"index"`
	Barrier uint64 `json:"barrier,omitempty"`
	Role    string `json:"role"`
	Epoch   uint64 `json:"epoch"`
}

// DumpResponse is the answer of GET /dump: the records of the indexes in
// [from, to] this node's state holds, in index order. Applied is the node's
// applied index when the records were read (a consistent view). More is
// true when the limit cut the answer short (ask again from the last
// index + 1).
type DumpResponse struct {
	Applied uint64   `json:"applied"`
	Records []Record `json:"records"`
	More    bool     `json:"more"`
}

// MemberJSON is one member in StatusJSON.
type MemberJSON struct {
	ID         string `json:"id"`
	Addr       string `json:"addr"`
	Role       string `json:"role"`
	Observer   bool   `json:"observer,omitempty"`
	Epoch      uint64 `json:"epoch"`
	Applied    uint64 `json:"applied"`
	Checkpoint uint64 `json:"checkpoint"`
}

// StatusJSON is replica.Status as JSON (GET /status), plus the node's pid.
type StatusJSON struct {
	ID              string       `json:"id"`
	Room            string       `json:"room"`
	Role            string       `json:"role"`     // replica.Role.String(): "standby", "takeover", "primary", "failed", "closed"
	Observer        bool         `json:"observer"` // replica.Config.Observer: the node never leads
	Epoch           uint64       `json:"epoch"`
	Applied         uint64       `json:"applied"`
	Committed       uint64       `json:"committed"`
	Lag             uint64       `json:"lag"`
	PrimaryID       string       `json:"primary_id"`
	PrimaryAddr     string       `json:"primary_addr"`
	Members         []MemberJSON `json:"members"`
	Connected       bool         `json:"connected"`
	ConnState       string       `json:"conn_state"`
	SessionID       int64        `json:"session_id"`
	SuspendedMS     int64        `json:"suspended_ms"`
	OpenChannel     uint64       `json:"open_channel"`
	Channels        int          `json:"channels"`
	RoomBytes       int64        `json:"room_bytes"`
	CheckpointIndex uint64       `json:"checkpoint_index"`
	Bootstraps      int          `json:"bootstraps"`
	Pending         int          `json:"pending"`
	Err             string       `json:"err,omitempty"`
	PID             int          `json:"pid"`
	// Depositions and DepositionsWrong: replica.Status's (crash
	// detection faster than the session).
	Depositions      uint64 `json:"depositions"`
	DepositionsWrong uint64 `json:"depositions_wrong"`
}

// Role names as StatusJSON.Role reports them (replica.Role.String()).
const (
	RolePrimary  = "primary"
	RoleStandby  = "standby"
	RoleTakeover = "takeover"
	RoleFailed   = "failed"
)

func statusJSON(s replica.Status, pid int) StatusJSON {
	out := StatusJSON{
		ID: s.ID, Room: s.Room, Role: s.Role.String(), Observer: s.Observer, Epoch: s.Epoch,
		Applied: s.Applied, Committed: s.Committed, Lag: s.Lag,
		PrimaryID: s.PrimaryID, PrimaryAddr: s.PrimaryAddr,
		Members:     make([]MemberJSON, 0, len(s.Members)),
		Depositions: s.Depositions, DepositionsWrong: s.DepositionsWrong,
		Connected: s.Connected, ConnState: s.ConnState, SessionID: s.SessionID,
		SuspendedMS: s.Suspended.Milliseconds(), OpenChannel: s.OpenChannel,
		Channels: s.Channels, RoomBytes: s.RoomBytes, CheckpointIndex: s.CheckpointIndex,
		Bootstraps: s.Bootstraps, Pending: s.Pending, PID: pid,
	}
	for _, m := range s.Members {
		out.Members = append(out.Members, MemberJSON{
			ID: m.ID, Addr: m.Addr, Role: m.Role.String(), Observer: m.Observer, Epoch: m.Epoch,
			Applied: m.Applied, Checkpoint: m.Checkpoint,
		})
	}
	if s.Err != nil {
		out.Err = s.Err.Error()
	}
	return out
}

// errorResponse maps an error of the replica to an HTTP status and body.
// index is the proposal's index when it is known to be committed (0: none).
func errorResponse(err error, index uint64) (int, ErrorResponse) {
	body := ErrorResponse{Message: err.Error(), Index: index}
	var np *replica.NotPrimaryError
	switch {
	case errors.As(err, &np):
		body.Error, body.PrimaryID, body.PrimaryAddr = CodeNotPrimary, np.PrimaryID, np.PrimaryAddr
		return http.StatusConflict, body
	case errors.Is(err, replica.ErrNotPrimary):
		body.Error = CodeNotPrimary
		return http.StatusConflict, body
	case errors.Is(err, replica.ErrRequestConflict):
		body.Error = CodeConflict
		return http.StatusConflict, body
	case errors.Is(err, replica.ErrNoResponse):
		body.Error = CodeNoResponse
		return http.StatusAccepted, body
	case errors.Is(err, replica.ErrOutcomeUnknown):
		body.Error = CodeOutcomeUnknown
		return http.StatusGatewayTimeout, body
	case errors.Is(err, replica.ErrFenced):
		body.Error = CodeFenced
		return http.StatusConflict, body
	case errors.Is(err, replica.ErrUnavailable):
		return http.StatusServiceUnavailable, body
	case errors.Is(err, replica.ErrQueueFull):
		body.Error = CodeQueueFull
		return http.StatusTooManyRequests, body
	case errors.Is(err, logroom.ErrEntryTooLarge):
		body.Error = CodeTooLarge
		return http.StatusRequestEntityTooLarge, body
	case errors.Is(err, logroom.ErrRoomFull):
		body.Error = CodeRoomFull
		return http.StatusInsufficientStorage, body
	case errors.Is(err, replica.ErrTransfer):
		body.Error = CodeTransfer
		return http.StatusConflict, body
	case errors.Is(err, replica.ErrFailed):
		body.Error = CodeFailed
		return http.StatusServiceUnavailable, body
	case errors.Is(err, replica.ErrClosed):
		body.Error = CodeClosed
		return http.StatusServiceUnavailable, body
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		body.Error = CodeTimeout
		return http.StatusGatewayTimeout, body
	default:
		body.Error = CodeInternal
		return http.StatusInternalServerError, body
	}
}
