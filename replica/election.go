package replica

import (
	"context"
	"errors"
	"log/slog"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/logroom"
	elect "github.com/roomlog/roomlog/recipe/election"
)

// election is this replica's place in /<room>/election: a Line of the
// election recipe (package recipe/election), which owns the candidate
// format, the protected create, the line order and the predecessor watch.
// The replica brings its own policy (decideElection: takeover with epochs,
// transfers, requeue behind compaction). Open uses it before the loop
// starts; then only the loop's ZooKeeper worker does (evaluate, requeue,
// resign), one job at a time, and shutdown after the worker stopped.
// Nothing in it is safe for concurrent use but foreign (its set has a
// lock), which the loop reads.
//
// Our guid is random (one per Replica), so a node carrying it in another
// session is foreign; only candidates acceptCandidate accepts count (for
// the order, the predecessor watch, the primary's identity,
// isLiveCandidate, ...). Everything else is reported as foreign and
// otherwise ignored: never watched, adopted or deleted.
//
// An observer's election (Config.Observer) never holds a candidate: ensure
// and requeue do nothing and evaluate refuses (errObserver), whatever path
// asks (Open, the loop, a requeue action), so no path puts an observer in
// the line. It keeps the line only to resign and close like any member.
type election struct {
	line     *elect.Line
	observer bool // Config.Observer (set by newLoopState, before any use)
}

// errObserver: an observer's election was asked to evaluate (it never
// holds a candidate).
var errObserver = errors.New("election: an observer holds no candidate")

func newElection(client *logroom.Client, dir, id, addr string, log *slog.Logger) (*election, error) {
	line, err := elect.NewLine(elect.LineConfig{
		Client: client, Dir: dir, ID: id, Data: []byte(addr), Accept: acceptCandidate, Logger: log,
		KeepDir: true, // a room that vanished is reported, never re-created (lost.go)
	})
	if err != nil {
		return nil, err
	}
	return &election{line: line}, nil
}

// acceptCandidate is the replica's check on a candidate the recipe
// accepted (a candidate name, ephemeral, data of format v1 with a valid
// id): its data is the member's advertised address, which must parse.
//
// A candidate this client may not read (the recipe counts it on its Stat,
// Unreadable) is foreign here: every member of a room uses the same
// credentials, and a node of another identity cannot write the room (its
// ACL), so it must not hold up the election either.
func acceptCandidate(c elect.Candidate) error {
	if c.Unreadable {
		return errors.New(viewUnreadable)
	}
	return checkPeerIdentity(c.ID, string(c.Data))
}

// electionView is the result of one evaluation.
type electionView struct {
	cands  []elect.Candidate // line order
	mine   int               // index of our node in cands
	leader bool              // we are the lowest candidate
	// watch fires when our predecessor changes (nil when leader).
	watch <-chan zk.Event
}

func (v electionView) lowest() (elect.Candidate, bool) {
	if len(v.cands) == 0 {
		return elect.Candidate{}, false
	}
	return v.cands[0], true
}

// ensure makes sure we hold a candidate node (protected create); an
// observer holds none.
func (e *election) ensure(ctx context.Context) error {
	if e.observer {
		return nil
	}
	return e.line.Enter(ctx)
}

// evaluate ensures our candidacy and reports our position. When we are not
// the lowest it watches only our predecessor (no herd effect).
func (e *election) evaluate(ctx context.Context) (electionView, error) {
	if e.observer {
		return electionView{}, errObserver
	}
	for attempt := 0; attempt < 5; attempt++ {
		if err := e.line.Enter(ctx); err != nil {
			return electionView{}, err
		}
		pos, err := e.line.Read(ctx)
		if err != nil {
			return electionView{}, err
		}
		if pos.Mine < 0 {
			continue // ours vanished (deleted under us, or the session expired): create again
		}
		v := electionView{cands: pos.Candidates, mine: pos.Mine, leader: pos.First()}
		if v.leader {
			return v, nil
		}
		ch, ok, err := e.line.WatchPredecessor(ctx, pos)
		if err != nil {
			return electionView{}, err
		}
		if !ok {
			continue // predecessor left between list and watch: re-list
		}
		v.watch = ch
		return v, nil
	}
	return electionView{}, errors.New("election: candidates kept changing; retrying")
}

// requeue moves us to the back of the line: delete our node, create anew
// (a failed delete keeps our node and place; the caller retries). An
// observer is in no line.
func (e *election) requeue(ctx context.Context) error {
	if e.observer {
		return nil
	}
	return e.line.Requeue(ctx)
}

// resign deletes our candidate node (and strays of ours when a create's
// fate was unknown); a failed delete is retried by the next call.
func (e *election) resign(ctx context.Context) error { return e.line.Leave(ctx) }

// foreign lists the children of election/ the last listing refused.
func (e *election) foreign() []ForeignZnode { return e.line.Foreign() }

// close releases the line (after resign; nodes left go with the session).
func (e *election) close() { e.line.Close() }
