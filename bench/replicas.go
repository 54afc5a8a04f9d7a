package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roomlog/roomlog/replica"
	"github.com/roomlog/roomlog/store"
)

// member is an in-process replica with its own HTTP server for the
// checkpoint handler (so a bootstrapping peer can fetch from it).
type member struct {
	r   *replica.Replica
	srv *http.Server
	dir string
}

// openMember opens replica id of room in a fresh data dir under the run's
// temp dir. tune may adjust the config (checkpoint policy).
func (b *bench) openMember(ctx context.Context, room, id string, tune func(*replica.Config)) (*member, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(b.tmp, room, id)
	cfg := replica.Config{
		Servers:        b.addrs,
		SessionTimeout: b.cfg.sessionTimeout,
		AnyServer:      b.cfg.anyServer,
		Room:           room,
		ID:             id,
		DataDir:        dir,
		AdvertiseAddr:  ln.Addr().String(),
		Logger:         b.log,
		Writer:         b.writerConfig(),
	}
	cfg.Writer.Logger = nil // the replica passes its own
	if tune != nil {
		tune(&cfg)
	}
	if b.cfg.storeSync == store.SyncGroup {
		so := store.Options{}
		if cfg.StoreOptions != nil {
			so = *cfg.StoreOptions
		}
		so.Sync = store.SyncGroup
		cfg.StoreOptions = &so
	}
	if b.cfg.ckptFlushBytes != 0 {
		so := store.Options{}
		if cfg.StoreOptions != nil {
			so = *cfg.StoreOptions
		}
		so.CheckpointFlushBytes = b.cfg.ckptFlushBytes
		cfg.StoreOptions = &so
	}
	r, err := replica.Open(ctx, cfg)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("open replica %s: %w", id, err)
	}
	mux := http.NewServeMux()
	mux.Handle(replica.CheckpointPath(room), r.CheckpointHandler())
	m := &member{r: r, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, dir: dir}
	go func() { _ = m.srv.Serve(ln) }() // ends when Close closes the server
	return m, nil
}

func (m *member) Close() {
	_ = m.srv.Close()
	_ = m.r.Close()
}

// waitFor polls cond every 2 ms until it holds or the deadline passes.
func waitFor(ctx context.Context, timeout time.Duration, what string, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// lonePrimary opens one replica in a fresh room and waits until it leads.
func (b *bench) lonePrimary(ctx context.Context, prefix string, tune func(*replica.Config)) (*member, string, error) {
	room := fmt.Sprintf("bench-%s-%d", prefix, time.Now().UnixNano())
	m, err := b.openMember(ctx, room, "p", tune)
	if err != nil {
		return nil, room, err
	}
	if err := waitFor(ctx, 30*time.Second, "a primary", func() bool { return m.r.Status().Role == replica.RolePrimary }); err != nil {
		m.Close()
		return nil, room, err
	}
	return m, room, nil
}

// dropRoom deletes a room's znodes (after its members closed) so that
// ZooKeeper's memory does not carry one scenario into the next.
func (b *bench) dropRoom(room string) {
	if b.zk == nil {
		return
	}
	if err := deleteTree(b.zk, replica.DefaultBase+"/"+room); err != nil {
		b.log.Warn("delete room", "room", room, "err", err)
	}
}

// pair opens a primary and one caught-up standby in a fresh room.
func (b *bench) pair(ctx context.Context, prefix string, tune func(*replica.Config)) (p, s *member, room string, err error) {
	room = fmt.Sprintf("bench-%s-%d", prefix, time.Now().UnixNano())
	p, err = b.openMember(ctx, room, "p", tune)
	if err != nil {
		return nil, nil, room, err
	}
	if err := waitFor(ctx, 30*time.Second, "a primary", func() bool { return p.r.Status().Role == replica.RolePrimary }); err != nil {
		p.Close()
		return nil, nil, room, err
	}
	s, err = b.openMember(ctx, room, "s", tune)
	if err != nil {
		p.Close()
		return nil, nil, room, err
	}
	if err := waitFor(ctx, 30*time.Second, "a standby", func() bool {
		st := s.r.Status()
		return st.Role == replica.RoleStandby && st.Applied >= p.r.Status().Applied
	}); err != nil {
		s.Close()
		p.Close()
		return nil, nil, room, err
	}
	return p, s, room, nil
}

// noCheckpoints disables the size/count checkpoint policy.
func noCheckpoints(c *replica.Config) {
	c.CheckpointEveryEntries = -1
	c.CheckpointEveryBytes = -1
}

// entryMaker builds OpsApplier entries (one OpSet) of exactly size bytes,
// cycling over keys distinct keys so the state stays bounded.
type entryMaker struct {
	size, keys int
	value      []byte
	// ids: propose each entry with a fresh request id (ProposeRequest).
	ids bool
}

func newEntryMaker(size, keys int) (*entryMaker, error) {
	e := &entryMaker{size: size, keys: keys}
	probe, err := store.EncodeOps([]store.Op{{Kind: store.OpSet, Key: e.key(0)}})
	if err != nil {
		return nil, err
	}
	n := size - len(probe)
	for n > 0 {
		e.value = make([]byte, n)
		fillPseudo(e.value, uint64(size))
		got, err := store.EncodeOps([]store.Op{{Kind: store.OpSet, Key: e.key(0), Value: e.value}})
		if err != nil {
			return nil, err
		}
		if len(got) == size {
			return e, nil
		}
		n -= len(got) - size // the value's length prefix may grow
	}
	return nil, fmt.Errorf("entry size %d too small for an OpSet", size)
}

func (e *entryMaker) key(i int) []byte { return []byte(fmt.Sprintf("bench/%010d", i%max(e.keys, 1))) }

func (e *entryMaker) make(i int) []byte {
	b, _ := store.EncodeOps([]store.Op{{Kind: store.OpSet, Key: e.key(i), Value: e.value}})
	return b
}

// fillPseudo fills b with incompressible bytes (xorshift), deterministically.
func fillPseudo(b []byte, seed uint64) {
	x := seed*0x9E3779B97F4A7C15 | 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
}

// loadStats collects what a load run saw.
type loadStats struct {
	mu       sync.Mutex // guards lat
	lat      histogram  // Propose latency (from the call, not the schedule)
	ok, errs atomic.Int64
	missed   atomic.Int64 // paced slots skipped because every worker was busy
	firstErr atomic.Value
	lastIdx  atomic.Uint64
	wait     func() // waits for every load goroutine (after ctx ended)
	cpu      cpuUse // CPU use during a timed load
}

func (s *loadStats) record(d time.Duration) {
	s.mu.Lock()
	s.lat.Record(d)
	s.mu.Unlock()
}

func (s *loadStats) fail(err error) {
	if s.errs.Add(1) == 1 {
		s.firstErr.Store(err)
	}
}

// runLoad proposes on r until ctx ends. rate > 0 paces it (open loop, 1 ms
// ticks, up to workers proposals in flight); rate == 0 runs workers
// proposers in a closed loop. onAck, if set, is called after each success.
func runLoad(ctx context.Context, r *replica.Replica, em *entryMaker, workers int, rate float64, onAck func(idx uint64, at time.Time)) *loadStats {
	st := &loadStats{}
	var seq atomic.Int64
	var tokens chan struct{}
	if rate > 0 {
		tokens = make(chan struct{}, workers)
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if tokens != nil {
					select {
					case <-tokens:
					case <-ctx.Done():
						return
					}
				} else if ctx.Err() != nil {
					return
				}
				e := em.make(int(seq.Add(1)))
				t0 := time.Now()
				var res replica.Result
				var err error
				if em.ids {
					res, err = r.ProposeRequest(ctx, replica.NewRequestID(), e)
				} else {
					res, err = r.Propose(ctx, e)
				}
				if err != nil {
					if ctx.Err() == nil {
						st.fail(err)
						if errors.Is(err, replica.ErrQueueFull) || errors.Is(err, replica.ErrNotPrimary) {
							sleepCtx(ctx, time.Millisecond)
						}
					}
					continue
				}
				now := time.Now()
				st.record(now.Sub(t0))
				st.ok.Add(1)
				for old := st.lastIdx.Load(); res.Index > old && !st.lastIdx.CompareAndSwap(old, res.Index); old = st.lastIdx.Load() {
				}
				if onAck != nil {
					onAck(res.Index, now)
				}
			}
		}()
	}
	if tokens != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(time.Millisecond)
			defer t.Stop()
			start := time.Now()
			var issued float64
			for {
				select {
				case <-ctx.Done():
					return
				case now := <-t.C:
					due := rate * now.Sub(start).Seconds()
					for ; issued+1 <= due; issued++ {
						select {
						case tokens <- struct{}{}:
						default:
							st.missed.Add(1)
						}
					}
				}
			}
		}()
	}
	st.wait = wg.Wait
	return st
}
