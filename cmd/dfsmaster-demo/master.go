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

	mu       sync.Mutex    // guards channels
	channels []api.Channel // last channel list read from the room (nil: none yet)

	stop      chan struct{} // closed by Close
	done      chan struct{} // closed when the refresher returns
	closeOnce sync.Once
}

var _ api.Master = (*replicaMaster)(nil)

func newReplicaMaster(r *replica.Replica, addr string, log *slog.Logger) *replicaMaster {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &replicaMaster{r: r, addr: addr, log: log, stop: make(chan struct{}), done: make(chan struct{})}
	go m.refreshChannels()
	return m
}

// Close stops the channel refresher and waits for it. It does not close the
// replica. Idempotent.
func (m *replicaMaster) Close() {
	m.closeOnce.Do(func() { close(m.stop) })
	<-m.done
}

func (m *replicaMaster) refreshChannels() {
	defer close(m.done)
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
	if errors.Is(err, replica.ErrFailed) {
		return fmt.Errorf("%w: %w", api.ErrFailed, err)
	}
	return err
}

// Store implements api.Master. The replica swaps its store when it
// bootstraps from a checkpoint, so this is read on every call.
func (m *replicaMaster) Store() *store.Store { return m.r.Store() }

// Status implements api.Master; it never touches ZooKeeper.
func (m *replicaMaster) Status() api.Status {
	s := m.r.Status()
	out := api.Status{
		ID:              s.ID,
		Room:            s.Room,
		Role:            roleName(s.Role),
		Addr:            m.addr,
		Epoch:           s.Epoch,
		AppliedIndex:    s.Applied,
		CommittedIndex:  s.Committed,
		Lag:             s.Lag,
		PrimaryID:       s.PrimaryID,
		PrimaryAddr:     s.PrimaryAddr,
		Members:         make([]api.Member, len(s.Members)),
		Connected:       s.Connected,
		RoomBytes:       s.RoomBytes,
		CheckpointIndex: s.CheckpointIndex,
		Bootstraps:      s.Bootstraps,
	}
	if s.Err != nil {
		out.Error = s.Err.Error()
	}
	for i, mem := range s.Members {
		var lag uint64
		if s.Committed > mem.Applied {
			lag = s.Committed - mem.Applied
		}
		out.Members[i] = api.Member{ID: mem.ID, Addr: mem.Addr, Role: roleName(mem.Role),
			AppliedIndex: mem.Applied, Lag: lag}
	}
	m.mu.Lock()
	out.Channels = append([]api.Channel(nil), m.channels...)
	m.mu.Unlock()
	return out
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
