package replica

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/roomlog/roomlog/archive"
	"github.com/roomlog/roomlog/internal/infra/faultnet"
	"github.com/roomlog/roomlog/internal/simzk"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/store"
	"github.com/stretchr/testify/require"
)

// The whole-replica simulation: real replicas (Open, the loop and its
// workers, the election, logroom's writer and readers, checkpoints served
// and fetched over HTTP, the liveness stream) run in one process against
// simzk, an in-memory ZooKeeper that speaks the wire protocol, with faults
// drawn from a seed: lost requests and replies, dropped connections,
// expired sessions, partitions that hold bytes, crashes and restarts,
// members wiped and re-bootstrapped, transfers, step-downs, checkpoints.
// Clients propose unique entries through ProposeRequest and record what
// was acknowledged; the checks are DESIGN.md's:
//
//   - nothing acknowledged is lost: after the faults heal, every member
//     holds every acknowledged entry at its acknowledged index;
//   - one entry per index: no two acknowledgements name the same index
//     with different entries;
//   - members agree: equal applied indexes have equal run hashes;
//   - one primary: no two members act as primary of the room for longer
//     than the session timeout (plus slack for a loaded machine);
//   - no member fails in a run where ZooKeeper loses nothing.
//
// Unlike the core's simulation (sim_test.go) this one is not replayable
// step by step: goroutines interleave as the Go scheduler decides. The
// seed fixes the fault schedule and the clients' choices; a failure
// prints the seed, the faults as they happened and the members' logs.
var (
	simRepSeeds     = flag.Int("simrep.seeds", 2, "TestSimulationReplicas: seeds to run")
	simRepLossSeeds = flag.Int("simrep.lossseeds", 0, "TestSimulationReplicasLoseTheRoom: seeds 1..N (0: seed 3 only)")
	simRepSeed      = flag.Uint64("simrep.seed", 0, "TestSimulationReplicas: run this seed only")
	simRepDur       = flag.Duration("simrep.dur", 4*time.Second, "TestSimulationReplicas: how long faults run per seed")

	simRepLost         = flag.Float64("simrep.lost", 0, "TestSimulationReplicas: share of ZooKeeper writes whose reply is lost (0: 2 %)")
	simRepPlantedSeeds = flag.Int("simrep.planted", 3, "TestSimulationReplicasFindsPlantedBugs: seeds to try per bug")
)

// TestSimulationReplicasLoseTheRoom: ZooKeeper restored from an older
// copy under live replicas, then re-seeded (runLoss).
func TestSimulationReplicasLoseTheRoom(t *testing.T) {
	if testing.Short() {
		t.Skip("the whole-replica simulation runs real replicas for seconds")
	}
	// Seed 3 by default: ZooKeeper restored from the older copy, and the
	// re-seed leaves a data dir out. Odd seeds restore, even ones wipe;
	// every third leaves the least advanced member's data dir out.
	first, last := uint64(3), uint64(3)
	if *simRepLossSeeds > 0 {
		first, last = 1, uint64(*simRepLossSeeds)
	}
	if *simRepSeed != 0 {
		first, last = *simRepSeed, *simRepSeed
	}
	for seed := first; seed <= last; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			s := newRepSim(t, seed, repSimOptions{lostReplies: *simRepLost})
			if msg := s.runLoss(*simRepDur / 2); msg != "" {
				t.Fatal(msg)
			}
		})
	}
}

func TestSimulationReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("the whole-replica simulation runs real replicas for seconds")
	}
	first, last := uint64(1), uint64(*simRepSeeds)
	if *simRepSeed != 0 {
		first, last = *simRepSeed, *simRepSeed
	}
	for seed := first; seed <= last; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			s := newRepSim(t, seed, repSimOptions{lostReplies: *simRepLost})
			if msg := s.run(*simRepDur); msg != "" {
				t.Fatal(msg)
			}
		})
	}
}

type repSimOptions struct {
	members int         // default 3
	bugs    plantedBugs // planted in every member
	// lostReplies is the share of ZooKeeper writes whose reply is lost
	// while faults run (default 2 %; as many requests are lost before
	// they apply, at most 1 %).
	lostReplies float64
	// seedLowest plants a wrong re-seed (ReseedConfig.seedLowest).
	seedLowest bool
}

type repSim struct {
	t    testing.TB
	seed uint64
	opts repSimOptions
	srv  *simzk.Server
	room string
	root string
	st   time.Duration // session timeout

	// Separate sources, so that one's draws do not move another's: the
	// fault loop's (one goroutine), the lost requests' (simzk's
	// goroutines; guarded by zmu) and each client's (its own goroutine).
	frng *rand.Rand
	zmu  sync.Mutex
	zrng *rand.Rand

	mu      sync.Mutex // guards the fields below
	members []*repMember
	acked   map[uint64]string // index → entry acknowledged there
	// notSent are entries every attempt of which was answered "not
	// committed" (ErrNotPrimary, ErrQueueFull, ErrFenced): none may be
	// applied anywhere.
	notSent  map[string]error
	trace    []string
	failures []string
	dropping bool // faults on ZooKeeper requests are on
	lossy    bool // ZooKeeper lost the room: members fail, as they must
	counts   map[string]int
	entries  int // entries proposed: each client's entries are named by it

	logs *syncBuffer
	t0   time.Time
	// arch is the room's archive (even seeds; nil otherwise): every
	// sealed channel and checkpoint is copied there before deletion.
	arch archive.Archive
	// op is the operator's own ZooKeeper session (operator requests).
	op *logroom.Client
}

type repMember struct {
	id  string
	dir string
	// px is the member's network path to ZooKeeper (every session it
	// opens, its cut-off probes' too): a partition holds its bytes.
	px *faultnet.Proxy
	// r is nil while the member is down. Guarded by repSim.mu; the
	// replica's own methods are called outside it.
	r    *Replica
	down bool
}

// syncBuffer collects the members' logs for a failure report.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	lines := strings.Split(b.buf.String(), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func newRepSim(t testing.TB, seed uint64, opts repSimOptions) *repSim {
	if opts.members == 0 {
		opts.members = 3
	}
	if opts.lostReplies == 0 {
		opts.lostReplies = 0.02
	}
	s := &repSim{
		t: t, seed: seed, opts: opts,
		room:    fmt.Sprintf("sim%d", seed),
		root:    t.TempDir(),
		st:      1500 * time.Millisecond,
		frng:    rand.New(rand.NewPCG(seed, 0x5eed)),
		zrng:    rand.New(rand.NewPCG(seed, 0x2c)),
		acked:   map[uint64]string{},
		notSent: map[string]error{},
		counts:  map[string]int{},
		logs:    &syncBuffer{},
		t0:      time.Now(),
	}
	srv, err := simzk.Start(simzk.Options{
		Tick:      100 * time.Millisecond,
		Intercept: s.intercept,
	})
	if err != nil {
		t.Fatalf("start simzk: %v", err)
	}
	s.srv = srv
	t.Cleanup(srv.Close)
	if seed%2 == 0 {
		d, err := archive.OpenDir(filepath.Join(s.root, "archive"))
		if err != nil {
			t.Fatalf("archive: %v", err)
		}
		s.arch = d
	}
	for i := 0; i < opts.members; i++ {
		id := fmt.Sprintf("m%d", i)
		px, err := faultnet.New(faultnet.Config{Targets: []string{srv.Addr()}, Seed: seed})
		if err != nil {
			t.Fatalf("proxy: %v", err)
		}
		t.Cleanup(func() { _ = px.Close() })
		s.members = append(s.members, &repMember{id: id, dir: filepath.Join(s.root, id), px: px, down: true})
	}
	return s
}

// intn and float draw from the fault loop's source (its goroutine only).
func (s *repSim) intn(n int) int { return s.frng.IntN(n) }
func (s *repSim) float() float64 { return s.frng.Float64() }

func (s *repSim) logf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.trace = append(s.trace, fmt.Sprintf("%7.3fs ", time.Since(s.t0).Seconds())+fmt.Sprintf(format, args...))
}

func (s *repSim) count(what string) {
	s.mu.Lock()
	s.counts[what]++
	s.mu.Unlock()
}

func (s *repSim) violation(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.mu.Lock()
	s.failures = append(s.failures, msg)
	s.mu.Unlock()
	s.logf("VIOLATION: %s", msg)
}

// intercept loses ZooKeeper writes and their replies while faults run.
func (s *repSim) intercept(req simzk.Request) simzk.Fault {
	s.mu.Lock()
	on := s.dropping
	s.mu.Unlock()
	if !on {
		return simzk.None
	}
	switch req.Op {
	case "create", "delete", "setData", "multi":
	default:
		return simzk.None
	}
	s.zmu.Lock()
	p := s.zrng.Float64()
	s.zmu.Unlock()
	switch {
	case p < min(s.opts.lostReplies, 0.01):
		s.count("lost request")
		return simzk.DropBefore
	case p < min(s.opts.lostReplies, 0.01)+s.opts.lostReplies:
		s.count("lost reply")
		return simzk.DropAfter
	}
	return simzk.None
}

// simApplier writes entry e at key "e/<index>", and its index at
// "v/<entry>", and answers with its index.
type simApplier struct{}

func simEntryKey(index uint64) []byte { return fmt.Appendf(nil, "e/%020d", index) }
func simValueKey(entry string) []byte { return []byte("v/" + entry) }
func simDupKey(entry string) []byte   { return []byte("dup/" + entry) }

func (simApplier) Apply(b store.Batch, e store.Entry) ([]byte, error) {
	if err := b.Set(simEntryKey(e.Index), e.Data); err != nil {
		return nil, err
	}
	at := fmt.Appendf(nil, "%d", e.Index)
	if prev, err := b.Get(simValueKey(string(e.Data))); err == nil {
		// Applied before: a request applied twice (the request table
		// should have answered the retry with the original).
		if err := b.Set(simDupKey(string(e.Data)), fmt.Appendf(nil, "%s and %d", prev, e.Index)); err != nil {
			return nil, err
		}
	}
	if err := b.Set(simValueKey(string(e.Data)), at); err != nil {
		return nil, err
	}
	return at, nil
}

func (s *repSim) config(m *repMember) Config {
	log := slog.New(slog.NewTextHandler(s.logs, &slog.HandlerOptions{Level: slog.LevelInfo})).With("m", m.id)
	return Config{
		Servers:                []string{m.px.Addr()},
		AnyServer:              true,
		SessionTimeout:         s.st,
		Room:                   s.room,
		ID:                     m.id,
		DataDir:                m.dir,
		ListenAddr:             "127.0.0.1:0",
		Applier:                simApplier{},
		CheckpointEveryEntries: 400,
		KeepCheckpoints:        2,
		MemberUpdateInterval:   200 * time.Millisecond,
		Logger:                 log,
		Registerer:             prometheus.NewRegistry(),
		Archive:                s.arch,
		bugs:                   s.opts.bugs,
	}
}

// start opens m (bounded); a failure to open is retried by the fault loop.
func (s *repSim) start(m *repMember) {
	if err := s.open(m); err != nil {
		// Nothing in these runs makes a member unable to rejoin: its
		// previous process's nodes go with their session, and a room lost
		// is re-seeded before anyone opens.
		s.violation("%s: open: %v", m.id, err)
	}
}

// open opens m (bounded).
func (s *repSim) open(m *repMember) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := Open(ctx, s.config(m))
	if err != nil {
		return err
	}
	s.mu.Lock()
	m.r, m.down = r, false
	s.mu.Unlock()
	s.logf("%s: up (session %#x)", m.id, r.client.SessionID())
	return nil
}

// stop closes m. crash: its ZooKeeper sessions are held first, so nothing
// it does on the way down reaches ZooKeeper (a process killed), and it
// leaves its sessions to expire.
func (s *repSim) stop(m *repMember, crash bool) {
	s.mu.Lock()
	r := m.r
	m.r, m.down = nil, true
	s.mu.Unlock()
	if r == nil {
		return
	}
	s.mu.Lock()
	lossy := s.lossy
	s.mu.Unlock()
	if st := r.Status(); st.Role == RoleFailed && !lossy {
		s.violation("%s failed: %v", m.id, st.Err)
	}
	var held []int64
	if crash {
		held = s.sessionsOf(r)
		m.px.Blackhole()
	}
	done := make(chan error, 1)
	go func() { done <- r.Close() }()
	select {
	case err := <-done:
		if err != nil && !crash {
			s.logf("%s: close: %v", m.id, err)
		}
	case <-time.After(30 * time.Second):
		s.violation("%s: Close did not return within 30s", m.id)
	}
	if s.intn(2) == 0 {
		// The dead process's sessions end at once; else their ephemeral
		// nodes linger until the servers expire them, and a restart meets
		// its own old member node.
		for _, sid := range held {
			s.srv.Expire(sid)
		}
	}
	if crash {
		m.px.Heal()
	}
	s.logf("%s: down (crash=%v)", m.id, crash)
}

// sessionsOf returns the ZooKeeper sessions r holds (its main client's).
func (s *repSim) sessionsOf(r *Replica) []int64 {
	if sid := r.client.SessionID(); sid != 0 {
		return []int64{sid}
	}
	return nil
}

func (s *repSim) live() []*repMember {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*repMember
	for _, m := range s.members {
		if m.r != nil {
			out = append(out, m)
		}
	}
	return out
}

func (s *repSim) pick() (*repMember, *Replica) { return s.pickWith(s.frng) }

func (s *repSim) pickWith(rng *rand.Rand) (*repMember, *Replica) {
	l := s.live()
	if len(l) == 0 {
		return nil, nil
	}
	m := l[rng.IntN(len(l))]
	s.mu.Lock()
	defer s.mu.Unlock()
	return m, m.r
}

func (s *repSim) replicaOf(id string) *Replica {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.members {
		if m.id == id {
			return m.r
		}
	}
	return nil
}

// nextEntry numbers a new entry: unique across the clients of every load
// phase.
func (s *repSim) nextEntry() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.entries++
	return s.entries
}

// plantedFound: a run with a planted bug has its violation; waiting on
// would only make the test slower.
func (s *repSim) plantedFound() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return (s.opts.bugs != plantedBugs{} || s.opts.seedLowest) && len(s.failures) > 0
}

// ack records entry acknowledged at index.
func (s *repSim) ack(index uint64, entry string) {
	s.mu.Lock()
	prev, ok := s.acked[index]
	if !ok {
		s.acked[index] = entry
	}
	s.mu.Unlock()
	if ok && prev != entry {
		s.violation("two entries acknowledged at index %d: %q and %q", index, prev, entry)
	}
}

// client proposes unique entries until stop, each through ProposeRequest
// retried with its id on an unknown outcome.
func (s *repSim) client(c int, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(s.seed, uint64(c)+1))
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		entry := fmt.Sprintf("c%d-%d", c, s.nextEntry())
		id := NewRequestID()
		_, r := s.pickWith(rng)
		if r == nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		// maybe: an attempt may have committed the entry.
		maybe, acked := false, false
		var last error
		for try := 0; try < 4; try++ {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			res, err := r.ProposeRequest(ctx, id, []byte(entry))
			cancel()
			if err == nil {
				s.ack(res.Index, entry)
				s.count("acked")
				acked = true
				break
			}
			last = err
			s.count("err: " + simErrClass(err))
			if !errors.Is(err, ErrNotPrimary) && !errors.Is(err, ErrQueueFull) && !errors.Is(err, ErrFenced) {
				maybe = true
			}
			var np *NotPrimaryError
			if errors.As(err, &np) && np.PrimaryID != "" {
				if p := s.replicaOf(np.PrimaryID); p != nil {
					r = p
					continue
				}
			}
			if errors.Is(err, ErrClosed) || errors.Is(err, ErrNotPrimary) {
				time.Sleep(10 * time.Millisecond) // no primary known now: an election is under way
				break
			}
			s.count("unknown")
			time.Sleep(20 * time.Millisecond)
		}
		if !acked {
			time.Sleep(10 * time.Millisecond)
		}
		if !acked && !maybe && last != nil {
			s.mu.Lock()
			s.notSent[entry] = last
			s.mu.Unlock()
		}
	}
}

// watchPrimaries checks that no two members act as primary for long.
func (s *repSim) watchPrimaries(stop <-chan struct{}) {
	// A primary cut off leaves its role a session timeout after the cut
	// (the core's rule); the servers expire its session no earlier. Slack
	// for a loaded machine.
	grace := s.st + 1500*time.Millisecond
	var since time.Time
	for {
		select {
		case <-stop:
			return
		case <-time.After(20 * time.Millisecond):
		}
		var prim []string
		for _, m := range s.live() {
			s.mu.Lock()
			r := m.r
			s.mu.Unlock()
			if r != nil && r.Status().Role == RolePrimary {
				prim = append(prim, m.id)
			}
		}
		if len(prim) < 2 {
			since = time.Time{}
			continue
		}
		if since.IsZero() {
			since = time.Now()
		} else if time.Since(since) > grace {
			s.violation("members %v all act as primary for %v", prim, time.Since(since).Round(time.Millisecond))
			since = time.Time{}
		}
	}
}

// fault runs one fault drawn from the seed.
func (s *repSim) fault() {
	m, r := s.pick()
	p := s.intn(100)
	switch {
	case r == nil || p < 8:
		// Bring a member that is down back.
		for _, m := range s.members {
			s.mu.Lock()
			down := m.down
			s.mu.Unlock()
			if down {
				s.logf("%s: restart", m.id)
				s.start(m)
				return
			}
		}
	case p < 20:
		sid := r.client.SessionID()
		s.logf("%s: drop the connection of session %#x", m.id, sid)
		s.count("disconnect")
		s.srv.Disconnect(sid)
	case p < 28:
		s.logf("%s: reset every connection to ZooKeeper", m.id)
		s.count("reset")
		m.px.Reset()
	case p < 38:
		sid := r.client.SessionID()
		s.logf("%s: expire session %#x", m.id, sid)
		s.count("expire")
		s.srv.Expire(sid)
	case p < 50:
		d := time.Duration(float64(s.st) * (0.3 + 2*s.float()))
		s.logf("%s: partition from ZooKeeper for %v", m.id, d.Round(time.Millisecond))
		s.count("partition")
		m.px.Blackhole()
		time.AfterFunc(d, func() { m.px.Heal(); s.logf("%s: partition healed", m.id) })
	case p < 58:
		s.logf("%s: crash", m.id)
		s.count("crash")
		s.stop(m, true)
	case p < 62:
		if len(s.live()) < len(s.members) {
			return // never wipe what may be the last up-to-date copy
		}
		s.logf("%s: crash and lose the data directory", m.id)
		s.count("wipe")
		s.stop(m, true)
		if err := os.RemoveAll(m.dir); err != nil {
			s.violation("remove %s: %v", m.dir, err)
		}
	case p < 64:
		s.logf("%s: graceful close", m.id)
		s.count("close")
		s.stop(m, false)
	case p < 66:
		s.logf("%s: shutdown (a primary hands over first)", m.id)
		s.count("shutdown")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := r.Shutdown(ctx)
		cancel()
		s.logf("%s: shutdown: %v", m.id, err)
		s.stop(m, false)
	case p < 76:
		st := r.Status()
		if st.Role != RolePrimary {
			return
		}
		var to string
		for _, o := range st.Members {
			if o.ID != m.id && s.intn(2) == 0 {
				to = o.ID
			}
		}
		s.logf("%s: transfer leadership to %q", m.id, to)
		s.count("transfer")
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := r.TransferLeadership(ctx, to)
			s.logf("%s: transfer to %q: %v", m.id, to, err)
		}()
	case p < 80:
		if r.Status().Role != RolePrimary {
			return
		}
		s.logf("%s: step down", m.id)
		s.count("stepdown")
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			s.logf("%s: step down: %v", m.id, r.StepDown(ctx))
		}()
	case p < 84:
		lo, hi := r.roomVersions()
		v := lo + s.intn(hi-lo+1)
		s.logf("%s: room version target %d", m.id, v)
		s.count("room version")
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			s.logf("%s: room version %d: %v", m.id, v, r.SetRoomVersion(ctx, v))
		}()
	case p < 87:
		kind := RequestTransfer
		if s.intn(2) == 0 {
			kind = RequestCheckpoint
		}
		s.logf("operator: request %s", kind)
		s.count("operator " + kind)
		go s.operatorRequest(kind)
	case p < 92:
		s.count("checkpoint")
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := r.Checkpoint(ctx)
			s.logf("%s: checkpoint: %v", m.id, err)
		}()
	}
}

// run starts the members, runs clients and faults for d, heals, and
// checks. It returns "" or the failure report.
func (s *repSim) run(d time.Duration) string {
	s.startAll()
	stopLoad := s.load()
	s.faults(d)
	s.heal()
	s.awaitAcks(20, 20*time.Second, "the healed room")
	stopLoad()
	s.check()
	return s.report("TestSimulationReplicas")
}

func (s *repSim) startAll() {
	for _, m := range s.members {
		s.start(m)
	}
}

// load starts the clients and the primaries' watch; the func stops them.
func (s *repSim) load() (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for c := 0; c < 3; c++ {
		wg.Add(1)
		go func() { defer wg.Done(); s.client(c, done) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); s.watchPrimaries(done) }()
	return func() { close(done); wg.Wait() }
}

// faults runs faults drawn from the seed for d.
func (s *repSim) faults(d time.Duration) {
	s.mu.Lock()
	s.dropping = true
	s.mu.Unlock()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		time.Sleep(time.Duration(100+s.intn(300)) * time.Millisecond)
		s.fault()
	}
}

// heal ends the faults: no more lost requests or partitions; every
// member up.
func (s *repSim) heal() {
	s.mu.Lock()
	s.dropping = false
	s.mu.Unlock()
	for _, m := range s.members {
		m.px.Heal()
	}
	for _, m := range s.members {
		for try := 0; try < 3; try++ {
			s.mu.Lock()
			down := m.down
			s.mu.Unlock()
			if !down {
				break
			}
			s.start(m)
		}
	}
}

func (s *repSim) ackedCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts["acked"]
}

// awaitAcks lets the clients go on until n more proposals are
// acknowledged (a primary must be elected and serve), within d.
func (s *repSim) awaitAcks(n int, d time.Duration, what string) {
	before := s.ackedCount()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if s.ackedCount() >= before+n || s.plantedFound() {
			return
		}
	}
	s.violation("%s acknowledged %d proposals in %v (want %d)", what, s.ackedCount()-before, d, n)
}

// report returns "" or the failure report (the members' logs go to a
// file).
func (s *repSim) report(test string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.t.Logf("seed %d: %v, %d indexes acknowledged", s.seed, s.counts, len(s.acked))
	if len(s.failures) == 0 {
		return ""
	}
	full := "(not written)"
	if f, err := os.CreateTemp("", fmt.Sprintf("simrep-seed%d-*.log", s.seed)); err == nil {
		s.logs.mu.Lock()
		_, _ = f.Write(s.logs.buf.Bytes())
		s.logs.mu.Unlock()
		_ = f.Close()
		full = f.Name()
	}
	return fmt.Sprintf("whole-replica simulation failed (replay: go test ./replica -run %s -simrep.seed=%d):\n%s\n--- faults:\n%s\n--- logs (tail; all of them in %s):\n%s",
		test, s.seed, strings.Join(s.failures, "\n"), strings.Join(s.trace, "\n"), full, s.logs.tail(100))
}

// runLoss: faults for d; then ZooKeeper is restored from a copy taken
// before the last acknowledgements (odd seeds) or wiped (even seeds). Every member must refuse the room
// (fail with ErrRoomLost or ErrSessionRefused) and acknowledge nothing
// the copy lacks at an index it holds; then the operator's re-seed from
// the members' data dirs must bring the room back with everything that
// was acknowledged, and the room must serve again.
func (s *repSim) runLoss(d time.Duration) string {
	s.startAll()
	stopLoad := s.load()
	s.faults(d)
	s.heal()
	s.awaitAcks(10, 20*time.Second, "the healed room")
	snap := s.srv.Snapshot()
	s.logf("ZooKeeper's data copied (%d acknowledged so far)", s.ackedCount())
	s.awaitAcks(20, 20*time.Second, "the room after the copy")
	s.mu.Lock()
	s.lossy = true
	s.mu.Unlock()
	if s.seed%2 == 0 {
		// Its data lost altogether: ZooKeeper starts empty.
		s.srv.Wipe()
		s.logf("ZooKeeper wiped")
	} else {
		s.srv.Restore(snap)
		s.logf("ZooKeeper restored from the copy")
	}
	s.count("restore")
	// Every member must find the loss and stop serving the room.
	deadline := time.Now().Add(30 * time.Second)
	for _, m := range s.members {
		s.mu.Lock()
		r := m.r
		s.mu.Unlock()
		if r == nil {
			s.violation("%s is down after healing", m.id)
			continue
		}
		for r.Status().Role != RoleFailed && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		st := r.Status()
		switch {
		case st.Role != RoleFailed:
			s.violation("%s still %v (applied %d) 30s after ZooKeeper lost the room", m.id, st.Role, st.Applied)
		case !errors.Is(st.Err, ErrRoomLost) && !errors.Is(st.Err, ErrSessionRefused):
			s.violation("%s failed with %v, not ErrRoomLost or ErrSessionRefused", m.id, st.Err)
		default:
			s.logf("%s refuses the room: %v", m.id, st.Err)
		}
	}
	stopLoad()
	// The operator stops every member and re-seeds from their data dirs;
	// on every third seed it forgets the one that applied the least.
	var dirs []string
	var left *repMember
	if s.seed%3 == 0 {
		var least uint64
		for _, m := range s.members {
			s.mu.Lock()
			r := m.r
			s.mu.Unlock()
			if r != nil && (left == nil || r.Status().Applied < least) {
				left, least = m, r.Status().Applied
			}
		}
	}
	for _, m := range s.members {
		s.stop(m, false)
		if m != left {
			dirs = append(dirs, m.dir)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	res, err := Reseed(ctx, ReseedConfig{
		Servers: []string{s.srv.Addr()}, SessionTimeout: s.st, Room: s.room, DataDirs: dirs,
		Logger:     slog.New(slog.NewTextHandler(s.logs, &slog.HandlerOptions{Level: slog.LevelInfo})).With("m", "reseed"),
		seedLowest: s.opts.seedLowest,
	})
	cancel()
	if err != nil {
		s.violation("re-seed: %v", err)
		return s.report("TestSimulationReplicasLoseTheRoom")
	}
	s.logf("re-seeded from %s at %d (epoch %d)", res.From, res.Seed.Index, res.Epoch)
	s.mu.Lock()
	s.lossy = false
	s.mu.Unlock()
	for _, m := range s.members {
		if m != left {
			s.start(m)
			continue
		}
		// The data dir the re-seed did not check: adopted when it is at
		// the seed's position, else refused naming the re-seed, and the
		// operator moves it away so that the member bootstraps.
		err := s.open(m)
		switch {
		case err == nil:
			s.logf("%s: its data dir, left out of the re-seed, was adopted", m.id)
		case errors.Is(err, ErrWrongDataDir):
			s.logf("%s: refused, as it must be: %v", m.id, err)
			s.count("left out refused")
			if err := os.RemoveAll(m.dir); err != nil {
				s.violation("remove %s: %v", m.dir, err)
			}
			s.start(m)
		default:
			s.violation("%s: open after the re-seed left its data dir out: %v (want ErrWrongDataDir or adoption)", m.id, err)
		}
	}
	stopLoad = s.load()
	s.awaitAcks(20, 30*time.Second, "the re-seeded room")
	stopLoad()
	s.check()
	return s.report("TestSimulationReplicasLoseTheRoom")
}

// check waits for every member to apply everything acknowledged, then
// compares.
func (s *repSim) check() {
	s.mu.Lock()
	var hi uint64
	idx := make([]uint64, 0, len(s.acked))
	for i := range s.acked {
		idx = append(idx, i)
		hi = max(hi, i)
	}
	acked := make(map[uint64]string, len(s.acked))
	for k, v := range s.acked {
		acked[k] = v
	}
	s.mu.Unlock()
	sort.Slice(idx, func(a, b int) bool { return idx[a] < idx[b] })
	ackedEntries := make([]string, 0, len(acked))
	for _, i := range idx {
		ackedEntries = append(ackedEntries, acked[i])
	}
	live := s.live()
	if len(live) != len(s.members) {
		s.violation("%d of %d members are up after healing", len(live), len(s.members))
	}
	for _, m := range live {
		s.mu.Lock()
		r := m.r
		s.mu.Unlock()
		// A member cut off a moment ago refuses reads at once (ErrUnavailable):
		// ask again until it has reconnected and caught up.
		var err error
		for deadline := time.Now().Add(20 * time.Second); ; {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			err = r.WaitApplied(ctx, hi)
			cancel()
			if err == nil || time.Now().After(deadline) || r.Status().Role == RoleFailed {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil {
			st := r.Status()
			s.violation("%s: did not apply %d: %v (role %v applied %d err %v tail %v)", m.id, hi, err, st.Role, st.Applied, st.Err, st.TailErr)
			continue
		}
		if st := r.Status(); st.Role == RoleFailed {
			s.violation("%s failed: %v", m.id, st.Err)
		}
		for _, i := range idx {
			v, err := r.Get(simEntryKey(i))
			if err != nil || string(v) != acked[i] {
				s.violation("%s: index %d holds %q (%v), acknowledged %q", m.id, i, v, err, acked[i])
				break
			}
		}
		s.mu.Lock()
		notSent := make(map[string]error, len(s.notSent))
		for k, v := range s.notSent {
			notSent[k] = v
		}
		s.mu.Unlock()
		for _, entry := range ackedEntries {
			if twice, err := r.Get(simDupKey(entry)); err == nil {
				s.violation("%s: acknowledged entry %q applied twice (at %s)", m.id, entry, twice)
				break
			}
		}
		for entry, why := range notSent {
			if at, err := r.Get(simValueKey(entry)); err == nil {
				s.violation("%s: entry %q applied at %s, though every proposal of it was answered as not committed (last: %v)", m.id, entry, at, why)
				break
			}
		}
	}
	// Members agree: once nothing is proposed, every member reaches the
	// same applied index with the same state hash.
	var settled bool
	for deadline := time.Now().Add(10 * time.Second); !settled && time.Now().Before(deadline); {
		hashes := map[string]string{}
		idxs := map[uint64]bool{}
		for _, m := range live {
			s.mu.Lock()
			r := m.r
			s.mu.Unlock()
			if r == nil {
				continue
			}
			h, i, err := r.StateHash()
			if err != nil {
				break
			}
			hashes[m.id] = h
			idxs[i] = true
		}
		if len(idxs) != 1 || len(hashes) != len(live) {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		settled = true
		var first, firstID string
		for id, h := range hashes {
			if firstID == "" {
				first, firstID = h, id
			} else if h != first {
				s.violation("%s and %s hold different states at the same applied index: %s vs %s", firstID, id, first, h)
				break
			}
		}
	}
	if !settled && len(live) > 1 {
		s.violation("the members' applied indexes or state hashes never settled within 10s")
	}
	for _, m := range live {
		s.stop(m, false)
	}
}

// TestSimulationReplicasFindsPlantedBugs plants one wrong decision at a
// time in every member's core and requires the whole-replica simulation
// to notice within a few seeds: real replicas must turn each into a
// violation of an invariant it checks.
func TestSimulationReplicasFindsPlantedBugs(t *testing.T) {
	if testing.Short() {
		t.Skip("the whole-replica simulation runs real replicas for seconds")
	}
	for _, tc := range []struct {
		name        string
		bugs        plantedBugs
		want        string
		lostReplies float64
		seedLowest  bool // run the lost-room scenario with a wrong re-seed
	}{
		// Lost replies drop connections: members reconnect often, probing
		// meanwhile.
		{"core: call the session refused on the first probe", plantedBugs{core: coreBugs{refuseEarly: true}}, "refuses this member's session", 0.1, false},
		// Lost replies leave writers with outcomes they cannot resolve.
		{"an append of unknown outcome reported as not sent", plantedBugs{unknownNotSent: true}, "answered as not committed", 0.1, false},
		// The re-seed seeds from the survivor that applied the least.
		{"re-seed: from the survivor that applied the least", plantedBugs{}, "", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var found string
			for seed := uint64(1); seed <= uint64(*simRepPlantedSeeds) && found == ""; seed++ {
				s := newRepSim(t, seed, repSimOptions{bugs: tc.bugs, lostReplies: tc.lostReplies, seedLowest: tc.seedLowest})
				if tc.seedLowest {
					found = s.runLoss(*simRepDur / 2)
				} else {
					found = s.run(*simRepDur)
				}
			}
			require.NotEmpty(t, found, "the planted bug was not found")
			line := strings.SplitN(found, "\n", 3)[1]
			if tc.want != "" {
				require.Contains(t, line, tc.want)
			}
			t.Logf("found: %s", line)
		})
	}
}

// simErrClass names a proposal's error by the sentinels it wraps.
func simErrClass(err error) string {
	for _, e := range []error{ErrNotPrimary, ErrQueueFull, ErrFenced, ErrOutcomeUnknown, ErrNoResponse, ErrClosed, ErrUnavailable, context.DeadlineExceeded} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	return "other"
}

// operatorRequest submits an operator request through the operator's own
// session and waits (bounded) for its answer.
func (s *repSim) operatorRequest(kind string) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	s.mu.Lock()
	op := s.op
	s.mu.Unlock()
	if op == nil {
		c, err := logroom.Dial(ctx, logroom.DialConfig{Servers: []string{s.srv.Addr()}, SessionTimeout: 4 * time.Second, AnyServer: true})
		if err != nil {
			s.logf("operator: dial: %v", err)
			return
		}
		s.mu.Lock()
		if s.op == nil {
			s.op = c
			s.t.Cleanup(c.Close)
		} else {
			c.Close()
		}
		op = s.op
		s.mu.Unlock()
	}
	req, err := SubmitRequest(ctx, op, "", s.room, OperatorRequest{Kind: kind})
	if err != nil {
		s.logf("operator: submit %s: %v", kind, err)
		return
	}
	for ctx.Err() == nil {
		got, ok, err := ReadRequest(ctx, op, "", s.room)
		if err == nil && ok && got.ID == req.ID && got.Finished(time.Now()) {
			s.logf("operator: %s %s: %s %s", kind, got.ID, got.State, got.Error)
			_ = ClearRequest(ctx, op, "", s.room, got.ID)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.logf("operator: %s %s: no answer in 8s", kind, req.ID)
}
