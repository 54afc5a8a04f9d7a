package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync/atomic"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/logroom"
	discovery "github.com/roomlog/roomlog/recipe/membership"
	"github.com/roomlog/roomlog/zkx"
)

// membership is this replica's side of /<room>/members, built on the
// membership recipe (package recipe/membership): a Registration keeps our
// ephemeral node (re-created with our latest data after a session expiry
// or a deletion, its writes checked against the node's version), and a
// Watcher with data watches keeps the view of every member, diffing each
// listing against the previous one so no join, leave or data change is
// missed. Only children acceptMember accepts are members; the others are
// reported as foreign (Watcher.Foreign) and ignored. The run loop owns
// its fields (published, last, known); its writes to ZooKeeper (update,
// resign) run in the loop's ZooKeeper worker, one job at a time, and the
// loop records what was written when the job's result arrives. The
// recipe's goroutines only wake the loop (changed).
type membership struct {
	client *logroom.Client
	dir    string // /<base>/<room>/members
	id     string
	log    *slog.Logger

	reg *discovery.Registration // nil until join succeeded
	// w is nil until join succeeded; Status reads it (foreign) from other
	// goroutines.
	w atomic.Pointer[discovery.Watcher]
	// changed: the watcher's view moved (a join, a leave, new data).
	changed zkx.Signal

	// published is the data last written to our node (acknowledged by the
	// registration), and last the member data it encodes (the loop
	// compares against it every tick).
	published []byte
	last      memberData
	// known caches member data by member id (= node name), as of the last
	// reload of the watcher's view.
	known map[string]memberData
}

func newMembership(client *logroom.Client, dir, id string, log *slog.Logger) *membership {
	return &membership{client: client, dir: dir, id: id, log: log, changed: zkx.NewSignal(), known: map[string]memberData{}}
}

func (m *membership) path() string { return m.dir + "/" + m.id }

// join creates our member node with d, waiting up to wait for a node of
// our id held by another session to disappear (our own previous
// incarnation, killed less than a session timeout ago). A node still held
// after that belongs to a live process: ErrDuplicateID; so is, at once, a
// persistent node of our id. It then starts watching the members.
func (m *membership) join(ctx context.Context, d memberData, wait time.Duration) error {
	d.V = formatVersion1
	data := encode(d)
	jctx, cancel := context.WithTimeout(ctx, wait)
	reg, err := discovery.Join(jctx, m.client, m.dir, m.id, data, discovery.JoinOptions{Logger: m.log, KeepDir: true})
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, discovery.ErrIDInUse) {
			return fmt.Errorf("%w: %q (%v)", ErrDuplicateID, m.id, err)
		}
		return err
	}
	notify := func(discovery.Member) { m.changed.Notify() }
	w, err := discovery.Watch(ctx, m.client, m.dir, discovery.WatchOptions{
		OnJoin:   notify,
		OnLeave:  notify,
		OnUpdate: func(_, _ discovery.Member) { m.changed.Notify() },
		Accept: func(mb discovery.Member) error {
			_, err := acceptMember(mb.ID, mb.Data, mb.Session)
			return err
		},
		Logger: m.log,
	})
	if err != nil {
		lctx, lcancel := context.WithTimeout(context.Background(), time.Second)
		_ = reg.Leave(lctx)
		lcancel()
		return fmt.Errorf("watch members: %w", err)
	}
	m.reg = reg
	m.w.Store(w)
	m.published, m.last = data, d
	m.reload()
	return nil
}

// update writes d into our node (the registration's keeper writes it;
// update waits at most until ctx ends, after which the keeper still writes
// it unless a later update replaces it). It only does the I/O (the loop's
// ZooKeeper worker calls it); record notes what was written, on the loop.
func (m *membership) update(ctx context.Context, d memberData) ([]byte, error) {
	if m.reg == nil {
		return nil, errors.New("membership: not joined")
	}
	d.V = formatVersion1
	data := encode(d)
	if err := m.reg.Update(ctx, data); err != nil {
		return nil, err
	}
	return data, nil
}

// record notes data (encoding d) as the last data written to our node.
func (m *membership) record(data []byte, d memberData) {
	d.V = formatVersion1
	m.published, m.last = data, d
}

// heldElsewhere returns the registration's failure to re-create our node
// when it is because another session holds our id (or a persistent node
// sits at our path: persistent), nil otherwise.
func (m *membership) heldElsewhere() (persistent bool, err error) {
	if m.reg == nil {
		return false, nil
	}
	if err := m.reg.Err(); errors.Is(err, discovery.ErrIDInUse) {
		return errors.Is(err, discovery.ErrPersistentNode), err
	}
	return false, nil
}

// reload copies the watcher's view into known.
func (m *membership) reload() {
	w := m.w.Load()
	if w == nil {
		return
	}
	known := map[string]memberData{}
	for _, mb := range w.Members() {
		d, err := acceptMember(mb.ID, mb.Data, mb.Session)
		if err != nil {
			continue // the watcher accepted it: cannot happen
		}
		known[mb.ID] = d
	}
	m.known = known
}

// foreign lists the children of members/ that do not count.
func (m *membership) foreign() []ForeignZnode {
	if w := m.w.Load(); w != nil {
		return w.Foreign()
	}
	return nil
}

// resign deletes our node and stops keeping it (a failed replica, Close).
// After the first call the node is no longer re-created; a call whose
// delete failed is retried by the next (nil once the node is gone).
func (m *membership) resign(ctx context.Context) error {
	if m.reg == nil {
		return nil
	}
	return m.reg.Leave(ctx)
}

// close resigns (bounded by ctx) and stops the watcher.
func (m *membership) close(ctx context.Context) error {
	err := m.resign(ctx)
	if w := m.w.Load(); w != nil {
		w.Close()
	}
	return err
}

// snapshot returns the cached members sorted by id.
func (m *membership) snapshot() []MemberStatus {
	out := make([]MemberStatus, 0, len(m.known))
	for _, d := range m.known {
		out = append(out, d.memberStatus())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// readMembers reads every member's data afresh (no watches): used where a
// stale cache would be unsafe or slow (deletion, bootstrap source choice).
// Only accepted members are returned (by id); foreign children are skipped
// (the run loop's membership view reports them).
func readMembers(conn *zk.Conn, dir string) (map[string]memberData, error) {
	names, _, err := conn.Children(dir)
	if err != nil {
		return nil, fmt.Errorf("list members: %w", err)
	}
	out := make(map[string]memberData, len(names))
	for _, n := range names {
		b, st, err := conn.Get(dir + "/" + n)
		if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrNoAuth) {
			continue // gone, or foreign (unreadable)
		}
		if err != nil {
			return nil, fmt.Errorf("read member %s: %w", n, err)
		}
		d, err := acceptMember(n, b, st.EphemeralOwner)
		if err != nil {
			continue
		}
		out[n] = d
	}
	return out, nil
}
