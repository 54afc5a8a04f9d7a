package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/roomlog/roomlog/replica"
	"github.com/roomlog/roomlog/store"
)

// zkCensus is what the ensemble holds at one moment, summed or taken per
// server as noted.
type zkCensus struct {
	zxid      uint64    // the leader's last zxid (its counter: writes since the epoch began)
	epoch     uint64    // the zxid's epoch half (a change means an election: no write count)
	heapMB    []float64 // live heap per server after a full GC (jcmd); nil without jcmd
	znodes    int64     // zk_znode_count (server 0; every server holds the tree)
	watches   int64     // zk_watch_count summed over servers (watches live where the session is connected)
	conns     int64     // zk_num_alive_connections summed over servers
	ephemeral int64     // zk_ephemerals_count (server 0)
}

// mntr parses a mntr reply into name -> value.
func mntr(out string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, "\t"); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

// census takes a zkCensus; heap (a full GC on every server) only if asked.
func (b *bench) census(ctx context.Context, heap bool) (zkCensus, error) {
	var c zkCensus
	if b.ens == nil {
		return c, errors.New("no ensemble of the bench's own to inspect")
	}
	leader, err := b.ens.Leader(ctx)
	if err != nil {
		return c, err
	}
	for i := range b.ens.Size() {
		out, err := b.ens.FourLetter(ctx, i, "mntr")
		if err != nil {
			return c, fmt.Errorf("mntr on server %d: %w", i, err)
		}
		m := mntr(out)
		get := func(k string) int64 {
			v, _ := strconv.ParseInt(m[k], 10, 64)
			return v
		}
		c.watches += get("zk_watch_count")
		c.conns += get("zk_num_alive_connections")
		if i == 0 {
			c.znodes, c.ephemeral = get("zk_znode_count"), get("zk_ephemerals_count")
		}
		if i == leader {
			out, err := b.ens.FourLetter(ctx, i, "srvr")
			if err != nil {
				return c, fmt.Errorf("srvr on server %d: %w", i, err)
			}
			for _, line := range strings.Split(out, "\n") {
				if v, ok := strings.CutPrefix(line, "Zxid: 0x"); ok {
					z, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
					if err != nil {
						return c, fmt.Errorf("srvr Zxid %q: %w", v, err)
					}
					c.zxid, c.epoch = z&0xffffffff, z>>32
				}
			}
		}
		if heap {
			n, err := b.ens.LiveHeap(ctx, i)
			if err != nil {
				return c, err
			}
			c.heapMB = append(c.heapMB, float64(n)/(1<<20))
		}
	}
	return c, nil
}

func meanOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// runRooms opens many rooms of 3 in-process members each (small Pebble
// caches) on the one ensemble: what each room costs ZooKeeper at rest
// (writes/s, znodes, watches, sessions, heap) and the aggregate Propose
// rate when every room writes at once.
func runRooms(ctx context.Context, b *bench) ([]Result, error) {
	rooms, idle, perRoom := 100, 10*time.Second, 4
	if b.cfg.quick {
		rooms, idle = 10, 5*time.Second
	}
	const members = 3
	em, err := newEntryMaker(replicaEntryBytes, 10_000)
	if err != nil {
		return nil, err
	}
	tune := func(c *replica.Config) {
		c.StoreOptions = &store.Options{CacheSize: 1 << 20, MemTableSize: 1 << 20}
	}
	b.prog.Logf("rooms: opening %d rooms x %d members (1 MiB Pebble cache and memtable each)", rooms, members)
	t0 := time.Now()
	stamp := time.Now().UnixNano()
	names := make([]string, rooms)
	ms := make([][]*member, rooms)
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8) // opens at once: each is a session, an election and a Pebble
	for i := range rooms {
		names[i] = fmt.Sprintf("bench-rooms-%d-%03d", stamp, i)
		ms[i] = make([]*member, members)
		for j := range members {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				m, err := b.openMember(ctx, names[i], fmt.Sprintf("m%d", j), tune)
				mu.Lock()
				defer mu.Unlock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				ms[i][j] = m
			}()
		}
	}
	wg.Wait()
	closed := false
	closeAll := func() {
		if closed {
			return
		}
		closed = true
		var cw sync.WaitGroup
		for i := range ms {
			for _, m := range ms[i] {
				if m != nil {
					cw.Add(1)
					go func() { defer cw.Done(); m.Close() }()
				}
			}
		}
		cw.Wait()
		for _, n := range names {
			b.dropRoom(n)
		}
	}
	defer closeAll()
	if firstErr != nil {
		return nil, firstErr
	}
	primaries := make([]*member, rooms)
	err = waitFor(ctx, 2*time.Minute, "a primary and two caught-up standbys in every room", func() bool {
		for i := range ms {
			if primaries[i] == nil {
				for _, m := range ms[i] {
					if m.r.Status().Role == replica.RolePrimary {
						primaries[i] = m
					}
				}
				if primaries[i] == nil {
					return false
				}
			}
			pa := primaries[i].r.Status().Applied
			for _, m := range ms[i] {
				if st := m.r.Status(); m != primaries[i] && (st.Role != replica.RoleStandby || st.Applied < pa) {
					return false
				}
			}
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	opened := time.Since(t0)
	b.prog.Logf("rooms: %d rooms ready after %v; idle for %v", rooms, opened.Round(time.Millisecond), idle)
	sleepCtx(ctx, 3*time.Second) // member data and elections settle
	c0, err := b.census(ctx, false)
	if err != nil {
		return nil, err
	}
	sleepCtx(ctx, idle)
	c1, err := b.census(ctx, true)
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	idleRow := Result{System: "roomlog", Servers: b.cfg.servers, Scenario: "rooms-idle", Concurrency: rooms * members}
	if c1.epoch == c0.epoch {
		idleRow.setExtra("idle_zk_writes_per_s", round3(float64(c1.zxid-c0.zxid)/idle.Seconds()))
	} else {
		idleRow.setExtra("idle_zk_writes_per_s", "n/a: a ZooKeeper election during the window")
	}
	idleRow.setExtra("rooms", rooms)
	idleRow.setExtra("open_s", round3(opened.Seconds()))
	idleRow.Note = fmt.Sprintf("%d rooms x %d in-process members at rest: ZooKeeper writes/s over %v (zxid); per-room znodes, watches (all servers), sessions and live heap (jcmd, mean of servers) against the ensemble once the rooms are closed and deleted",
		rooms, members, idle)
	out := []Result{idleRow}
	// perRoomCost fills the per-room figures once the rooms are gone.
	perRoomCost := func() error {
		closeAll()
		sleepCtx(ctx, time.Second) // sessions closed, deletions applied everywhere
		c2, err := b.census(ctx, true)
		if err != nil {
			return err
		}
		per := func(with, without int64) float64 { return round3(float64(with-without) / float64(rooms)) }
		r := &out[0]
		r.setExtra("znodes_per_room", per(c1.znodes, c2.znodes))
		r.setExtra("watches_per_room", per(c1.watches, c2.watches))
		r.setExtra("sessions_per_room", per(c1.conns, c2.conns))
		r.setExtra("ephemerals_per_room", per(c1.ephemeral, c2.ephemeral))
		heapPer := (meanOf(c1.heapMB) - meanOf(c2.heapMB)) * (1 << 20) / float64(rooms)
		r.setExtra("zk_heap_per_room_kib", round3(heapPer/1024))
		r.setExtra("zk_live_heap_mb_with_rooms", round3(meanOf(c1.heapMB)))
		r.setExtra("zk_live_heap_mb_without", round3(meanOf(c2.heapMB)))
		return nil
	}

	// Every room writes at once: perRoom proposers on each primary.
	d := b.cfg.duration
	b.prog.Logf("rooms: %d rooms x %d proposers for %v", rooms, perRoom, d)
	l0, err := b.census(ctx, false)
	if err != nil {
		return out, err
	}
	lctx, stop := context.WithCancel(ctx)
	start := time.Now()
	c0cpu := b.cpuNow()
	loads := make([]*loadStats, rooms)
	for i, p := range primaries {
		loads[i] = runLoad(lctx, p.r, em, perRoom, 0, nil)
	}
	sleepCtx(ctx, d)
	stop()
	elapsed := time.Since(start)
	cpu := b.cpuSince(c0cpu)
	agg := &loadStats{}
	var slowest, fastest float64
	for i, st := range loads {
		st.wait()
		agg.lat.Merge(&st.lat)
		agg.ok.Add(st.ok.Load())
		if e := st.errs.Load(); e > 0 {
			agg.errs.Add(e)
			if agg.firstErr.Load() == nil {
				if err, ok := st.firstErr.Load().(error); ok {
					agg.firstErr.Store(err)
				}
			}
		}
		r := float64(st.ok.Load()) / elapsed.Seconds()
		if i == 0 || r < slowest {
			slowest = r
		}
		fastest = max(fastest, r)
	}
	agg.cpu = cpu
	row := b.proposeRow("rooms-load", rooms*perRoom, agg, elapsed)
	if l1, err := b.census(ctx, false); err == nil && l1.epoch == l0.epoch {
		// Every ZooKeeper write: batch Multis, member data, channel work.
		w := float64(l1.zxid-l0.zxid) / time.Since(start).Seconds()
		row.setExtra("zk_writes_per_s", round3(w))
		if w > 0 {
			row.setExtra("entries_per_zk_write", round3(row.EntriesPerS/w))
		}
	}
	row.setExtra("rooms", rooms)
	row.setExtra("slowest_room_per_s", round3(slowest))
	row.setExtra("fastest_room_per_s", round3(fastest))
	if row.Note == "" {
		row.Note = fmt.Sprintf("aggregate replica.Propose of %d rooms at once, %d proposers on each primary", rooms, perRoom)
	}
	out = append(out, row)
	if err := perRoomCost(); err != nil {
		return out, fmt.Errorf("census without the rooms: %w", err)
	}
	return out, ctx.Err()
}
