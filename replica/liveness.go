package replica

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
)

// Crash detection faster than the session (package doc, "Failover
// timeline"). The primary serves a liveness stream on its checkpoint
// endpoint (CheckpointPath(room) + "liveness"): an HTTP response that never
// ends while it leads, a byte a second, naming the process (its election
// guid, random per Replica) in a header. The standby next in line holds
// that stream open. When the primary's process dies, its kernel closes
// the connection and refuses new ones: the stream breaks, a new connection
// to the same address is refused (or answered by another process, another
// guid), and that is proof the process holding the primary's candidate
// node is gone. The standby then deletes exactly that node (a version-0
// delete of the node it observed: a node re-created since, or one already
// gone, is left alone), the election moves on at once, and the epoch CAS
// of the new primary fences anything the old one might still send. A pause
// (SIGSTOP, a GC), a partition or a silent host breaks nothing: no proof,
// and the session timeout decides as before. A wrong proof costs an
// unneeded takeover, never safety: writes are fenced by the epoch.

// liveness is the state of crash detection: the process identity served,
// the target watched, the clients, the counts.
type liveness struct {
	guid atomic.Pointer[string] // our election guid (set once, at Open)

	mu      sync.Mutex
	target  *livenessTarget // nil: none
	changed chan struct{}   // closed and replaced when target changes

	stream, probe *http.Client

	deposed, deposedWrong atomic.Uint64
	lastEvidence          atomic.Pointer[string]
}

func newLiveness() *liveness {
	l := &liveness{changed: make(chan struct{})}
	l.stream, l.probe = newLivenessClients()
	return l
}

// setTarget sets the candidate to watch (ok false: none).
func (l *liveness) setTarget(t livenessTarget, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	cur := l.target
	if (!ok && cur == nil) || (ok && cur != nil && *cur == t) {
		return
	}
	if ok {
		l.target = &t
	} else {
		l.target = nil
	}
	close(l.changed)
	l.changed = make(chan struct{})
}

// get returns the target (ok false: none) and a channel closed when it
// changes.
func (l *liveness) get() (livenessTarget, bool, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.target == nil {
		return livenessTarget{}, false, l.changed
	}
	return *l.target, true, l.changed
}

// livenessPath is the liveness stream below the room's checkpoint path.
const livenessPath = "/liveness"

// Liveness stream protocol.
const (
	livenessGUIDHeader  = "X-Roomlog-Liveness-Guid"
	livenessEpochHeader = "X-Roomlog-Liveness-Epoch"
	// livenessBeat: the primary writes a byte this often (so a proxy or a
	// NAT keeps the connection; silence is never evidence).
	livenessBeat = time.Second
	// livenessDial bounds the reconnect that tells a dead process (refused)
	// from a live one; a timeout is no evidence.
	livenessDial = 300 * time.Millisecond
)

// serveLiveness answers a liveness stream: 200 with our guid and epoch,
// then a byte a second for as long as we lead and the client listens; it
// ends (closes) when we stop leading. A member that does not lead answers
// 409. The connection is taken over from the HTTP server (hijacked) where
// it can be: a response that never ends would otherwise hold the
// embedder's graceful Shutdown (and httptest's Close) until the replica
// stops; an HTTP/2 connection cannot be, and streams.
func (r *Replica) serveLiveness(w http.ResponseWriter, req *http.Request) {
	t := r.currentTerm()
	guid := r.live.guid.Load()
	if guid != nil {
		// Every answer names the process, so a standby probing an
		// address another process now holds (the member restarted) knows
		// the one it watched is gone.
		w.Header().Set(livenessGUIDHeader, *guid)
	}
	if t == nil || guid == nil {
		http.Error(w, fmt.Sprintf("member %q is not the primary", r.cfg.ID), http.StatusConflict)
		return
	}
	// A ResponseController finds Hijack and Flush through wrappers that
	// have Unwrap (an embedder's metrics or logging middleware).
	rc := http.NewResponseController(w)
	if conn, bw, err := rc.Hijack(); err == nil {
		defer conn.Close()
		fmt.Fprintf(bw, "HTTP/1.1 200 OK\r\n%s: %s\r\n%s: %d\r\nContent-Type: application/octet-stream\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
			livenessGUIDHeader, *guid, livenessEpochHeader, t.epoch)
		if bw.Flush() != nil {
			return
		}
		// The client never writes again: a read returns when it hangs up.
		gone := make(chan struct{})
		go func() {
			defer close(gone)
			_, _ = io.Copy(io.Discard, conn)
		}()
		tick := time.NewTicker(livenessBeat)
		defer tick.Stop()
		for {
			select {
			case <-gone:
				return
			case <-t.done:
				return
			case <-r.stopc:
				return
			case <-tick.C:
				_ = conn.SetWriteDeadline(time.Now().Add(livenessBeat))
				if _, err := conn.Write([]byte{'.'}); err != nil {
					return
				}
			}
		}
	}
	w.Header().Set(livenessGUIDHeader, *guid)
	w.Header().Set(livenessEpochHeader, strconv.FormatUint(t.epoch, 10))
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if rc.Flush() != nil {
		return // no streaming through this writer: the standby sees no stream, and waits for the session
	}
	tick := time.NewTicker(livenessBeat)
	defer tick.Stop()
	for {
		select {
		case <-req.Context().Done():
			return
		case <-t.done:
			return // the term ended: a clean end of the response
		case <-r.stopc:
			return
		case <-tick.C:
			if _, err := w.Write([]byte{'.'}); err != nil || rc.Flush() != nil {
				return
			}
		}
	}
}

// livenessTarget is the primary's candidate the next in line watches.
type livenessTarget struct {
	ID      string // member id
	Addr    string // its advertised address (candidate data)
	Node    string // its candidate node name c-<guid>-<seq>
	GUID    string
	Session int64 // the session holding the node
}

// livenessTargetOf returns the candidate this member watches: the
// primary's (the live member whose data says primary), when we are the
// first live candidate behind it in our view of the line. The view may be
// older than the membership: a standby re-reads the line only when its
// predecessor's node changes, so when the line shrank in front of it
// (the old primary died, its successor leads) its view still lists the
// dead; candidates of members no longer live are skipped. ok false: none.
func livenessTargetOf(v electionView, self string, members map[string]memberData) (livenessTarget, bool) {
	// The primary is primaryOf's, among the members in the line (a
	// deposed primary's member data says primary until its session
	// expires: the newest epoch wins).
	inLine := make(map[string]memberData, len(v.cands))
	for _, c := range v.cands {
		if d, live := members[c.ID]; live {
			inLine[c.ID] = d
		}
	}
	prim, ok := primaryOf(inLine)
	p := -1
	for i, c := range v.cands {
		if ok && c.ID == prim.ID && p < 0 {
			p = i
		}
	}
	if p < 0 {
		return livenessTarget{}, false
	}
	next := ""
	for _, c := range v.cands[p+1:] {
		if d, live := members[c.ID]; live && c.ID != v.cands[p].ID && !d.Observer {
			next = c.ID
			break
		}
	}
	c := v.cands[p]
	if next != self || c.ID == self || c.Unreadable || len(c.Data) == 0 {
		return livenessTarget{}, false
	}
	return livenessTarget{ID: c.ID, Addr: string(c.Data), Node: c.Node, GUID: c.GUID, Session: c.Session}, true
}

// updateLiveTarget sets what the liveness watcher follows, from the view
// of the line and the members (a standby that may lead only).
func (r *Replica) updateLiveTarget() {
	lp := r.lp
	var t livenessTarget
	ok := false
	if !r.cfg.Observer && lp.c.role == RoleStandby && !lp.c.failed {
		t, ok = livenessTargetOf(lp.view, r.cfg.ID, lp.mem.known)
	}
	r.live.setTarget(t, ok)
}

// livenessEvidence classifies what a check of the target's address found.
type livenessEvidence int

const (
	evidenceNone    livenessEvidence = iota // alive, or nothing proven (timeout, a pause)
	evidenceRefused                         // the stream broke and the address refuses connections
	evidenceOther                           // another process (another guid) serves the address
	evidenceHungUp                          // the address accepts, then hangs up before answering (a proxy in front of a dead process)
)

// decideLiveness: what one probe of the target's address proves, from
// the request's error (nil: answered) and, when answered, the guid the
// responder named (its liveness header; "" when it does not lead or is
// not a replica of this release). Refused: no process listens there. A
// connection accepted and then closed or reset before any answer: what a
// TCP proxy in front of a dead process does (a live Go server answers or
// keeps the connection waiting). A timeout (a pause, a silent host) or
// any other error proves nothing; a responder that is not the primary
// (409, no guid) does not say which process it is either.
func decideLiveness(reqErr error, target livenessTarget, answeredGUID string) livenessEvidence {
	switch {
	case reqErr != nil && errors.Is(reqErr, syscall.ECONNREFUSED):
		return evidenceRefused
	case reqErr != nil && (errors.Is(reqErr, io.EOF) || errors.Is(reqErr, io.ErrUnexpectedEOF) || errors.Is(reqErr, syscall.ECONNRESET)):
		return evidenceHungUp
	case reqErr != nil:
		return evidenceNone
	case answeredGUID != "" && answeredGUID != target.GUID:
		return evidenceOther
	}
	return evidenceNone
}

// livenessDeposes: a probe's evidence about target calls for deposing
// target's candidate: it is proof, and target is still the candidate the
// loop has this member watch (cur, ok: the target now; the line may have
// moved on while the stream was held and the probe ran).
func livenessDeposes(ev livenessEvidence, target, cur livenessTarget, ok bool) bool {
	return ev != evidenceNone && ok && cur == target
}

// runLiveness is the watcher goroutine: it follows the target the loop
// sets, holds its stream, and on a broken stream probes; proof that the
// process is gone deposes the candidate node.
func (r *Replica) runLiveness(ctx context.Context) {
	backoff := 50 * time.Millisecond
	// pause waits the backoff (doubling it, up to 2 s) or until the target
	// changes; false when ctx ended.
	pause := func(changed <-chan struct{}) bool {
		select {
		case <-ctx.Done():
			return false
		case <-changed:
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
		return true
	}
	for ctx.Err() == nil {
		target, ok, changed := r.live.get()
		if !ok {
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
			continue
		}
		broke, err := r.followLiveness(ctx, target, changed)
		if ctx.Err() != nil {
			return
		}
		if cur, ok, _ := r.live.get(); !ok || cur != target {
			backoff = 50 * time.Millisecond
			continue // the line moved on meanwhile
		}
		if !broke {
			// No stream could be established (not the primary, a refused
			// token, no route): nothing proven; look again shortly.
			r.log.Debug("liveness: no stream to the primary", "primary", target.ID, "err", err)
			if !pause(changed) {
				return
			}
			continue
		}
		ev, detail := r.probeLiveness(ctx, target)
		if ev == evidenceNone {
			// Alive (or unknown): follow again, after a pause (a middlebox
			// that cuts long streams must not make this spin).
			if !pause(changed) {
				return
			}
			continue
		}
		if cur, ok, _ := r.live.get(); !livenessDeposes(ev, target, cur, ok) {
			continue // the line moved on while we probed
		}
		r.depose(ctx, target, fmt.Sprintf("stream to %s broke (%v), then %s", target.Addr, err, detail))
	}
}

// followLiveness holds target's stream until it ends or the target
// changes. broke is true when a stream was established and ended (however:
// a live primary that steps down closes it too, and a dead one's kernel
// closes it with a FIN as often as with a reset: the probe that follows
// tells them apart) or another process answered; false when none could be
// established.
func (r *Replica) followLiveness(ctx context.Context, target livenessTarget, changed <-chan struct{}) (broke bool, err error) {
	base, err := r.peerBaseURL(target.Addr) // peertls.go: with PeerTLS, https only
	if err != nil {
		return false, err
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-cctx.Done():
		case <-changed:
			cancel()
		}
	}()
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, base+CheckpointPath(r.cfg.Room)+livenessPath[1:], nil)
	if err != nil {
		return false, err
	}
	if r.cfg.CheckpointToken != "" {
		req.Header.Set("Authorization", "Bearer "+r.cfg.CheckpointToken)
	}
	resp, err := r.live.stream.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if g := resp.Header.Get(livenessGUIDHeader); g != "" && g != target.GUID {
		// Another process answers at that address (the member restarted):
		// let the probe decide what that proves.
		return true, fmt.Errorf("liveness: the address answers as %q, the candidate is %q", g, target.GUID)
	}
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("liveness: %s", resp.Status)
	}
	if g := resp.Header.Get(livenessGUIDHeader); g != target.GUID {
		// Another process leads at that address: let the probe decide
		// what that proves.
		return true, fmt.Errorf("liveness: the address answers as %q, the candidate is %q", g, target.GUID)
	}
	rd := bufio.NewReader(resp.Body)
	for {
		if _, err := rd.ReadByte(); err != nil {
			if cctx.Err() != nil {
				return false, cctx.Err()
			}
			return true, err
		}
	}
}

// probeLiveness dials target's address once more, bounded: refused means
// the process is gone; a responder with another guid means another
// process holds the address; anything else proves nothing.
func (r *Replica) probeLiveness(ctx context.Context, target livenessTarget) (livenessEvidence, string) {
	base, err := r.peerBaseURL(target.Addr)
	if err != nil {
		return evidenceNone, ""
	}
	pctx, cancel := context.WithTimeout(ctx, livenessDial)
	defer cancel()
	req, err := http.NewRequestWithContext(pctx, http.MethodGet, base+CheckpointPath(r.cfg.Room)+livenessPath[1:], nil)
	if err != nil {
		return evidenceNone, ""
	}
	if r.cfg.CheckpointToken != "" {
		req.Header.Set("Authorization", "Bearer "+r.cfg.CheckpointToken)
	}
	resp, err := r.live.probe.Do(req)
	guid := ""
	if err == nil {
		guid = resp.Header.Get(livenessGUIDHeader)
		resp.Body.Close()
	}
	ev := decideLiveness(err, target, guid)
	switch ev {
	case evidenceRefused:
		return ev, "a new connection was refused"
	case evidenceOther:
		return ev, fmt.Sprintf("another process (guid %s) answers there", guid)
	case evidenceHungUp:
		return ev, fmt.Sprintf("a new connection was closed before any answer (%v)", err)
	}
	return ev, ""
}

// deposeOps is the deposition's one Multi, for the candidate node the
// standby observed at path: a version check and a delete of exactly that
// node at version 0 (candidate nodes are never rewritten). The path is the
// observed target's node, never looked up again: a node the line holds
// now (the next primary's, a requeued one) is not the one the proof is
// about.
func deposeOps(path string) []any {
	return []any{&zk.CheckVersionRequest{Path: path, Version: 0}, &zk.DeleteRequest{Path: path, Version: 0}}
}

// deposeOutcome is what the deposition's Multi reply means.
type deposeOutcome int

const (
	deposeDone   deposeOutcome = iota // the observed node was deleted: counted, logged, its verdict due
	deposeGone                        // the node was already gone (expired, resigned, deposed by another): nothing done
	deposeFailed                      // refused or not sent (another version, no connection): the session timeout decides
)

// classifyDepose classifies the deposition Multi's error.
func classifyDepose(err error) deposeOutcome {
	switch {
	case err == nil:
		return deposeDone
	case errors.Is(err, zk.ErrNoNode):
		return deposeGone
	}
	return deposeFailed
}

// deposeDeadline is when a deposition made at now is judged wrong if the
// deposed session's member node is still there: a dead session's member
// node goes when ZooKeeper expires it, within the negotiated timeout
// (which may exceed ours) rounded up to a tick; twice the session and two
// seconds leave room for both.
func deposeDeadline(now time.Time, sessionTimeout time.Duration) time.Time {
	return now.Add(2*sessionTimeout + 2*time.Second)
}

// deposeVerdict is what a look at the deposed member's node says.
type deposeVerdict int

const (
	verdictPending deposeVerdict = iota // the deposed session still holds it; look again
	verdictRight                        // the session is gone: the process was gone (the evidence was right)
	verdictWrong                        // still held at the deadline: the process was alive (an unneeded takeover)
)

// decideDeposeVerdict judges a deposition from one lookup of the deposed
// member's node: seen (it exists) and owner (its ephemeral owner), at now,
// against the deposed candidate's session and the deadline
// (deposeDeadline). A node gone, or held by another session (the member
// restarted), means the deposed session ended: right. Still held by it
// after the deadline: wrong.
func decideDeposeVerdict(seen bool, owner int64, target livenessTarget, now, deadline time.Time) deposeVerdict {
	switch {
	case !seen || owner != target.Session:
		return verdictRight
	case now.After(deadline):
		return verdictWrong
	}
	return verdictPending
}

// depose deletes the target's candidate node, exactly the one observed
// (deposeOps; NoNode: already gone), so that the line moves on now
// instead of at the session's expiry. Every deposition is counted and
// logged with its evidence; then the member node of the deposed session
// is looked up until decideDeposeVerdict decides: still there twice the
// session timeout later means the process was alive after all (counted
// as wrong).
func (r *Replica) depose(ctx context.Context, target livenessTarget, evidence string) {
	path := r.room.Path(electionDir, target.Node)
	dctx, cancel := context.WithTimeout(ctx, electionZKWait)
	err := r.bounded(dctx, func() error {
		_, err := r.conn.Multi(deposeOps(path)...)
		return err
	})
	cancel()
	switch classifyDepose(err) {
	case deposeDone:
	case deposeGone:
		r.log.Debug("liveness: the primary's candidate is already gone", "primary", target.ID, "node", target.Node)
		return
	default:
		r.log.Warn("liveness: deposing the primary's candidate failed; the session timeout will", "primary", target.ID, "node", target.Node, "err", err)
		return
	}
	r.live.deposed.Add(1)
	r.live.lastEvidence.Store(&evidence)
	r.log.Warn("liveness: the primary's process is gone; deposed its candidate so the next takes over now",
		"primary", target.ID, "node", target.Node, "session", fmt.Sprintf("0x%x", target.Session), "evidence", evidence)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		deadline := deposeDeadline(time.Now(), r.cfg.SessionTimeout)
		for {
			select {
			case <-r.stopc:
				return
			case <-time.After(500 * time.Millisecond):
			}
			cctx, cancel := context.WithTimeout(r.bgCtx, electionZKWait)
			var st *zk.Stat
			err := r.bounded(cctx, func() error {
				var err error
				_, st, err = r.conn.Exists(r.room.Path(membersDir, target.ID))
				return err
			})
			cancel()
			if err != nil {
				continue // no verdict this time
			}
			var owner int64
			if st != nil {
				owner = st.EphemeralOwner
			}
			switch decideDeposeVerdict(st != nil, owner, target, time.Now(), deadline) {
			case verdictRight:
				return // the session is gone: the evidence was right
			case verdictWrong:
				r.live.deposedWrong.Add(1)
				r.log.Warn("liveness: the deposed primary's session is still live twice its timeout later: the evidence was wrong (an unneeded takeover; its writes were fenced)",
					"primary", target.ID, "session", fmt.Sprintf("0x%x", target.Session), "evidence", evidence)
				return
			}
		}
	}()
}

// newLivenessClients returns the stream client (no overall timeout: the
// stream lasts as long as the primary leads; the dial is bounded) and the
// probe client (bounded by its context).
func newLivenessClients() (stream, probe *http.Client) {
	dialer := &net.Dialer{Timeout: livenessDial}
	// Never follow a redirect: the evidence must be about the address the
	// candidate published.
	noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	stream = &http.Client{CheckRedirect: noRedirect, Transport: &http.Transport{
		DialContext:           dialer.DialContext,
		TLSHandshakeTimeout:   2 * time.Second,
		ResponseHeaderTimeout: 2 * time.Second,
		DisableKeepAlives:     true,
		DisableCompression:    true,
	}}
	probe = &http.Client{CheckRedirect: noRedirect, Transport: &http.Transport{
		DialContext:         dialer.DialContext,
		TLSHandshakeTimeout: livenessDial,
		DisableKeepAlives:   true,
	}}
	return stream, probe
}
