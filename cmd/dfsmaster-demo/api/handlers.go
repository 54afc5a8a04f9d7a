package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/namespace"
	"github.com/roomlog/roomlog/store"
)

// Request bodies of the mutations. Unknown fields are rejected.
type (
	MkdirRequest struct {
		Path    string `json:"path"`
		Parents bool   `json:"parents,omitempty"`
	}
	CreateRequest struct {
		Path        string `json:"path"`
		Replication *int   `json:"replication,omitempty"` // default DefaultReplication
	}
	AddBlockRequest struct {
		Path string `json:"path"`
		Size *int64 `json:"size"` // required, >= 0
		// Servers: the chunk servers the client wrote the block to (its
		// placement, namespace.Placement); optional. Proposed only in a
		// room at room version 2 or more (every master reads it).
		Servers []string `json:"servers,omitempty"`
	}
	RenameRequest struct {
		Src string `json:"src"`
		Dst string `json:"dst"`
	}
	DeleteRequest struct {
		Path      string `json:"path"`
		Recursive bool   `json:"recursive,omitempty"`
	}
)

// MutationResponse is the body of a successful mutation.
type MutationResponse struct {
	Index   uint64 `json:"index"`
	BlockID uint64 `json:"block_id,omitempty"` // addblock only (block ids start at 1)
}

// LsResponse is the body of a successful ls.
type LsResponse struct {
	Index   uint64            `json:"index"`
	Entries []namespace.Entry `json:"entries"`
}

// StatResponse is the body of a successful stat.
type StatResponse struct {
	Index uint64 `json:"index"`
	namespace.Info
}

// HashResponse is the body of a successful hash.
type HashResponse struct {
	AppliedIndex uint64 `json:"applied_index"`
	Hash         string `json:"hash"`
}

// mutation is the handler of a mutation endpoint: the Idempotency-Key is
// checked first, then build decodes the body into a command, then mutate
// proposes it.
func (s *Server) mutation(build func(s *Server, w http.ResponseWriter, r *http.Request) (namespace.Command, *httpError)) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		key, herr := idempotencyKey(r.Header)
		if herr != nil {
			s.fail(w, r, herr)
			return
		}
		c, herr := build(s, w, r)
		if herr != nil {
			s.fail(w, r, herr)
			return
		}
		s.mutate(w, r, key, c)
	}
}

func mkdirCommand(s *Server, w http.ResponseWriter, r *http.Request) (namespace.Command, *httpError) {
	req, herr := decodeBody[MkdirRequest](s, w, r)
	if herr != nil {
		return namespace.Command{}, herr
	}
	if herr := checkPathText("mkdir", req.Path); herr != nil {
		return namespace.Command{}, herr
	}
	return namespace.Command{Op: namespace.OpMkdir, Path: req.Path, Parents: req.Parents}, nil
}

func createCommand(s *Server, w http.ResponseWriter, r *http.Request) (namespace.Command, *httpError) {
	req, herr := decodeBody[CreateRequest](s, w, r)
	if herr != nil {
		return namespace.Command{}, herr
	}
	if herr := checkPathText("create", req.Path); herr != nil {
		return namespace.Command{}, herr
	}
	repl := DefaultReplication
	if req.Replication != nil {
		repl = *req.Replication
	}
	return namespace.Command{Op: namespace.OpCreate, Path: req.Path, Replication: repl}, nil
}

func addBlockCommand(s *Server, w http.ResponseWriter, r *http.Request) (namespace.Command, *httpError) {
	req, herr := decodeBody[AddBlockRequest](s, w, r)
	if herr != nil {
		return namespace.Command{}, herr
	}
	if herr := checkPathText("addblock", req.Path); herr != nil {
		return namespace.Command{}, herr
	}
	if req.Size == nil {
		return namespace.Command{}, badRequest("addblock: size is required")
	}
	if len(req.Servers) > 0 {
		// The placement is a command field masters of v0.1.0 refuse: it
		// is written only where every master reads it.
		if rv := s.m.Status().RoomVersion; rv < 2 {
			return namespace.Command{}, badRequest("addblock: servers (a block placement) need the room at room version 2 or more, not %d: raise it with `roomlog room-version ROOM --set 2`", rv)
		}
	}
	return namespace.Command{Op: namespace.OpAddBlock, Path: req.Path, Size: *req.Size, Servers: req.Servers}, nil
}

func renameCommand(s *Server, w http.ResponseWriter, r *http.Request) (namespace.Command, *httpError) {
	req, herr := decodeBody[RenameRequest](s, w, r)
	if herr != nil {
		return namespace.Command{}, herr
	}
	for _, herr := range []*httpError{checkPathText("rename source", req.Src), checkPathText("rename destination", req.Dst),
		checkNotRoot("rename", req.Src)} {
		if herr != nil {
			return namespace.Command{}, herr
		}
	}
	return namespace.Command{Op: namespace.OpRename, Path: req.Src, Dst: req.Dst}, nil
}

func deleteCommand(s *Server, w http.ResponseWriter, r *http.Request) (namespace.Command, *httpError) {
	req, herr := decodeBody[DeleteRequest](s, w, r)
	if herr != nil {
		return namespace.Command{}, herr
	}
	for _, herr := range []*httpError{checkPathText("delete", req.Path), checkNotRoot("delete", req.Path)} {
		if herr != nil {
			return namespace.Command{}, herr
		}
	}
	return namespace.Command{Op: namespace.OpDelete, Path: req.Path, Recursive: req.Recursive}, nil
}

// decodeBody decodes exactly one JSON object of type T: its keys exactly
// T's json names (no case folding), none repeated, no trailing data, path
// strings valid UTF-8 as sent, at most MaxBodyBytes, and no query
// parameters.
func decodeBody[T any](s *Server, w http.ResponseWriter, r *http.Request) (*T, *httpError) {
	if r.URL.RawQuery != "" {
		return nil, badRequest("%s takes a JSON body, not query parameters", r.URL.Path)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		// Connection: close, as net/http does by itself when MaxBytesReader
		// gets its own ResponseWriter (the metrics' wrapper hides it): the
		// rest of the body is not read.
		return nil, &httpError{status: http.StatusRequestEntityTooLarge, code: CodeBadRequest,
			msg: fmt.Sprintf("body larger than %d bytes", tooBig.Limit), header: map[string]string{"Connection": "close"}}
	case err != nil:
		return nil, badRequest("reading the body: %v", err)
	}
	if herr := prescanObject(body, jsonKeys[T]()); herr != nil {
		return nil, herr
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var v *T
	err = dec.Decode(&v)
	if err == nil && v == nil {
		return nil, badRequest("body must be a JSON object")
	}
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			err = terr
			if err == nil {
				err = errors.New("trailing data after the JSON object")
			}
		}
	}
	switch {
	case err == nil:
		return v, nil
	case errors.Is(err, io.EOF):
		return nil, badRequest("empty body: want a JSON object")
	}
	return nil, badRequest("malformed JSON body: %v", err)
}

// mutate proposes c (with an Idempotency-Key: as a request, at most once
// per key) and answers with its outcome. Every answer after the proposal is
// computed from the entry's index and the applier's response only, so a
// replay (res.Duplicate) is byte for byte the original answer, plus the
// Idempotent-Replayed header.
func (s *Server) mutate(w http.ResponseWriter, r *http.Request, key string, c namespace.Command) {
	entry, err := namespace.EncodeCommand(c)
	if err != nil {
		s.fail(w, r, namespaceError(err, 0))
		return
	}
	if herr := s.unusable(); herr != nil {
		s.fail(w, r, herr)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.ProposeTimeout)
	defer cancel()
	var res Result
	if key == "" {
		res, err = s.m.Propose(ctx, entry)
	} else {
		res, err = s.m.ProposeRequest(ctx, RequestIDForKey(key), entry)
	}
	if err != nil {
		s.fail(w, r, s.proposeError(r, key != "", err))
		return
	}
	if res.Duplicate {
		w.Header().Set(IdempotentReplayedHeader, "true")
	}
	resp, err := namespace.DecodeResponse(res.Response)
	if err != nil {
		s.fail(w, r, &httpError{status: http.StatusInternalServerError, code: CodeInternal,
			msg: fmt.Sprintf("entry %d committed but its response is unreadable: %v", res.Index, err), index: res.Index})
		return
	}
	if err := resp.Err(); err != nil {
		s.fail(w, r, namespaceError(err, res.Index))
		return
	}
	writeJSON(w, http.StatusOK, MutationResponse{Index: res.Index, BlockID: resp.BlockID})
}

// namespaceError maps a namespace rejection (or read error) to its response.
func namespaceError(err error, index uint64) *httpError {
	code, ok := namespace.CodeOf(err)
	if !ok {
		return storeError(err)
	}
	status := http.StatusConflict
	switch code {
	case namespace.CodeInvalidPath, namespace.CodeBadRequest:
		status = http.StatusBadRequest
	case namespace.CodeNotFound:
		status = http.StatusNotFound
	}
	return &httpError{status: status, code: string(code), msg: err.Error(), index: index}
}

func storeError(err error) *httpError {
	if errors.Is(err, store.ErrClosed) {
		return &httpError{status: http.StatusServiceUnavailable, code: CodeUnavailable, msg: err.Error()}
	}
	return &httpError{status: http.StatusInternalServerError, code: CodeInternal, msg: err.Error()}
}

// proposeError maps a Propose (keyed: ProposeRequest) failure to its
// response.
func (s *Server) proposeError(r *http.Request, keyed bool, err error) *httpError {
	retry := "read before retrying (or send an " + IdempotencyKeyHeader + " to make retries safe)"
	if keyed {
		retry = "retry with the same " + IdempotencyKeyHeader + ": it is applied at most once"
	}
	unavailable := func(code, msg string) *httpError {
		return &httpError{status: http.StatusServiceUnavailable, code: code, msg: msg}
	}
	var np *NotPrimaryError
	switch {
	case errors.As(err, &np):
		if np.PrimaryAddr == "" || np.PrimaryAddr == s.m.Status().Addr {
			return unavailable(CodeNoPrimary, "no primary is elected right now; retry shortly")
		}
		msg := fmt.Sprintf("this master is a standby; the primary is %s", np.PrimaryAddr)
		if st := s.m.Status(); !st.Connected {
			msg = fmt.Sprintf("this master is a standby, cut off from ZooKeeper for %d ms; the primary it last knew is %s (it may have changed)",
				st.DisconnectedMS, np.PrimaryAddr)
		}
		return &httpError{status: http.StatusTemporaryRedirect, code: CodeNotPrimary,
			msg: msg, primary: np.PrimaryAddr, location: redirectURL(np.PrimaryAddr, r.URL, r.TLS != nil)}
	case errors.Is(err, ErrNotPrimary):
		return unavailable(CodeNoPrimary, "no primary is elected right now; retry shortly")
	case errors.Is(err, ErrRequestConflict):
		return &httpError{status: http.StatusUnprocessableEntity, code: CodeIdempotencyKeyReused,
			msg: fmt.Sprintf("this %s was already used for another request (another endpoint or body); nothing was applied (%v)", IdempotencyKeyHeader, err)}
	case errors.Is(err, ErrOutcomeUnknown):
		return unavailable(CodeOutcomeUnknown, fmt.Sprintf("the command may or may not have been applied; %s (%v)", retry, err))
	case errors.Is(err, ErrFailed):
		return unavailable(CodeFailed, fmt.Sprintf("this master failed and takes no more commands; nothing was applied; use another master (%v)", err))
	case errors.Is(err, ErrOverloaded):
		e := unavailable(CodeOverloaded, fmt.Sprintf("nothing was applied; retry later (%v)", err))
		e.header = map[string]string{"Retry-After": "1"}
		return e
	case errors.Is(err, ErrUnavailable):
		return unavailable(CodeUnavailable, fmt.Sprintf("nothing was applied (%v)", err))
	case errors.Is(err, context.DeadlineExceeded):
		return &httpError{status: http.StatusGatewayTimeout, code: CodeTimeout,
			msg: fmt.Sprintf("the proposal did not finish within %v; the command may or may not have been applied; %s", s.cfg.ProposeTimeout, retry)}
	case errors.Is(err, context.Canceled):
		return unavailable(CodeOutcomeUnknown, "request canceled; the command may or may not have been applied; "+retry)
	}
	return &httpError{status: http.StatusInternalServerError, code: CodeInternal, msg: err.Error()}
}

// redirectURL is the primary's URL for the same path and query. A
// scheme-less primary address gets http://, or https:// when the request
// came over TLS (secure); over TLS an http:// address is upgraded to
// https://, so a TLS master never sends a client (and the body a 307
// makes it re-send) to plain http.
func redirectURL(primary string, u *url.URL, secure bool) string {
	base := primary
	if !strings.Contains(base, "://") {
		if secure {
			base = "https://" + base
		} else {
			base = "http://" + base
		}
	} else if secure && len(base) >= len("http://") && strings.EqualFold(base[:len("http://")], "http://") {
		base = "https://" + base[len("http://"):]
	}
	return strings.TrimSuffix(base, "/") + u.RequestURI()
}

// readQuery checks that the query holds only the allowed parameters, each at
// most once, and parses min_index (0 when absent or not allowed).
func readQuery(r *http.Request, allowed ...string) (url.Values, uint64, *httpError) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, 0, badRequest("malformed query: %v", err)
	}
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !contains(allowed, k) {
			return nil, 0, badRequest("unknown query parameter %q", k)
		}
		if len(q[k]) > 1 {
			return nil, 0, badRequest("query parameter %q given %d times", k, len(q[k]))
		}
	}
	var minIndex uint64
	if v := q.Get("min_index"); v != "" || q.Has("min_index") {
		minIndex, err = strconv.ParseUint(v, 10, 64)
		if err != nil {
			return nil, 0, badRequest("min_index %q: not an unsigned integer", v)
		}
	}
	return q, minIndex, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// unusable is the answer for a master that cannot serve commands or reads
// at all, nil otherwise: 503 failed (with the reason) once it failed, 503
// unavailable while it shuts down. Its Status says the same.
func (s *Server) unusable() *httpError {
	st := s.m.Status()
	switch {
	case st.Failed():
		reason := st.Error
		if reason == "" {
			reason = "no reason recorded"
		}
		return &httpError{status: http.StatusServiceUnavailable, code: CodeFailed,
			msg: fmt.Sprintf("master %s failed and no longer takes part in the room: %s (it needs an operator; use another master)", st.ID, reason)}
	case st.Role == RoleClosed:
		return &httpError{status: http.StatusServiceUnavailable, code: CodeUnavailable,
			msg: fmt.Sprintf("master %s is shutting down", st.ID)}
	}
	return nil
}

// view waits (bounded) until minIndex is applied and returns a consistent
// view at or past it. A failed master serves no reads: its state is frozen
// and may be the side that diverged.
func (s *Server) view(r *http.Request, minIndex uint64) (*store.View, *httpError) {
	if herr := s.unusable(); herr != nil {
		return nil, herr
	}
	if herr := behind(s.m.Status()); herr != nil {
		return nil, herr
	}
	st := s.m.Store()
	if minIndex > st.AppliedIndex() {
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.ReadWait)
		err := s.m.WaitApplied(ctx, minIndex)
		cancel()
		if err != nil {
			if herr := s.unusable(); herr != nil { // failed (or closed) while waiting
				return nil, herr
			}
			if errors.Is(err, ErrDisconnected) {
				return nil, disconnected(fmt.Sprintf("this master cannot serve index %d now; use another master (%v)", minIndex, err))
			}
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				return nil, &httpError{status: http.StatusGatewayTimeout, code: CodeTimeout,
					msg: fmt.Sprintf("index %d not applied within %v (applied %d)", minIndex, s.cfg.ReadWait, st.AppliedIndex())}
			}
			return nil, &httpError{status: http.StatusServiceUnavailable, code: CodeUnavailable,
				msg: fmt.Sprintf("waiting for index %d: %v", minIndex, err)}
		}
	}
	v, err := st.View()
	if err != nil {
		return nil, storeError(err)
	}
	if v.Index() < minIndex {
		v.Close()
		return nil, &httpError{status: http.StatusInternalServerError, code: CodeInternal,
			msg: fmt.Sprintf("master bug: view at index %d after WaitApplied(%d) returned", v.Index(), minIndex)}
	}
	return v, nil
}

func (s *Server) handleLs(w http.ResponseWriter, r *http.Request) {
	q, minIndex, herr := readQuery(r, "path", "min_index")
	if herr == nil {
		herr = checkPathText("ls", q.Get("path"))
	}
	if herr != nil {
		s.fail(w, r, herr)
		return
	}
	v, herr := s.view(r, minIndex)
	if herr != nil {
		s.fail(w, r, herr)
		return
	}
	defer v.Close()
	entries, err := namespace.Ls(v, q.Get("path"))
	if err != nil {
		s.fail(w, r, namespaceError(err, 0))
		return
	}
	writeJSON(w, http.StatusOK, LsResponse{Index: v.Index(), Entries: entries})
}

func (s *Server) handleStat(w http.ResponseWriter, r *http.Request) {
	q, minIndex, herr := readQuery(r, "path", "min_index")
	if herr == nil {
		herr = checkPathText("stat", q.Get("path"))
	}
	if herr != nil {
		s.fail(w, r, herr)
		return
	}
	v, herr := s.view(r, minIndex)
	if herr != nil {
		s.fail(w, r, herr)
		return
	}
	defer v.Close()
	info, err := namespace.Stat(v, q.Get("path"))
	if err != nil {
		s.fail(w, r, namespaceError(err, 0))
		return
	}
	writeJSON(w, http.StatusOK, StatResponse{Index: v.Index(), Info: info})
}

// PlacementsResponse is GET /v1/placements: every block placement (the
// chunk servers holding each placed block) and how many blocks have fewer
// servers than their replication factor.
type PlacementsResponse struct {
	Index           uint64                `json:"index"`
	Placements      []namespace.Placement `json:"placements"`
	UnderReplicated int                   `json:"under_replicated"`
}

func (s *Server) handlePlacements(w http.ResponseWriter, r *http.Request) {
	_, minIndex, herr := readQuery(r, "min_index")
	if herr != nil {
		s.fail(w, r, herr)
		return
	}
	v, herr := s.view(r, minIndex)
	if herr != nil {
		s.fail(w, r, herr)
		return
	}
	defer v.Close()
	ps, err := namespace.Placements(v)
	if err != nil {
		s.fail(w, r, namespaceError(err, 0))
		return
	}
	out := PlacementsResponse{Index: v.Index(), Placements: ps}
	if out.Placements == nil {
		out.Placements = []namespace.Placement{}
	}
	for _, p := range ps {
		if p.UnderReplicated() {
			out.UnderReplicated++
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleHash(w http.ResponseWriter, r *http.Request) {
	_, minIndex, herr := readQuery(r, "min_index")
	if herr != nil {
		s.fail(w, r, herr)
		return
	}
	v, herr := s.view(r, minIndex)
	if herr != nil {
		s.fail(w, r, herr)
		return
	}
	defer v.Close()
	h, err := v.StateHash()
	if err != nil {
		s.fail(w, r, storeError(err))
		return
	}
	writeJSON(w, http.StatusOK, HashResponse{AppliedIndex: v.Index(), Hash: h})
}

func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	if _, _, herr := readQuery(r); herr != nil {
		s.fail(w, r, herr)
		return
	}
	writeJSON(w, http.StatusOK, s.m.Status())
}

// behind is the 503 of a standby connected to ZooKeeper whose tail cannot
// reach its room's state (Status.TailError: no checkpoint to fetch, say),
// nil otherwise: what its store holds may be far older than the room
// (index 0 for a member started empty), so it serves no reads, as
// /v1/health says behind. A master cut off from ZooKeeper answers by the
// disconnected rules instead.
func behind(st Status) *httpError {
	if st.TailError == "" || !st.Connected {
		return nil
	}
	return &httpError{status: http.StatusServiceUnavailable, code: CodeBehind,
		msg:    fmt.Sprintf("master %s cannot reach its room's state (applied %d): %s; it retries by itself; send reads elsewhere meanwhile", st.ID, st.AppliedIndex, st.TailError),
		header: map[string]string{"Retry-After": "1"}}
}

// disconnected is the 503 of a master cut off from ZooKeeper.
func disconnected(msg string) *httpError {
	return &httpError{status: http.StatusServiceUnavailable, code: CodeDisconnected, msg: msg,
		header: map[string]string{"Retry-After": "1"}}
}

// handleHealth answers 200 while the master takes part in the room,
// connected to ZooKeeper (in any role); 503 disconnected while it is cut off
// (it recovers by itself, but a load balancer should send reads elsewhere
// meanwhile); 503 behind while its standby tail cannot reach the room's
// state (no checkpoint to fetch, say: it cannot serve reads of it); 503
// failed with the reason once it failed; 503 unavailable while it shuts
// down.
func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	if _, _, herr := readQuery(r); herr != nil {
		s.fail(w, r, herr)
		return
	}
	if herr := s.unusable(); herr != nil {
		s.fail(w, r, herr)
		return
	}
	st := s.m.Status()
	if !st.Connected {
		s.fail(w, r, disconnected(fmt.Sprintf("master %s is cut off from ZooKeeper (for %d ms, applied %d); it recovers by itself; send reads elsewhere meanwhile",
			st.ID, st.DisconnectedMS, st.AppliedIndex)))
		return
	}
	if herr := behind(st); herr != nil {
		s.fail(w, r, herr)
		return
	}
	writeJSON(w, http.StatusOK, HealthResponse{Status: "ok", ID: st.ID, Role: st.Role, AppliedIndex: st.AppliedIndex})
}
