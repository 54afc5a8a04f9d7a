package api_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/api"
	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/namespace"
	"github.com/roomlog/roomlog/store"
)

// fakeMaster is an in-process Master over a real store running the
// namespace applier. A primary applies proposals directly and keeps them in
// its log; a standby applies what catchUp copies from a primary's log.
// ProposeRequest deduplicates through the store's own request table, as the
// replica does: any member answers a request it has applied from its table;
// otherwise the primary appends the entry in a request envelope.
type fakeMaster struct {
	st *store.Store

	mu sync.Mutex // guards every field below
	// Invariant: len(log) == st.AppliedIndex() (the log is what was applied).
	log        [][]byte
	status     api.Status    // ID, Role, Addr, PrimaryID, PrimaryAddr; AppliedIndex filled in by Status
	proposeErr error         // when set, Propose fails with it without applying
	loseAnswer error         // when set, Propose applies, then fails with it (the answer is lost)
	blockUntil bool          // when set, Propose waits for its context to end
	changed    chan struct{} // closed (and replaced) after every apply
	waiters    int           // WaitApplied calls in progress
}

func newFakeMaster(t *testing.T, id, role string) *fakeMaster {
	t.Helper()
	st, err := store.Open(t.TempDir(), &store.Options{Applier: namespace.Applier{}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	return &fakeMaster{st: st, changed: make(chan struct{}),
		status: api.Status{ID: id, Room: "test", Role: role, Epoch: 1, Connected: true}}
}

func (f *fakeMaster) applyLocked(entries ...[]byte) ([]store.Outcome, error) {
	first := f.st.AppliedIndex() + 1
	batch := make([]store.Entry, len(entries))
	for i, e := range entries {
		batch[i] = store.Entry{Index: first + uint64(i), Epoch: 1, Data: e}
	}
	outs, err := f.st.ApplyOutcomes(batch)
	if err != nil {
		return nil, err
	}
	f.log = append(f.log, entries...)
	close(f.changed)
	f.changed = make(chan struct{})
	return outs, nil
}

func (f *fakeMaster) Propose(ctx context.Context, entry []byte) (api.Result, error) {
	return f.propose(ctx, entry)
}

// ProposeRequest implements api.Master like replica.ProposeRequest: the
// table first (any role), then the primary appends a request envelope.
func (f *fakeMaster) ProposeRequest(ctx context.Context, id store.RequestID, entry []byte) (api.Result, error) {
	rec, found, err := f.st.LookupRequest(id)
	switch {
	case err != nil:
		return api.Result{}, err
	case found && rec.PayloadHash != store.PayloadHash(entry):
		return api.Result{}, fmt.Errorf("%w: applied at %d with another entry", api.ErrRequestConflict, rec.Index)
	case found:
		return api.Result{Index: rec.Index, Response: rec.Response, Duplicate: true}, nil
	}
	data, err := store.EncodeRequest(store.Request{ID: id, Stamp: time.Now().UnixMilli(), TTL: 10 * time.Minute, Window: 1 << 20}, entry)
	if err != nil {
		return api.Result{}, err
	}
	return f.propose(ctx, data)
}

func (f *fakeMaster) propose(ctx context.Context, data []byte) (api.Result, error) {
	f.mu.Lock()
	block, perr := f.blockUntil, f.proposeErr
	f.mu.Unlock()
	if block {
		<-ctx.Done()
		return api.Result{}, ctx.Err()
	}
	if perr != nil {
		return api.Result{}, perr
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.status.Role != api.RolePrimary {
		return api.Result{}, &api.NotPrimaryError{PrimaryID: f.status.PrimaryID, PrimaryAddr: f.status.PrimaryAddr}
	}
	outs, err := f.applyLocked(data)
	if err != nil {
		return api.Result{}, err
	}
	o := outs[0]
	switch {
	case o.Conflict:
		return api.Result{}, fmt.Errorf("%w: applied at %d with another entry", api.ErrRequestConflict, o.Index)
	case f.loseAnswer != nil:
		return api.Result{}, f.loseAnswer
	}
	return api.Result{Index: o.Index, Response: o.Response, Duplicate: o.Duplicate}, nil
}

func (f *fakeMaster) WaitApplied(ctx context.Context, index uint64) error {
	f.set(func(f *fakeMaster) { f.waiters++ })
	defer f.set(func(f *fakeMaster) { f.waiters-- })
	for {
		f.mu.Lock()
		ch, applied, connected := f.changed, f.st.AppliedIndex(), f.status.Connected
		f.mu.Unlock()
		if applied >= index {
			return nil
		}
		if !connected {
			// As the replica does: cut off from ZooKeeper, refuse at once.
			return fmt.Errorf("%w: applied %d, asked for %d", api.ErrDisconnected, applied, index)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

func (f *fakeMaster) Store() store.Reader { return f.st }

func (f *fakeMaster) Status() api.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.status
	s.AppliedIndex = f.st.AppliedIndex()
	s.CommittedIndex = s.AppliedIndex
	return s
}

func (f *fakeMaster) waiting() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.waiters
}

func (f *fakeMaster) set(fn func(f *fakeMaster)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// catchUp applies the entries of primary's log this standby lacks.
func (f *fakeMaster) catchUp(t *testing.T, primary *fakeMaster) {
	t.Helper()
	primary.mu.Lock()
	log := append([][]byte(nil), primary.log...)
	primary.mu.Unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	if n := len(f.log); n < len(log) {
		_, err := f.applyLocked(log[n:]...)
		require.NoError(t, err)
	}
}

// pair is a primary and a standby, each behind its own API server.
type pair struct {
	primary, standby       *fakeMaster
	primarySrv, standbySrv *httptest.Server
}

func newPair(t *testing.T, cfg api.Config) *pair {
	t.Helper()
	p := &pair{primary: newFakeMaster(t, "m1", api.RolePrimary), standby: newFakeMaster(t, "m2", api.RoleStandby)}
	p.primarySrv = serve(t, p.primary, cfg)
	p.standbySrv = serve(t, p.standby, cfg)
	paddr, saddr := hostPort(p.primarySrv), hostPort(p.standbySrv)
	members := []api.Member{{ID: "m1", Addr: paddr, Role: api.RolePrimary}, {ID: "m2", Addr: saddr, Role: api.RoleStandby}}
	p.primary.set(func(f *fakeMaster) {
		f.status.Addr, f.status.PrimaryID, f.status.PrimaryAddr, f.status.Members = paddr, "m1", paddr, members
		f.status.Channels = []api.Channel{{Num: 1, FirstIndex: 1, LastIndex: 0, Epoch: 1, Batches: 3, Bytes: 1234}}
	})
	p.standby.set(func(f *fakeMaster) {
		f.status.Addr, f.status.PrimaryID, f.status.PrimaryAddr, f.status.Members = saddr, "m1", paddr, members
	})
	return p
}

func serve(t *testing.T, m api.Master, cfg api.Config) *httptest.Server {
	t.Helper()
	cfg.Master = m
	s, err := api.New(cfg)
	require.NoError(t, err)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return srv
}

func hostPort(srv *httptest.Server) string { return strings.TrimPrefix(srv.URL, "http://") }
