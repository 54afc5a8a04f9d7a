package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// counterApplier adds the entry's payload (a decimal number) to key "sum",
// counts calls under "calls", and answers "sum=<new sum>@<index>". Applying
// a request twice shows in both keys.
var counterApplier = funcApplier(func(b Batch, e Entry) ([]byte, error) {
	n, err := strconv.Atoi(string(e.Data))
	if err != nil {
		return []byte("rejected: " + err.Error()), nil
	}
	add := func(key string, d int) (int, error) {
		cur := 0
		v, err := b.Get([]byte(key))
		if err == nil {
			cur, _ = strconv.Atoi(string(v))
		} else if !errors.Is(err, ErrNotFound) {
			return 0, err
		}
		return cur + d, b.Set([]byte(key), []byte(strconv.Itoa(cur+d)))
	}
	if _, err := add("calls", 1); err != nil {
		return nil, err
	}
	sum, err := add("sum", n)
	if err != nil {
		return nil, err
	}
	return []byte(fmt.Sprintf("sum=%d@%d", sum, e.Index)), nil
})

func reqID(n int) RequestID { return RequestIDFromKey("req-" + strconv.Itoa(n)) }

// reqEntry is entry index carrying request n with payload p at log time
// stamp (ms), TTL ttl and window w.
func reqEntry(t testing.TB, index uint64, n int, p string, stamp int64, ttl time.Duration, w uint64) Entry {
	t.Helper()
	data, err := EncodeRequest(Request{ID: reqID(n), Stamp: stamp, TTL: ttl, Window: w}, []byte(p))
	require.NoError(t, err)
	return Entry{Index: index, Epoch: 1, Data: data}
}

func getInt(t testing.TB, s *Store, key string) int {
	t.Helper()
	v, err := s.Get([]byte(key))
	require.NoError(t, err)
	n, err := strconv.Atoi(string(v))
	require.NoError(t, err)
	return n
}

func TestRequestDeduplicated(t *testing.T) {
	s := openTest(t, t.TempDir(), &Options{Applier: counterApplier})
	const ttl, w = time.Hour, 1000
	outs, err := s.ApplyOutcomes([]Entry{
		reqEntry(t, 1, 1, "5", 1000, ttl, w),
		{Index: 2, Data: []byte("7")},        // plain
		reqEntry(t, 3, 1, "5", 1001, ttl, w), // the retry, same batch
	})
	require.NoError(t, err)
	require.Equal(t, Outcome{Response: []byte("sum=5@1"), Index: 1}, outs[0])
	require.Equal(t, Outcome{Response: []byte("sum=12@2"), Index: 2}, outs[1])
	require.Equal(t, Outcome{Response: []byte("sum=5@1"), Index: 1, Duplicate: true}, outs[2])

	// A retry in a later Apply, and one with a different payload.
	outs, err = s.ApplyOutcomes([]Entry{
		reqEntry(t, 4, 1, "5", 1002, ttl, w),
		reqEntry(t, 5, 1, "6", 1003, ttl, w),
		reqEntry(t, 6, 2, "1", 1004, ttl, w),
	})
	require.NoError(t, err)
	require.Equal(t, Outcome{Response: []byte("sum=5@1"), Index: 1, Duplicate: true}, outs[0])
	require.Equal(t, Outcome{Index: 1, Conflict: true}, outs[1])
	require.Equal(t, Outcome{Response: []byte("sum=13@6"), Index: 6}, outs[2])
	require.Equal(t, 3, getInt(t, s, "calls"), "the Applier ran for a retry")
	require.Equal(t, 13, getInt(t, s, "sum"))
	require.EqualValues(t, 6, s.AppliedIndex())

	rec, ok, err := s.LookupRequest(reqID(1))
	require.NoError(t, err)
	require.True(t, ok)
	require.EqualValues(t, 1, rec.Index)
	require.EqualValues(t, 1000, rec.Stamp)
	require.Equal(t, []byte("sum=5@1"), rec.Response)
	_, ok, err = s.LookupRequest(reqID(99))
	require.NoError(t, err)
	require.False(t, ok)

	// The table is internal: not in Scan.
	keys := userKeys(t, s.Scan)
	require.Equal(t, []string{"calls", "sum"}, keys)
}

func TestRequestExpiry(t *testing.T) {
	t.Run("window", func(t *testing.T) {
		s := openTest(t, t.TempDir(), &Options{Applier: counterApplier})
		const w = 3
		_, err := s.Apply([]Entry{reqEntry(t, 1, 1, "1", 0, time.Hour, w), {Index: 2, Data: []byte("1")}})
		require.NoError(t, err)
		// Index 3 is 2 after 1: inside the window.
		outs, err := s.ApplyOutcomes([]Entry{reqEntry(t, 3, 1, "1", 0, time.Hour, w)})
		require.NoError(t, err)
		require.True(t, outs[0].Duplicate)
		// Index 4 is 3 (the window) after 1: the record expired, the retry
		// applies again (the documented limit of deduplication).
		outs, err = s.ApplyOutcomes([]Entry{reqEntry(t, 4, 1, "1", 0, time.Hour, w)})
		require.NoError(t, err)
		require.False(t, outs[0].Duplicate)
		require.EqualValues(t, 4, outs[0].Index)
		require.Equal(t, 3, getInt(t, s, "calls"))
		n, err := s.RequestTableLen()
		require.NoError(t, err)
		require.Equal(t, 1, n)
		// A run of requests never holds more than the window.
		for i := uint64(5); i < 15; i++ {
			_, err := s.Apply([]Entry{reqEntry(t, i, int(i), "1", 0, time.Hour, w)})
			require.NoError(t, err)
			n, err := s.RequestTableLen()
			require.NoError(t, err)
			require.LessOrEqual(t, n, w)
		}
	})
	t.Run("ttl", func(t *testing.T) {
		s := openTest(t, t.TempDir(), &Options{Applier: counterApplier})
		ttl := 10 * time.Second
		_, err := s.Apply([]Entry{reqEntry(t, 1, 1, "1", 50_000, ttl, 1000), reqEntry(t, 2, 2, "1", 55_000, ttl, 1000)})
		require.NoError(t, err)
		// 60 s: exactly TTL after request 1: kept.
		outs, err := s.ApplyOutcomes([]Entry{reqEntry(t, 3, 1, "1", 60_000, ttl, 1000)})
		require.NoError(t, err)
		require.True(t, outs[0].Duplicate)
		// A stamp from a clock that went back expires nothing.
		outs, err = s.ApplyOutcomes([]Entry{reqEntry(t, 4, 3, "1", 1_000, ttl, 1000)})
		require.NoError(t, err)
		require.False(t, outs[0].Duplicate)
		// 60.001 s: request 1 expired, request 2 (55 s) not.
		outs, err = s.ApplyOutcomes([]Entry{reqEntry(t, 5, 1, "1", 60_001, ttl, 1000), reqEntry(t, 6, 2, "1", 60_001, ttl, 1000)})
		require.NoError(t, err)
		require.False(t, outs[0].Duplicate, "request 1 should have expired")
		require.True(t, outs[1].Duplicate)
		require.EqualValues(t, 2, outs[1].Index)
	})
}

// TestRequestTableDeterministic applies one request-heavy log to several
// stores cut into different Apply runs, with reopens and an aborted Apply
// in between, and requires equal outcomes and equal hashes at every index.
func TestRequestTableDeterministic(t *testing.T) {
	const n = 2500
	rng := rand.New(rand.NewPCG(1, 2))
	var log []Entry
	stamp := int64(1_000_000)
	for i := uint64(1); i <= n; i++ {
		stamp += int64(rng.IntN(8)) - 2 // mostly forward, sometimes back
		switch k := rng.IntN(10); {
		case k < 2:
			log = append(log, Entry{Index: i, Epoch: 1, Data: []byte(strconv.Itoa(rng.IntN(100)))})
		default:
			// Windows and TTLs vary by entry: the policy is the log's.
			w := uint64(200 + rng.IntN(900))
			ttl := time.Duration(500+rng.IntN(5000)) * time.Millisecond
			req := rng.IntN(1500)
			log = append(log, reqEntry(t, i, req, strconv.Itoa(req%7), stamp, ttl, w))
		}
	}
	run := func(t *testing.T, split func(i uint64) uint64, reopenEvery int, abortEvery int) map[uint64]string {
		dir := t.TempDir()
		fail := false
		app := funcApplier(func(b Batch, e Entry) ([]byte, error) {
			if fail && e.Index%5 == 0 {
				return nil, errors.New("injected")
			}
			return counterApplier(b, e)
		})
		s, err := Open(dir, &Options{Applier: app, Sync: SyncGroup})
		require.NoError(t, err)
		defer func() { s.Close() }()
		hashes := map[uint64]string{}
		runs, aborts := 0, 0
		for first := uint64(1); first <= n; {
			last := min(first+split(first)-1, n)
			runs++
			if abortEvery > 0 && runs%abortEvery == 0 && last-first >= 5 {
				fail = true
				_, err := s.Apply(log[first-1 : last])
				fail = false
				if err == nil {
					// No entry of the run reached the Applier at a multiple of 5.
					aborts--
				} else {
					require.ErrorIs(t, err, ErrApply)
					_, err = s.Apply(log[first-1 : last])
				}
				require.NoError(t, err)
				aborts++
			} else {
				_, err := s.Apply(log[first-1 : last])
				require.NoError(t, err)
			}
			if last%10 == 0 || last == n {
				h, idx, err := s.StateHash()
				require.NoError(t, err)
				require.Equal(t, last, idx)
				hashes[last] = h
			}
			if reopenEvery > 0 && runs%reopenEvery == 0 {
				require.NoError(t, s.Close())
				s, err = Open(dir, &Options{Applier: app, Sync: SyncGroup})
				require.NoError(t, err)
			}
			first = last + 1
		}
		if abortEvery > 0 {
			require.Greater(t, aborts, 10, "too few aborted Applies to test the queue reset")
		}
		size, err := s.RequestTableLen()
		require.NoError(t, err)
		require.Greater(t, size, 150)
		require.LessOrEqual(t, size, 1100)
		return hashes
	}
	one := run(t, func(uint64) uint64 { return 1 }, 0, 0)
	for name, h := range map[string]map[uint64]string{
		"runs of 7, reopen every 50":   run(t, func(uint64) uint64 { return 7 }, 50, 0),
		"varied runs, aborts":          run(t, func(f uint64) uint64 { return 1 + splitmix64(f)%40 }, 0, 3),
		"long runs (refills), reopens": run(t, func(uint64) uint64 { return 700 }, 2, 0),
	} {
		matched := 0
		for idx, hash := range h {
			require.Equal(t, one[idx], hash, "%s: state hash differs at index %d", name, idx)
			matched++
		}
		require.NotZero(t, matched)
	}
}

func TestRequestTableInStateHashAndCheckpoint(t *testing.T) {
	dir := t.TempDir()
	a := openTest(t, dir, &Options{Applier: counterApplier})
	b := openTest(t, t.TempDir(), &Options{Applier: counterApplier})
	// Same user state, different tables: different hashes.
	_, err := a.Apply([]Entry{reqEntry(t, 1, 1, "3", 10, time.Hour, 100)})
	require.NoError(t, err)
	_, err = b.Apply([]Entry{reqEntry(t, 1, 2, "3", 10, time.Hour, 100)})
	require.NoError(t, err)
	ha, _, err := a.StateHash()
	require.NoError(t, err)
	hb, _, err := b.StateHash()
	require.NoError(t, err)
	require.NotEqual(t, ha, hb)
	require.Equal(t, userKeys(t, a.Scan), userKeys(t, b.Scan))

	// A plain-only store hashes as the user state alone (format unchanged).
	c := openTest(t, t.TempDir(), nil)
	_, err = c.Apply([]Entry{{Index: 1, Data: mustOps(t, set("k", "v"))}})
	require.NoError(t, err)
	hc, _, err := c.StateHash()
	require.NoError(t, err)
	m := newModel()
	m.kv["k"] = []byte("v")
	require.Equal(t, m.hash(), hc)

	// A checkpoint carries the table: the copy deduplicates a retry.
	ck := filepath.Join(t.TempDir(), "ck")
	_, _, err = a.Checkpoint(ck)
	require.NoError(t, err)
	d := openTest(t, ck, &Options{Applier: counterApplier})
	outs, err := d.ApplyOutcomes([]Entry{reqEntry(t, 2, 1, "3", 20, time.Hour, 100)})
	require.NoError(t, err)
	require.Equal(t, Outcome{Response: []byte("sum=3@1"), Index: 1, Duplicate: true}, outs[0])
	require.Equal(t, 1, getInt(t, d, "calls"))
}

func TestRequestEnvelope(t *testing.T) {
	// Plain data that looks like an envelope reaches the Applier unchanged.
	var seen [][]byte
	app := funcApplier(func(b Batch, e Entry) ([]byte, error) {
		seen = append(seen, bytes.Clone(e.Data))
		require.True(t, e.RequestID.IsZero())
		return nil, nil
	})
	s := openTest(t, t.TempDir(), &Options{Applier: app})
	tricky := append(append([]byte{}, requestMagic[:]...), bytes.Repeat([]byte{0}, 40)...)
	plain := []byte("plain")
	require.Equal(t, plain, WrapPlain(plain))
	malformed := append(append([]byte{}, requestMagic[:]...), 1, 2) // too short
	_, err := s.Apply([]Entry{{Index: 1, Data: WrapPlain(tricky)}, {Index: 2, Data: WrapPlain(plain)}, {Index: 3, Data: malformed}})
	require.NoError(t, err)
	require.Equal(t, [][]byte{tricky, plain, malformed}, seen)

	// Bad policies are refused when encoding.
	for _, req := range []Request{
		{},
		{ID: reqID(1), TTL: 0, Window: 1},
		{ID: reqID(1), TTL: time.Second, Window: 0},
		{ID: reqID(1), TTL: time.Second, Window: MaxRequestWindow + 1},
		{ID: reqID(1), TTL: MaxRequestTTL + time.Millisecond, Window: 1},
		{ID: reqID(1), Stamp: -1, TTL: time.Second, Window: 1},
	} {
		_, err := EncodeRequest(req, nil)
		require.ErrorIs(t, err, ErrInvalid, "%+v", req)
	}
	// Round trip.
	req := Request{ID: reqID(7), Stamp: 123456789, TTL: 90 * time.Second, Window: 4096}
	data, err := EncodeRequest(req, []byte("payload"))
	require.NoError(t, err)
	got, p, ok := DecodeRequest(data)
	require.True(t, ok)
	require.Equal(t, req, got)
	require.Equal(t, []byte("payload"), p)
	// An out-of-limits window read from the log is not an envelope.
	bad := append(append([]byte{}, requestMagic[:]...), req.ID[:]...)
	bad = binary.AppendUvarint(bad, 1)
	bad = binary.AppendUvarint(bad, 1000)
	bad = binary.AppendUvarint(bad, MaxRequestWindow+1)
	_, p, ok = DecodeRequest(bad)
	require.False(t, ok)
	require.Equal(t, bad, p)
}

func FuzzDecodeRequest(f *testing.F) {
	data, _ := EncodeRequest(Request{ID: reqID(1), Stamp: 5, TTL: time.Second, Window: 10}, []byte("x"))
	f.Add(data)
	f.Add(WrapPlain(append(requestMagic[:], 0)))
	f.Add([]byte("plain"))
	f.Fuzz(func(t *testing.T, b []byte) {
		req, p, ok := DecodeRequest(b)
		if !ok {
			require.Equal(t, b, p)
			return
		}
		if req.ID.IsZero() {
			require.Equal(t, encodeEnvelope(Request{}, p), b, "a zero-id envelope has no policy")
			return
		}
		again, err := EncodeRequest(req, p)
		require.NoError(t, err)
		req2, p2, ok := DecodeRequest(again)
		require.True(t, ok)
		require.Equal(t, req, req2)
		require.Equal(t, p, p2)
	})
}

// TestRequestQueueBounded: the in-memory expiry queue holds a bounded
// prefix of the table, not the whole table (found in review: it grew to
// every record while the queue was complete).
func TestRequestQueueBounded(t *testing.T) {
	s := openTest(t, t.TempDir(), &Options{Applier: counterApplier, Sync: SyncGroup})
	var es []Entry
	for i := uint64(1); i <= 5000; i++ {
		es = append(es, reqEntry(t, i, int(i), "1", int64(i), time.Hour, 1<<20))
		if len(es) == 500 {
			_, err := s.Apply(es)
			require.NoError(t, err)
			require.LessOrEqual(t, len(s.reqQ.q), reqRefill)
			es = nil
		}
	}
	n, err := s.RequestTableLen()
	require.NoError(t, err)
	require.Equal(t, 5000, n)
	// Expiry still walks the whole table in order: a window of 100 leaves
	// exactly the newest 100 ... after 100 more requests.
	for i := uint64(5001); i <= 5100; i++ {
		_, err := s.Apply([]Entry{reqEntry(t, i, int(i), "1", int64(i), time.Hour, 100)})
		require.NoError(t, err)
	}
	n, err = s.RequestTableLen()
	require.NoError(t, err)
	require.Equal(t, 100, n)
	_, ok, err := s.LookupRequest(reqID(5001))
	require.NoError(t, err)
	require.True(t, ok)
	_, ok, err = s.LookupRequest(reqID(5000))
	require.NoError(t, err)
	require.False(t, ok)
}
