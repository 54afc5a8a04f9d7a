package testnode

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/roomlog/roomlog/internal/infra/faultfs"
	"github.com/roomlog/roomlog/replica"
	"github.com/roomlog/roomlog/store"
)

// Server limits and defaults.
const (
	// MaxProposeBody bounds a /propose body (the replica refuses entries
	// above its batch limit anyway, with entry_too_large).
	MaxProposeBody = 4 << 20
	// DefaultRequestTimeout bounds a request's wait when it has no
	// ?timeout= parameter.
	DefaultRequestTimeout = 30 * time.Second
	// DefaultDumpLimit and MaxDumpLimit bound the records of one /dump.
	DefaultDumpLimit = 10_000
	MaxDumpLimit     = 100_000
)

// Server is the HTTP API of a test node (see the package doc). It answers
// "starting" until SetReplica is called.
type Server struct {
	room   string
	pid    int
	log    *slog.Logger
	rep    atomic.Pointer[replica.Replica]
	mux    *http.ServeMux
	ckpath string
}

// NewServer returns the API for a replica of room that will be opened
// later (SetReplica). pid is reported by /status.
func NewServer(room string, pid int, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{room: room, pid: pid, log: log, mux: http.NewServeMux(), ckpath: replica.CheckpointPath(room)}
	s.mux.HandleFunc("POST /propose", s.withReplica(s.propose))
	s.mux.HandleFunc("GET /status", s.withReplica(s.status))
	s.mux.HandleFunc("GET /hash", s.withReplica(s.hash))
	s.mux.HandleFunc("GET /runhash", s.withReplica(s.runHash))
	s.mux.HandleFunc("POST /barrier", s.withReplica(s.barrier))
	s.mux.HandleFunc("POST /stepdown", s.withReplica(s.stepdown))
	s.mux.HandleFunc("POST /transfer", s.withReplica(s.transfer))
	s.mux.HandleFunc("POST /checkpoint", s.withReplica(s.checkpoint))
	s.mux.HandleFunc("GET /dump", s.withReplica(s.dump))
	s.mux.HandleFunc("GET /get", s.withReplica(s.get))
	s.mux.HandleFunc(s.ckpath, s.withReplica(func(w http.ResponseWriter, req *http.Request, r *replica.Replica) {
		r.CheckpointHandler().ServeHTTP(w, req)
	}))
	return s
}

// SetDiskFaults serves POST /fault/disk?stall=true|false, which stalls or
// resumes the writes of the store's file system f (the node's
// --disk-faults). It may be called while serving (ServeMux locks).
func (s *Server) SetDiskFaults(f *faultfs.FS) {
	s.mux.HandleFunc("POST /fault/disk", func(w http.ResponseWriter, req *http.Request) {
		stall, err := strconv.ParseBool(req.URL.Query().Get("stall"))
		if err != nil {
			badRequest(w, "stall: want true or false: %v", err)
			return
		}
		if stall {
			f.Stall()
		} else {
			f.Resume()
		}
		s.log.Warn("disk fault", "stall", stall)
		writeJSON(w, http.StatusOK, struct{}{})
	})
}

// SetReplica makes the API serve r.
func (s *Server) SetReplica(r *replica.Replica) { s.rep.Store(r) }

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, req *http.Request) { s.mux.ServeHTTP(w, req) }

type replicaHandler func(http.ResponseWriter, *http.Request, *replica.Replica)

func (s *Server) withReplica(h replicaHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		r := s.rep.Load()
		if r == nil {
			writeJSON(w, http.StatusServiceUnavailable, ErrorResponse{Error: CodeStarting, Message: "replica not open yet"})
			return
		}
		h(w, req, r)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client may be gone
}

func writeErr(w http.ResponseWriter, err error, index uint64) {
	status, body := errorResponse(err, index)
	writeJSON(w, status, body)
}

func badRequest(w http.ResponseWriter, format string, args ...any) {
	writeJSON(w, http.StatusBadRequest, ErrorResponse{Error: CodeBadRequest, Message: fmt.Sprintf(format, args...)})
}

// requestCtx derives the request's context bounded by ?timeout= (a Go
// duration) or DefaultRequestTimeout.
func requestCtx(req *http.Request) (context.Context, context.CancelFunc, error) {
	d := DefaultRequestTimeout
	if v := req.URL.Query().Get("timeout"); v != "" {
		var err error
		d, err = time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, nil, fmt.Errorf("bad timeout %q", v)
		}
	}
	ctx, cancel := context.WithTimeout(req.Context(), d)
	return ctx, cancel, nil
}

func uintParam(req *http.Request, name string, def uint64) (uint64, error) {
	v := req.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("bad %s %q", name, v)
	}
	return n, nil
}

func (s *Server) propose(w http.ResponseWriter, req *http.Request, r *replica.Replica) {
	ctx, cancel, err := requestCtx(req)
	if err != nil {
		badRequest(w, "%v", err)
		return
	}
	defer cancel()
	var id replica.RequestID
	if v, ok := req.Header[RequestIDHeader]; ok {
		if len(v) != 1 {
			writeJSON(w, http.StatusBadRequest, ErrorResponse{Error: CodeBadRequestID,
				Message: fmt.Sprintf("%d %s headers, want one", len(v), RequestIDHeader)})
			return
		}
		if id, err = ParseRequestID(v[0]); err != nil {
			writeJSON(w, http.StatusBadRequest, ErrorResponse{Error: CodeBadRequestID, Message: err.Error()})
			return
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, MaxProposeBody))
	if err != nil {
		badRequest(w, "read body: %v", err)
		return
	}
	var res replica.Result
	if id.IsZero() {
		res, err = r.Propose(ctx, body)
	} else {
		res, err = r.ProposeRequest(ctx, id, body)
	}
	if err != nil {
		status, eb := errorResponse(err, res.Index)
		if eb.Error == CodeTimeout {
			// Propose and ProposeRequest return ctx's own error only when
			// nothing was sent (ProposeRequest's wait for the same request
			// in flight is an outcome_unknown).
			eb.Error = CodeCanceled
		}
		if eb.Error == CodeNoResponse {
			eb.Duplicate = res.Duplicate
		}
		writeJSON(w, status, eb)
		return
	}
	writeJSON(w, http.StatusOK, ProposeResponse{Index: res.Index, Response: res.Response, Duplicate: res.Duplicate})
}

func (s *Server) status(w http.ResponseWriter, _ *http.Request, r *replica.Replica) {
	writeJSON(w, http.StatusOK, statusJSON(r.Status(), s.pid))
}

func (s *Server) hash(w http.ResponseWriter, req *http.Request, r *replica.Replica) {
	minIndex, err := uintParam(req, "min_index", 0)
	if err != nil {
		badRequest(w, "%v", err)
		return
	}
	ctx, cancel, err := requestCtx(req)
	if err != nil {
		badRequest(w, "%v", err)
		return
	}
	defer cancel()
	if err := r.WaitApplied(ctx, minIndex); err != nil {
		writeErr(w, err, 0)
		return
	}
	h, idx, err := r.StateHash()
	if err != nil {
		writeErr(w, err, 0)
		return
	}
	writeJSON(w, http.StatusOK, HashResponse{Hash: h, Index: idx})
}

func (s *Server) runHash(w http.ResponseWriter, req *http.Request, r *replica.Replica) {
	index, err := uintParam(req, "index", 0)
	if err != nil {
		badRequest(w, "%v", err)
		return
	}
	if index == 0 {
		badRequest(w, "index must be > 0")
		return
	}
	out := RunHashResponse{Index: index, Applied: r.Status().Applied}
	if h, ok := r.RunHashAt(index); ok {
		out.Found, out.Base, out.Sum = true, h.Base, hex.EncodeToString(h.Sum[:])
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) barrier(w http.ResponseWriter, req *http.Request, r *replica.Replica) {
	ctx, cancel, err := requestCtx(req)
	if err != nil {
		badRequest(w, "%v", err)
		return
	}
	defer cancel()
	idx, err := r.Barrier(ctx)
	if err != nil {
		writeErr(w, err, 0)
		return
	}
	writeJSON(w, http.StatusOK, BarrierResponse{Index: idx})
}

func (s *Server) stepdown(w http.ResponseWriter, req *http.Request, r *replica.Replica) {
	s.simple(w, req, func(ctx context.Context) error { return r.StepDown(ctx) })
}

func (s *Server) checkpoint(w http.ResponseWriter, req *http.Request, r *replica.Replica) {
	s.simple(w, req, func(ctx context.Context) error { return r.Checkpoint(ctx) })
}

func (s *Server) transfer(w http.ResponseWriter, req *http.Request, r *replica.Replica) {
	to := req.URL.Query().Get("to")
	if to == "" {
		badRequest(w, "missing to")
		return
	}
	s.simple(w, req, func(ctx context.Context) error { return r.TransferLeadership(ctx, to) })
}

// simple runs fn under the request's timeout and answers {} or the error.
func (s *Server) simple(w http.ResponseWriter, req *http.Request, fn func(context.Context) error) {
	ctx, cancel, err := requestCtx(req)
	if err != nil {
		badRequest(w, "%v", err)
		return
	}
	defer cancel()
	if err := fn(ctx); err != nil {
		writeErr(w, err, 0)
		return
	}
	writeJSON(w, http.StatusOK, struct{}{})
}

func (s *Server) dump(w http.ResponseWriter, req *http.Request, r *replica.Replica) {
	from, err := uintParam(req, "from", 1)
	if err != nil {
		badRequest(w, "%v", err)
		return
	}
	to, err := uintParam(req, "to", ^uint64(0))
	if err != nil {
		badRequest(w, "%v", err)
		return
	}
	limit, err := uintParam(req, "limit", DefaultDumpLimit)
	if err != nil || limit == 0 || limit > MaxDumpLimit {
		badRequest(w, "limit must be 1..%d", MaxDumpLimit)
		return
	}
	resp, err := readStore(req.Context(), r, func(st store.Reader) (DumpResponse, error) {
		return readDump(st, from, to, int(limit))
	})
	if err != nil {
		writeErr(w, err, 0)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// readStore runs read on the replica's store. Replica.Store follows the
// replica across bootstraps, but a view opened on the store a bootstrap
// then replaces returns store.ErrClosed: such a read is retried on the new
// store (every 20 ms, at most 50 times, while ctx lasts).
func readStore[T any](ctx context.Context, r *replica.Replica, read func(store.Reader) (T, error)) (T, error) {
	st := r.Store()
	for attempt := 0; ; attempt++ {
		v, err := read(st)
		if err == nil || !errors.Is(err, store.ErrClosed) || attempt >= 50 || ctx.Err() != nil {
			return v, err
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

// get answers GET /get?key=K[&barrier=1]: the value of K in one view of
// the local store. With barrier=1 it first waits for replica.Barrier (a
// ZooKeeper sync, the log's committed end, then until that much is applied
// locally), which makes the read linearizable on any member: a standby, the
// primary, and a primary being deposed alike. The replica offers no
// cheaper safe read on a primary: its role is only its own belief (a
// primary cut off from ZooKeeper keeps believing it leads until it hears of
// its session's expiry, while a successor commits), so a primary reads
// through Barrier too. A deposed primary that still answers then either
// sees its successor's entries (its Barrier waits until it has applied
// them, as a standby) or fails (it cannot sync: error, no value); it never
// returns its stale state as a barrier read. barrier=0 is a plain local
// read at the node's applied index: no recency guarantee on any member.
func (s *Server) get(w http.ResponseWriter, req *http.Request, r *replica.Replica) {
	q := req.URL.Query()
	key := q.Get("key")
	if key == "" {
		badRequest(w, "missing key")
		return
	}
	var barrier bool
	switch v := q.Get("barrier"); v {
	case "", "0", "false":
	case "1", "true":
		barrier = true
	default:
		badRequest(w, "bad barrier %q (want 0 or 1)", v)
		return
	}
	ctx, cancel, err := requestCtx(req)
	if err != nil {
		badRequest(w, "%v", err)
		return
	}
	defer cancel()
	var point uint64
	if barrier {
		if point, err = r.Barrier(ctx); err != nil {
			writeErr(w, err, 0)
			return
		}
	}
	self := r.Status()
	resp, err := readStore(ctx, r, func(st store.Reader) (GetResponse, error) { return readKey(st, key) })
	if err != nil {
		writeErr(w, err, 0)
		return
	}
	resp.Barrier, resp.Role, resp.Epoch = point, self.Role.String(), self.Epoch
	writeJSON(w, http.StatusOK, resp)
}

// readKey reads key in one view of st.
func readKey(st store.Reader, key string) (GetResponse, error) {
	v, err := st.View()
	if err != nil {
		return GetResponse{}, err
	}
	defer v.Close()
	resp := GetResponse{Key: key, Index: v.Index()}
	val, err := v.Get([]byte(key))
	switch {
	case err == nil:
		resp.Found, resp.Value = true, val
	case !errors.Is(err, store.ErrNotFound):
		return GetResponse{}, err
	}
	return resp, nil
}

func readDump(st store.Reader, from, to uint64, limit int) (DumpResponse, error) {
	v, err := st.View()
	if err != nil {
		return DumpResponse{}, err
	}
	defer v.Close()
	// One more than the limit tells whether there is more.
	recs, err := ReadRecords(v, from, to, limit+1)
	if err != nil {
		return DumpResponse{}, err
	}
	resp := DumpResponse{Applied: v.Index(), Records: recs}
	if len(recs) > limit {
		resp.Records, resp.More = recs[:limit], true
	}
	if resp.Records == nil {
		resp.Records = []Record{}
	}
	return resp, nil
}
