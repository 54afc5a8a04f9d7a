package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"sync/atomic"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/recipe/internal/zkr"
	"github.com/roomlog/roomlog/zkx"
)

// LineConfig configures a Line.
type LineConfig struct {
	// Client is the ZooKeeper client (required): the line's nodes live in
	// its session and carry its ACL.
	Client *zkx.Client
	// Dir is the election's directory (required); missing components are
	// created (persistent).
	Dir string
	// ID names the candidate (required, a valid znode name).
	ID string
	// Data is published with the candidacy, at most MaxDataBytes.
	Data []byte
	// GUID identifies this candidate's nodes (32 lowercase hex). Empty: a
	// random one, which no other process can hold, so a node carrying it
	// in another session is foreign (a forgery, or an expired session's
	// node a lagging server still shows). A configured GUID may name a
	// node of a previous process of ours, still held by its session: that
	// one is a candidate like any other until its session ends.
	GUID string
	// Accept, when set, is an extra check a candidate must pass to count
	// (for instance that Data parses); its error is the foreign reason.
	Accept func(Candidate) error
	// Logger receives the line's logs (nil: discard).
	Logger *slog.Logger
	// KeepDir: Dir is never created by the line; a candidate create that
	// finds it missing fails with ErrDirGone (an owner that reports the
	// directory's disappearance, package replica, sets it and creates Dir
	// itself).
	KeepDir bool
}

// ErrDirGone: LineConfig.KeepDir is set and the election's directory is
// missing.
var ErrDirGone = errors.New("election: the election directory is missing")

// Line is one candidacy in an election's line, without a leadership
// policy: it holds at most one candidate node (created protected against
// a lost answer), reads the accepted candidates in line order, watches
// its predecessor, and goes to the back or leaves when asked. Participant
// is a Line plus a policy (the lowest leads, honouring designations); a
// caller with a policy of its own — package replica takes over a log with
// epochs and hands leadership over with its own transfer record — drives a
// Line directly. One goroutine owns a Line: it is not safe for concurrent
// use.
type Line struct {
	sess    *zkr.Session
	dir     string
	id      string
	guid    string
	random  bool // guid generated here (see LineConfig.GUID)
	data    []byte
	accept  func(Candidate) error
	log     *slog.Logger
	keepDir bool // LineConfig.KeepDir
	foreign *zkx.ForeignSet
	lister  *lister

	// mine is our node's name ("" = none).
	mine string
	// listedIn is the session of the last listing.
	listedIn int64
	// maybe: a create's outcome was unknown (connection loss, or a create
	// that landed after its caller gave up could not be deleted): look
	// for our guid before creating.
	maybe atomic.Bool
}

// Position is the line as one listing saw it.
type Position struct {
	// Candidates are the accepted candidates, lowest sequence first: the
	// first is the leader's (or the next leader's) place.
	Candidates []Candidate
	// Mine is the index of our node in Candidates, -1 when we hold none
	// (never entered, deleted by someone, or our session expired): Enter
	// again.
	Mine int
}

// Lowest returns the first candidate (ok false: the line is empty).
func (p Position) Lowest() (Candidate, bool) {
	if len(p.Candidates) == 0 {
		return Candidate{}, false
	}
	return p.Candidates[0], true
}

// First reports whether our node is the lowest.
func (p Position) First() bool { return p.Mine == 0 }

// NewLine validates cfg and returns a Line holding no node yet (Enter
// creates it). Close releases it.
func NewLine(cfg LineConfig) (*Line, error) {
	if err := errors.Join(validateCandidacy(cfg.Client, cfg.Dir, cfg.ID, cfg.Data, cfg.GUID)...); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("recipe", "election", "dir", cfg.Dir, "id", cfg.ID)
	return newLine(zkr.NewSession(cfg.Client), cfg, log), nil
}

// validateCandidacy reports every invalid field of a candidacy (NewLine's
// and Config.Validate's shared part).
func validateCandidacy(c *zkx.Client, dir, id string, data []byte, guid string) []error {
	var errs []error
	if c == nil {
		errs = append(errs, fmt.Errorf("%w: Client is nil", ErrBadConfig))
	}
	if err := zkr.ValidDir(dir); err != nil {
		errs = append(errs, fmt.Errorf("%w: Dir %q: %v", ErrBadConfig, dir, err))
	}
	if err := zkx.ValidName(id); err != nil {
		errs = append(errs, fmt.Errorf("%w: ID %q: %v", ErrBadConfig, id, err))
	}
	if len(data) > MaxDataBytes {
		errs = append(errs, fmt.Errorf("%w: Data is %d bytes, at most %d", ErrBadConfig, len(data), MaxDataBytes))
	}
	if guid != "" && !zkr.ValidGUID(guid) {
		errs = append(errs, fmt.Errorf("%w: GUID %q is not %d lowercase hex characters", ErrBadConfig, guid, zkr.GUIDLen))
	}
	return errs
}

// newLine builds a Line on sess (a Participant shares its own); cfg is
// valid.
func newLine(sess *zkr.Session, cfg LineConfig, log *slog.Logger) *Line {
	guid := cfg.GUID
	if guid == "" {
		guid = zkr.NewGUID()
	}
	l := &Line{
		sess: sess, dir: cfg.Dir, id: cfg.ID, guid: guid, random: cfg.GUID == "",
		data:    zkr.Encode(candidateData{V: formatV1, ID: cfg.ID, Data: cfg.Data}),
		accept:  cfg.Accept,
		log:     log,
		keepDir: cfg.KeepDir,
	}
	l.foreign = zkx.NewForeignSet(log, "election candidate")
	l.lister = newLister(l.sess, cfg.Dir, l.foreign)
	l.lister.check = l.check
	// A configured guid may already name a node of ours (a create whose
	// answer was lost before this Line existed): look first.
	l.maybe.Store(!l.random)
	l.listedIn = l.sess.ID()
	return l
}

// check is the line's acceptance beyond acceptCandidate: Accept, and a
// random guid of ours held by another session is not a candidate.
func (l *Line) check(c Candidate) string {
	if l.random && c.GUID == l.guid && c.Session != l.sess.ID() {
		return fmt.Sprintf("carries this candidate's guid but is held by session 0x%x, not ours (0x%x)", c.Session, l.sess.ID())
	}
	if l.accept != nil {
		if err := l.accept(c.clone()); err != nil {
			return err.Error()
		}
	}
	return ""
}

// ID returns the candidate's id.
func (l *Line) ID() string { return l.id }

// GUID returns the guid in every node name of this line.
func (l *Line) GUID() string { return l.guid }

// Node returns our node's name ("" when none, as far as the line knows).
func (l *Line) Node() string { return l.mine }

// Foreign returns the children of the directory the last listing refused.
func (l *Line) Foreign() []Foreign { return l.foreign.List() }

// Close releases the line's session subscription. It deletes nothing
// (Leave does); the nodes go with the session.
func (l *Line) Close() { l.sess.Close() }

// Enter makes sure we hold a candidate node: if none, it creates one at
// the back of the line (the directory is created when missing), protected
// against a lost answer (see the package doc).
func (l *Line) Enter(ctx context.Context) error {
	if l.mine != "" {
		return nil
	}
	name, err := l.create(ctx)
	if err != nil {
		return err
	}
	l.mine = name
	return nil
}

// Read lists the line. After a change of session it Syncs first (the new
// session may read from a server behind what we saw). Nodes carrying our
// guid in our session other than ours are deleted (we hold exactly one).
// When our node is not in the listing (or not in our session), the line
// forgets it: Position.Mine is -1 and Enter creates a new one.
func (l *Line) Read(ctx context.Context) (Position, error) {
	if sid := l.sess.ID(); sid != l.listedIn {
		if err := zkx.Sync(ctx, l.sess, l.dir); err != nil && !errors.Is(err, zk.ErrNoNode) {
			return Position{}, err
		}
		l.listedIn = sid
	}
	cands, err := l.list(ctx)
	if err != nil {
		return Position{}, err
	}
	pos := Position{Candidates: cands, Mine: -1}
	for i, c := range cands {
		if c.Node == l.mine && c.Session == l.sess.ID() {
			pos.Mine = i
		}
	}
	if pos.Mine < 0 && l.mine != "" {
		l.log.Info("election: our candidate node is gone (session expired or deleted)", "node", l.mine)
		l.mine = ""
	}
	return pos, nil
}

// WatchPredecessor arms a watch on the candidate just before ours in pos
// (only that one: no herd effect), or on the directory's children when
// that candidate is Unreadable (ZooKeeper fires no watch on a node the
// client may not read). ok is false when it is already gone
// (read again), or when we are first or hold no node (nothing to watch).
func (l *Line) WatchPredecessor(ctx context.Context, pos Position) (<-chan zk.Event, bool, error) {
	if pos.Mine <= 0 {
		return nil, false, nil
	}
	pred := pos.Candidates[pos.Mine-1]
	if pred.Unreadable {
		// ZooKeeper fires no watch of ours on a node we may not read:
		// watch the directory's children instead.
		names, ch, err := zkx.ChildrenW(ctx, l.sess, l.dir)
		if err != nil {
			return nil, false, fmt.Errorf("watch the candidates before unreadable %s: %w", pred.Node, err)
		}
		return ch, slices.Contains(names, pred.Node), nil
	}
	ok, _, ch, err := zkx.ExistsW(ctx, l.sess, l.dir+"/"+pred.Node)
	if err != nil {
		return nil, false, fmt.Errorf("watch predecessor %s: %w", pred.Node, err)
	}
	return ch, ok, nil
}

// Requeue moves us to the back of the line: our node is deleted, then a
// new one created. If the delete fails, the line forgets the node anyway
// (so we never lead from the old place again) and the next Read deletes it
// (it carries our guid in our session); the error is returned.
func (l *Line) Requeue(ctx context.Context) error {
	if l.mine != "" {
		name := l.mine
		l.mine = ""
		if err := l.deleteNode(ctx, name); err != nil {
			l.log.Info("election: requeue could not delete our node yet; the next listing will", "node", name, "err", err)
			return err
		}
	}
	return l.Enter(ctx)
}

// Leave deletes our node, and any stray node of ours when a create's
// outcome was unknown, bounded by ctx (what remains goes with the
// session). The line may Enter again later.
func (l *Line) Leave(ctx context.Context) error {
	var errs []error
	if l.mine != "" {
		if err := l.deleteNode(ctx, l.mine); err != nil {
			errs = append(errs, err)
		} else {
			l.mine = ""
		}
	}
	if l.maybe.Load() {
		if err := l.sweep(ctx); err != nil {
			errs = append(errs, err)
		} else {
			l.maybe.Store(false)
		}
	}
	if err := errors.Join(errs...); err != nil && !errors.Is(err, zkr.ErrClientClosed) {
		return fmt.Errorf("election: leave: %w", err)
	}
	return nil
}

// deleteNode deletes one of our nodes (gone already is fine).
func (l *Line) deleteNode(ctx context.Context, name string) error {
	err := zkr.Retry0(ctx, l.sess, func() error { return l.sess.Conn().Delete(l.dir+"/"+name, -1) })
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return fmt.Errorf("delete candidate %s: %w", name, err)
	}
	return nil
}

// list reads the accepted candidates. Nodes carrying our guid other than
// mine in our session (a create whose answer was lost, a create that ran
// in a new session after an expiry) are deleted: we hold exactly one.
func (l *Line) list(ctx context.Context) ([]Candidate, error) {
	names, err := zkx.Children(ctx, l.sess, l.dir)
	if err != nil {
		return nil, fmt.Errorf("list candidates: %w", err)
	}
	cands, err := l.lister.read(ctx, names)
	if err != nil {
		return nil, err
	}
	out := cands[:0:0]
	for _, c := range cands {
		// A node with our (configured) guid held by another session is
		// not ours: it is a candidate like any other.
		if c.GUID == l.guid && c.Node != l.mine && c.Session == l.sess.ID() {
			l.log.Info("election: deleting a duplicate node of ours", "node", c.Node)
			if err := l.deleteNode(ctx, c.Node); err != nil {
				return nil, err
			}
			continue
		}
		out = append(out, c)
	}
	return out, nil
}

// create makes our candidate node, protected against a lost answer:
// while a create's outcome is unknown, it first looks for a node carrying
// our guid in our session and adopts it instead of creating a second one.
func (l *Line) create(ctx context.Context) (string, error) {
	prefix := l.dir + "/" + zkr.SeqPrefix(candidatePrefix, l.guid)
	var bo zkx.Backoff
	for {
		if l.maybe.Load() {
			name, err := l.adopt(ctx)
			if err != nil {
				return "", err
			}
			l.maybe.Store(false)
			if name != "" {
				l.log.Info("election: adopted our candidate node (its create's answer was lost)", "node", name)
				return name, nil
			}
		}
		created, err := zkr.Do(ctx, l.sess, func() (string, error) {
			return l.sess.Conn().Create(prefix, l.data, zk.FlagEphemeral|zk.FlagSequence, l.sess.ACL())
		}, func(created string, err error) {
			// Landed, or may have, after its caller gave up: nobody
			// holds it (a Join that failed lists the line never again),
			// so undo it now, as the lock and membership do.
			if err == nil {
				derr := l.sess.Conn().Delete(created, -1)
				if derr == nil || errors.Is(derr, zk.ErrNoNode) {
					l.log.Info("election: deleted a candidate node whose create landed after its caller gave up", "node", path.Base(created))
					return
				}
			}
			if err == nil || zkx.IsConnLoss(err) {
				l.maybe.Store(true) // the next Enter, Read or Leave finds it
			}
		})
		if err == nil {
			l.log.Debug("election: candidate created", "node", path.Base(created))
			return path.Base(created), nil
		}
		if errors.Is(err, zk.ErrNoNode) && l.keepDir {
			return "", fmt.Errorf("%w: %s", ErrDirGone, l.dir)
		}
		if errors.Is(err, zk.ErrNoNode) {
			// The directory is missing (first use, or deleted): create it.
			if err := zkx.EnsurePath(ctx, l.sess, l.dir); err != nil {
				return "", err
			}
			continue
		}
		if !zkx.IsConnLoss(err) {
			if ctx.Err() != nil {
				// Its fate is unknown (zkr.Do's callback marks maybe if
				// it lands).
				l.maybe.Store(true)
			}
			return "", fmt.Errorf("create candidate: %w", err)
		}
		l.maybe.Store(true)
		l.log.Info("election: connection lost during create; looking for our node", "err", err)
		if werr := bo.Wait(ctx); werr != nil {
			return "", fmt.Errorf("%w (last error: %w)", werr, err)
		}
	}
}

// adopt returns the lowest node carrying our guid held by our session
// ("" if none), deleting the others of ours.
func (l *Line) adopt(ctx context.Context) (string, error) {
	if err := zkx.Sync(ctx, l.sess, l.dir); err != nil {
		if errors.Is(err, zk.ErrNoNode) {
			return "", nil // no directory: no node of ours
		}
		return "", err
	}
	names, err := zkx.Children(ctx, l.sess, l.dir)
	if errors.Is(err, zk.ErrNoNode) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	cands, err := l.lister.read(ctx, names)
	if err != nil {
		return "", err
	}
	kept := ""
	for _, c := range cands {
		if c.GUID != l.guid || c.Session != l.sess.ID() {
			continue // not ours (see list)
		}
		if kept == "" {
			kept = c.Node
			continue
		}
		if err := l.deleteNode(ctx, c.Node); err != nil {
			return "", err
		}
	}
	return kept, nil
}

// sweep deletes every node carrying our guid held by our session.
func (l *Line) sweep(ctx context.Context) error {
	if err := zkx.Sync(ctx, l.sess, l.dir); err != nil {
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		return err
	}
	names, err := zkx.Children(ctx, l.sess, l.dir)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, n := range names {
		sn, err := zkr.ParseSeqNode(candidatePrefix, n)
		if err != nil || sn.GUID != l.guid {
			continue
		}
		ok, st, err := zkx.Exists(ctx, l.sess, l.dir+"/"+n)
		if err != nil {
			return err
		}
		if ok && st.EphemeralOwner == l.sess.ID() {
			if err := l.deleteNode(ctx, n); err != nil {
				return err
			}
		}
	}
	return nil
}

// ReadLine reads dir's line once, creating and watching nothing: the
// accepted candidates in line order, and the children that do not count
// with why, classified as a Line with the same accept classifies them (a
// tool's view of an election). A missing directory is an empty line.
// Connection losses are retried until ctx ends.
func ReadLine(ctx context.Context, c *zkx.Client, dir string, accept func(Candidate) error) ([]Candidate, []Foreign, error) {
	if c == nil {
		return nil, nil, fmt.Errorf("%w: Client is nil", ErrBadConfig)
	}
	if err := zkr.ValidDir(dir); err != nil {
		return nil, nil, fmt.Errorf("%w: Dir %q: %v", ErrBadConfig, dir, err)
	}
	sess := zkr.NewSession(c)
	defer sess.Close()
	foreign := zkx.NewForeignSet(slog.New(slog.DiscardHandler), "election candidate")
	l := newLister(sess, dir, foreign)
	if accept != nil {
		l.check = func(cd Candidate) string {
			if err := accept(cd.clone()); err != nil {
				return err.Error()
			}
			return ""
		}
	}
	names, err := zkx.Children(ctx, sess, dir)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("election: list %s: %w", dir, err)
	}
	cands, err := l.read(ctx, names)
	if err != nil {
		return nil, nil, fmt.Errorf("election: read %s: %w", dir, err)
	}
	return cands, foreign.List(), nil
}
