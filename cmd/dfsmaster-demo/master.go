package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/api"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/replica"
	"github.com/roomlog/roomlog/store"
	"github.com/roomlog/roomlog/version"
)

// channelRefresh is how often replicaMaster re-reads the room's channel
// list for Status (the only part of Status that needs ZooKeeper).
const channelRefresh = time.Second

// replicaMaster adapts a *replica.Replica to api.Master: it translates the
// replica's errors into the API's and its Status into api.Status.
//
// Status must never block on ZooKeeper, but the channel list lives there, so
// a refresher goroutine (owned by replicaMaster, stopped by Close) reads it
// every channelRefresh and Status reports the last list it got.
type replicaMaster struct {
	r    *replica.Replica
	addr string // advertised HTTP address
	log  *slog.Logger

	mu       sync.Mutex              // guards channels and roles
	channels []api.Channel           // last channel list read from the room (nil: none yet)
	roles    []api.RoleChange        // last role changes, oldest first, at most api.MaxRoleChanges
	roleOut  chan replica.RoleChange // role changes passed on (RoleChanges); drops the oldest when full

	stop      chan struct{}  // closed by Close
	wg        sync.WaitGroup // the refresher and the role watcher
	closeOnce sync.Once
}

var _ api.Master = (*replicaMaster)(nil)

func newReplicaMaster(r *replica.Replica, addr string, log *slog.Logger) *replicaMaster {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &replicaMaster{r: r, addr: addr, log: log, stop: make(chan struct{}),
		roleOut: make(chan replica.RoleChange, roleOutBuffer)}
	m.wg.Add(2)
	go m.refreshChannels()
	go m.watchRoles()
	return m
}

// roleOutBuffer is RoleChanges' buffer (the replica's is 16 too).
const roleOutBuffer = 16

// Close stops the channel refresher and the role watcher and waits for
// them. It does not close the replica. Idempotent.
func (m *replicaMaster) Close() {
	m.closeOnce.Do(func() { close(m.stop) })
	m.wg.Wait()
}

// RoleChanges passes on the replica's role changes: replica.RoleChanges
// has one reader, the adapter's role watcher, which records the last
// api.MaxRoleChanges for Status and forwards every change here. Like the
// replica's channel it is buffered and drops the oldest change when nobody
// reads it in time (Status is the truth); serve's loop reads it.
func (m *replicaMaster) RoleChanges() <-chan replica.RoleChange { return m.roleOut }

// watchRoles drains the replica's RoleChanges until Close: nobody else
// may read it (each change would reach only one reader).
func (m *replicaMaster) watchRoles() {
	defer m.wg.Done()
	in := m.r.RoleChanges()
	for {
		select {
		case <-m.stop:
			return
		case rc := <-in:
			m.recordRole(rc)
			for sent := false; !sent; {
				select {
				case m.roleOut <- rc:
					sent = true
				default:
					select {
					case <-m.roleOut: // drop the oldest
					default:
					}
				}
			}
		}
	}
}

func (m *replicaMaster) recordRole(rc replica.RoleChange) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.roles = append(m.roles, api.RoleChange{At: rc.At, Role: roleName(rc.Role), Epoch: rc.Epoch, Reason: rc.Reason})
	if n := len(m.roles); n > api.MaxRoleChanges {
		m.roles = append(m.roles[:0:0], m.roles[n-api.MaxRoleChanges:]...)
	}
}

func (m *replicaMaster) refreshChannels() {
	defer m.wg.Done()
	t := time.NewTicker(channelRefresh)
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), channelRefresh)
		infos, err := m.r.Room().Channels(ctx)
		cancel()
		if err != nil {
			m.log.Debug("read channel list", "err", err)
		} else {
			chans := make([]api.Channel, len(infos))
			for i, c := range infos {
				chans[i] = api.Channel{Num: c.Num, FirstIndex: c.FirstIndex, LastIndex: c.LastIndex,
					Epoch: c.Epoch, Sealed: c.Sealed, Bytes: c.Bytes, Batches: c.Batches}
			}
			m.mu.Lock()
			m.channels = chans
			m.mu.Unlock()
		}
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
	}
}

// Propose implements api.Master.
func (m *replicaMaster) Propose(ctx context.Context, entry []byte) (api.Result, error) {
	res, err := m.r.Propose(ctx, entry)
	if err != nil {
		return api.Result{}, translateProposeError(err)
	}
	return api.Result{Index: res.Index, Response: res.Response}, nil
}

// ProposeRequest implements api.Master with replica.ProposeRequest: the
// replica deduplicates on its replicated request table, so a retry is
// applied at most once across failovers, restarts and bootstraps, within
// replica.Config.RequestTTL and RequestWindow.
func (m *replicaMaster) ProposeRequest(ctx context.Context, id replica.RequestID, entry []byte) (api.Result, error) {
	res, err := m.r.ProposeRequest(ctx, id, entry)
	if err != nil {
		return api.Result{}, translateProposeError(err)
	}
	return api.Result{Index: res.Index, Response: res.Response, Duplicate: res.Duplicate}, nil
}

// translateProposeError maps the replica's Propose and ProposeRequest
// errors onto the API's sentinels (keeping the original in the chain for
// the message):
//
//	ErrRequestConflict                  -> api.ErrRequestConflict (422 idempotency_key_reused)
//	*replica.NotPrimaryError            -> *api.NotPrimaryError (the primary's advertised address)
//	ErrOutcomeUnknown, ErrNoResponse    -> api.ErrOutcomeUnknown (ErrNoResponse: committed, but
//	                                       whether the namespace accepted it is not known here)
//	ErrQueueFull, logroom.ErrRoomFull   -> api.ErrOverloaded (nothing sent)
//	ErrFailed                           -> api.ErrFailed (the replica failed; the cause stays in the chain)
//	ErrClosed, ErrFenced                -> api.ErrUnavailable (nothing committed by this call)
//	context errors                      -> unchanged (the API maps them to timeout/outcome unknown)
//
// The order matters: an in-flight proposal whose context ended is
// ErrOutcomeUnknown (wrapping the context error) and must stay "unknown".
func translateProposeError(err error) error {
	var np *replica.NotPrimaryError
	switch {
	case errors.Is(err, replica.ErrRequestConflict):
		return fmt.Errorf("%w: %w", api.ErrRequestConflict, err)
	case errors.As(err, &np):
		return &api.NotPrimaryError{PrimaryID: np.PrimaryID, PrimaryAddr: np.PrimaryAddr}
	case errors.Is(err, replica.ErrOutcomeUnknown), errors.Is(err, replica.ErrNoResponse):
		return fmt.Errorf("%w: %w", api.ErrOutcomeUnknown, err)
	case errors.Is(err, replica.ErrQueueFull), errors.Is(err, logroom.ErrRoomFull):
		return fmt.Errorf("%w: %w", api.ErrOverloaded, err)
	case errors.Is(err, replica.ErrFailed):
		return fmt.Errorf("%w: %w", api.ErrFailed, err)
	case errors.Is(err, replica.ErrClosed), errors.Is(err, replica.ErrFenced):
		return fmt.Errorf("%w: %w", api.ErrUnavailable, err)
	}
	return err
}

// WaitApplied implements api.Master (a failed replica's error wraps
// api.ErrFailed).
func (m *replicaMaster) WaitApplied(ctx context.Context, index uint64) error {
	err := m.r.WaitApplied(ctx, index)
	switch {
	case errors.Is(err, replica.ErrFailed):
		return fmt.Errorf("%w: %w", api.ErrFailed, err)
	case errors.Is(err, replica.ErrUnavailable):
		return fmt.Errorf("%w: %w", api.ErrDisconnected, err)
	}
	return err
}

// Store implements api.Master: the replica's read side, which follows its
// store across bootstraps from a checkpoint.
func (m *replicaMaster) Store() store.Reader { return m.r.Store() }

// Status implements api.Master; it never touches ZooKeeper.
func (m *replicaMaster) Status() api.Status {
	out := statusFromReplica(m.r.Status(), m.addr, version.Info())
	m.mu.Lock()
	out.Channels = append([]api.Channel(nil), m.channels...)
	m.mu.Unlock()
	out.RoleChanges = m.roleHistory()
	return out
}

// statusFromReplica is the API's status of a master advertised at addr,
// from its replica's status and its binary's build; Channels and
// RoleChanges are the adapter's and left empty.
func statusFromReplica(s replica.Status, addr string, b version.Build) api.Status {
	out := api.Status{
		ID:              s.ID,
		Room:            s.Room,
		Role:            roleName(s.Role),
		Observer:        s.Observer,
		Addr:            addr,
		Epoch:           s.Epoch,
		AppliedIndex:    s.Applied,
		CommittedIndex:  s.Committed,
		Lag:             s.Lag,
		PrimaryID:       s.PrimaryID,
		PrimaryAddr:     s.PrimaryAddr,
		Connected:       s.Connected,
		DisconnectedMS:  s.Suspended.Milliseconds(),
		RoomBytes:       s.RoomBytes,
		CheckpointIndex: s.CheckpointIndex,
		Bootstraps:      s.Bootstraps,
		Hash:            s.Hash,
		HashIndex:       s.HashIndex,
		HashCompared:    s.HashCompared,
		HashMismatches:  s.HashMismatches,
		HashReport:      s.HashReport,

		Version:            b.Release,
		Commit:             buildCommit(b),
		RoomVersion:        s.RoomVersion,
		RoomVersionSince:   s.RoomVersionSince,
		RoomVersionTarget:  s.RoomVersionTarget,
		RoomVersionBlocked: s.RoomVersionBlocked,
		RoomVersionMin:     s.RoomVersionMin,
		RoomVersionMax:     s.RoomVersionMax,
	}
	if s.Err != nil {
		out.Error = s.Err.Error()
	}
	if s.TailErr != nil {
		out.TailError = s.TailErr.Error()
	}
	out.Members = apiMembers(s)
	return out
}

// roleHistory returns the recorded role changes, newest first.
func (m *replicaMaster) roleHistory() []api.RoleChange {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]api.RoleChange, len(m.roles))
	for i, rc := range m.roles {
		out[len(m.roles)-1-i] = rc
	}
	return out
}

// apiMembers turns the replica's member list into the API's, with each
// member's lag behind the primary (api.Member.Lag). This master's own row
// has its local applied index, fresher than what it last published.
func apiMembers(s replica.Status) []api.Member {
	applied := make([]uint64, len(s.Members))
	for i, mem := range s.Members {
		applied[i] = mem.Applied
		if mem.ID == s.ID {
			applied[i] = s.Applied
		}
	}
	ref := referenceApplied(s, applied)
	out := make([]api.Member, len(s.Members))
	for i, mem := range s.Members {
		var lag uint64
		if ref > applied[i] {
			lag = ref - applied[i]
		}
		out[i] = api.Member{ID: mem.ID, Addr: mem.Addr, Role: roleName(mem.Role), Observer: mem.Observer, AppliedIndex: applied[i], Lag: lag,
			RoomVersionMin: mem.RoomVersionMin, RoomVersionMax: mem.RoomVersionMax}
	}
	return out
}

// referenceApplied is the applied index members' lag is measured against
// (api.Member.Lag): the primary's (applied[i] is s.Members[i]'s), or this
// master's own when it is the primary; with no primary among the members,
// the highest applied index among them.
func referenceApplied(s replica.Status, applied []uint64) uint64 {
	if s.Role == replica.RolePrimary {
		return s.Applied
	}
	var highest uint64
	for i, mem := range s.Members {
		if s.PrimaryID != "" && mem.ID == s.PrimaryID {
			return applied[i]
		}
		highest = max(highest, applied[i])
	}
	return highest
}

// roleName is the API's name of a replica role: api.RolePrimary and
// api.RoleStandby for the stable roles, the replica's own name otherwise
// ("takeover", "failed", "closed").
func roleName(r replica.Role) string {
	switch r {
	case replica.RolePrimary:
		return api.RolePrimary
	case replica.RoleStandby:
		return api.RoleStandby
	}
	return r.String()
}
