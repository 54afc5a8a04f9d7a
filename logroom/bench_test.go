package logroom

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/third_party/zk"
)

// bench3 is one 3-server ensemble shared by the benchmarks of a run.
var bench3 struct {
	once sync.Once
	e    *zkensemble.Ensemble
	err  error
}

func benchEnsemble(b *testing.B) *zkensemble.Ensemble {
	b.Helper()
	needZK(b)
	bench3.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
		defer cancel()
		bench3.e, bench3.err = zkensemble.Start(ctx, zkensemble.Options{Servers: 3})
		if bench3.err == nil {
			benchCleanup = append(benchCleanup, func() { _ = bench3.e.Close() })
			bench3.err = warmUp(bench3.e)
		}
	})
	if bench3.err != nil {
		b.Fatal(bench3.err)
	}
	return bench3.e
}

// warmUp runs a few seconds of Multis against a fresh ensemble so the
// servers' JIT is warm before anything is measured.
func warmUp(e *zkensemble.Ensemble) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := Dial(ctx, DialConfig{Servers: e.Addrs()})
	if err != nil {
		return err
	}
	defer c.Close()
	r, err := OpenRoom(ctx, c, "warmup", RoomOptions{Base: "/bench"})
	if err != nil {
		return err
	}
	w, err := r.NewWriter(ctx, WriterConfig{})
	if err != nil {
		return err
	}
	defer w.Close()
	entry := make([]byte, 256)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 300; i++ {
				if _, err := w.Append(ctx, entry); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// benchCleanup runs after all tests and benchmarks (from TestMain).
var benchCleanup []func()

var benchRoomSeq atomic.Int64

// BenchmarkAppend measures Append of 256-byte entries on three servers with
// 1, 16 and 256 concurrent callers: entries/s and per-Append latency.
func BenchmarkAppend(b *testing.B) {
	for _, callers := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			e := benchEnsemble(b)
			c := dial(b, e.Addrs())
			ctx := context.Background()
			r, err := OpenRoom(ctx, c, fmt.Sprintf("bench-%d", benchRoomSeq.Add(1)), RoomOptions{Base: "/bench"})
			if err != nil {
				b.Fatal(err)
			}
			cfg := WriterConfig{} // default MaxRoomBytes (256 MiB) protects the servers' heap
			if v := os.Getenv("LOGROOM_BENCH_INFLIGHT"); v != "" {
				cfg.MaxInFlight, _ = strconv.Atoi(v)
			}
			if v := os.Getenv("LOGROOM_BENCH_EAGER"); v != "" {
				cfg.EagerInFlight, _ = strconv.Atoi(v)
			}
			w, err := r.NewWriter(ctx, cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			entry := make([]byte, 256)
			lat := make([][]time.Duration, callers)
			var next atomic.Int64
			var wg sync.WaitGroup
			b.SetBytes(256)
			b.ResetTimer()
			start := time.Now()
			for g := 0; g < callers; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= int64(b.N) {
						t0 := time.Now()
						if _, err := w.Append(ctx, entry); err != nil {
							b.Error(err)
							return
						}
						lat[g] = append(lat[g], time.Since(t0))
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			all := slices.Concat(lat...)
			slices.Sort(all)
			if len(all) > 0 {
				b.ReportMetric(float64(len(all))/elapsed.Seconds(), "entries/s")
				b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
			}
			// Delete the data so repeated runs stay inside the heap.
			if _, err := w.Rotate(ctx); err == nil {
				chs, _ := r.Channels(ctx)
				for _, ch := range chs {
					if ch.Sealed {
						_ = r.DeleteChannel(ctx, ch.Num)
					}
				}
			}
		})
	}
}

// BenchmarkRawZK measures plain creates of 256-byte znodes on the same
// three servers: sequential, and 64 in flight.
func BenchmarkRawZK(b *testing.B) {
	for _, inFlight := range []int{1, 64} {
		b.Run(fmt.Sprintf("inflight=%d", inFlight), func(b *testing.B) {
			e := benchEnsemble(b)
			c := dial(b, e.Addrs())
			parent := fmt.Sprintf("/bench-raw-%d", benchRoomSeq.Add(1))
			if _, err := c.Conn().Create(parent, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
				b.Fatal(err)
			}
			data := make([]byte, 256)
			var next atomic.Int64
			var wg sync.WaitGroup
			b.SetBytes(256)
			b.ResetTimer()
			start := time.Now()
			for g := 0; g < inFlight; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						if _, err := c.Conn().Create(fmt.Sprintf("%s/n-%d", parent, i), data, 0, zk.WorldACL(zk.PermAll)); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "creates/s")
			b.StopTimer()
			// Clean up in Multis of 200.
			names, _, _ := c.Conn().Children(parent)
			for len(names) > 0 {
				n := min(len(names), 200)
				ops := make([]interface{}, n)
				for i := range ops {
					ops[i] = &zk.DeleteRequest{Path: parent + "/" + names[i], Version: -1}
				}
				_, _ = c.Conn().Multi(ops...)
				names = names[n:]
			}
		})
	}
}

// tailBacklog bounds the entries BenchmarkTail writes (51 MB of data): a
// larger b.N re-reads the backlog instead of growing ZooKeeper's heap.
const tailBacklog = 200_000

// BenchmarkTail measures a reader catching up on a backlog of 256-byte
// entries written 128 per batch (three servers).
func BenchmarkTail(b *testing.B) {
	e := benchEnsemble(b)
	c := dial(b, e.Addrs())
	ctx := context.Background()
	r, err := OpenRoom(ctx, c, fmt.Sprintf("bench-%d", benchRoomSeq.Add(1)), RoomOptions{Base: "/bench"})
	if err != nil {
		b.Fatal(err)
	}
	w, err := r.NewWriter(ctx, WriterConfig{})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	batch := make([][]byte, 128)
	for i := range batch {
		batch[i] = make([]byte, 256)
	}
	backlog := int64(min(b.N, tailBacklog))
	var wg sync.WaitGroup
	var next atomic.Int64
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(int64(len(batch))) <= backlog+int64(len(batch)) {
				if _, err := w.Append(ctx, batch...); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	end := w.LastCommitted()
	b.SetBytes(256)
	b.ResetTimer()
	start := time.Now()
	n := 0
	for n < b.N {
		rd, err := r.Tail(ctx, 1)
		if err != nil {
			b.Fatal(err)
		}
		for rd.Position() <= end && n < b.N {
			es, err := rd.Next(ctx)
			if err != nil {
				b.Fatal(err)
			}
			n += len(es)
		}
	}
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "entries/s")
	b.StopTimer()
	if _, err := w.Rotate(ctx); err == nil {
		chs, _ := r.Channels(ctx)
		for _, ch := range chs {
			if ch.Sealed {
				_ = r.DeleteChannel(ctx, ch.Num)
			}
		}
	}
}
