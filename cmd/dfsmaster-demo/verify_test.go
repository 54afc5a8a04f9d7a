package main

import (
	"context"
	"errors"
	"net"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/api"
	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/client"
)

// TestVerifyFindsLossAndMismatches builds a namespace on an in-process
// master, then a writer model that disagrees with it on purpose, and checks
// that verify blames exactly the acknowledged operations whose effects are
// missing and reports what no operation explains.
func TestVerifyFindsLossAndMismatches(t *testing.T) {
	_, addr := startMaster(t, true, "")
	c, err := client.New(addr, nil)
	require.NoError(t, err)
	ctx := context.Background()
	must := func(r client.MutationResult, err error) client.MutationResult {
		t.Helper()
		require.NoError(t, err)
		return r
	}
	must(c.Mkdir(ctx, "/w1", true))
	must(c.Mkdir(ctx, "/w1/d1", false))
	must(c.Create(ctx, "/w1/d1/f1", 2))
	b1 := must(c.AddBlock(ctx, "/w1/d1/f1", 10))
	must(c.AddBlock(ctx, "/w1/d1/f1", 20)) // not in the model: an unexpected block
	must(c.Create(ctx, "/w1/d1/f2", 1))
	must(c.Rename(ctx, "/w1/d1/f2", "/w1/d1/r2"))
	must(c.Create(ctx, "/w1/d1/keep", 1)) // the model says it was deleted
	final := must(c.Mkdir(ctx, "/w1", true)).Index

	w := newWriter(1, nil, nil, nil)
	acked := func(kind, p string) int {
		w.ops = append(w.ops, &opRec{id: len(w.ops), kind: kind, path: p, acked: true})
		return len(w.ops) - 1
	}
	root := acked(opSync, "/w1")
	d1 := acked(opMkdir, "/w1/d1")
	f1 := acked(opCreate, "/w1/d1/f1")
	blk := acked(opAddBlock, "/w1/d1/f1")
	f2 := acked(opCreate, "/w1/d1/f2")
	mv := acked(opRename, "/w1/d1/f2")
	lostCreate := acked(opCreate, "/w1/d1/f9") // never reached the master
	lostDelete := acked(opDelete, "/w1/d1/keep")
	// Not acknowledged (abandoned with an unknown outcome), yet in the model:
	// its missing file is a mismatch, not a loss.
	w.ops = append(w.ops, &opRec{id: len(w.ops), kind: opCreate, path: "/w1/d1/u", unknown: true})
	abandoned := len(w.ops) - 1
	w.dirs = []*dirState{{path: "/w1", op: root}, {path: "/w1/d1", op: d1}}
	w.files = []*fileState{
		{path: "/w1/d1/f1", repl: 2, create: f1, move: -1, blocks: []blockRec{{id: b1.BlockID, size: 10, op: blk}}},
		{path: "/w1/d1/r2", repl: 1, create: f2, move: mv},
		{path: "/w1/d1/f9", repl: 1, create: lostCreate, move: -1},
		{path: "/w1/d1/u", repl: 1, create: abandoned, move: -1},
	}
	w.gone = []goneRec{{path: "/w1/d1/f2", op: mv}, {path: "/w1/d1/keep", op: lostDelete}}

	v, err := verify(ctx, []*writer{w}, map[string]*client.Client{"m": c}, final, 3)
	require.NoError(t, err)
	require.Equal(t, map[opKey]bool{{1, lostCreate}: true, {1, lostDelete}: true}, v.lost)
	sort.Strings(v.mismatches)
	require.Len(t, v.mismatches, 3, "%q", v.mismatches)
	joined := strings.Join(v.mismatches, "\n")
	require.Contains(t, joined, "unexpected block")
	require.Contains(t, joined, "unexpected file keep in /w1/d1")
	require.Contains(t, joined, "file /w1/d1/u missing")
	require.Equal(t, len(w.dirs)+len(w.files)+len(w.gone), v.checks)

	// A model that matches has nothing to report.
	w.files = w.files[:2]
	w.files[0].blocks = nil
	w.gone = w.gone[:1]
	_, err = c.Delete(ctx, "/w1/d1/keep", false)
	require.NoError(t, err)
	_, err = c.Delete(ctx, "/w1/d1/f1", false)
	require.NoError(t, err)
	idx := must(c.Create(ctx, "/w1/d1/f1", 2)).Index
	v, err = verify(ctx, []*writer{w}, map[string]*client.Client{"m": c}, idx, 2)
	require.NoError(t, err)
	require.Empty(t, v.lost)
	require.Empty(t, v.mismatches)
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want outcome
	}{
		{"ok", nil, outcomeAcked},
		{"no primary", &client.Error{Status: 503, Code: api.CodeNoPrimary}, outcomeRetry},
		{"overloaded", &client.Error{Status: 503, Code: api.CodeOverloaded}, outcomeRetry},
		{"unavailable", &client.Error{Status: 503, Code: api.CodeUnavailable}, outcomeRetry},
		{"outcome unknown", &client.Error{Status: 503, Code: api.CodeOutcomeUnknown}, outcomeUnknown},
		{"timeout", &client.Error{Status: 504, Code: api.CodeTimeout}, outcomeUnknown},
		{"client gave up", &client.UnknownOutcomeError{Key: "k", Attempts: 8, Err: &client.Error{Status: 504, Code: api.CodeTimeout}}, outcomeUnknown},
		{"gave up at a dead master", &client.UnknownOutcomeError{Key: "k", Attempts: 2,
			Err: &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}}, outcomeUnknown},
		{"gave up in an election", &client.UnknownOutcomeError{Key: "k", Attempts: 2, Err: &client.Error{Status: 503, Code: api.CodeNoPrimary}}, outcomeUnknown},
		{"key reused", &client.Error{Status: 422, Code: api.CodeIdempotencyKeyReused}, outcomeFailed},
		{"rejected", &client.Error{Status: 409, Code: "already_exists"}, outcomeFailed},
		{"internal", &client.Error{Status: 500, Code: api.CodeInternal}, outcomeFailed},
		{"dial refused", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, outcomeRetry},
		{"reset after sending", &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}, outcomeUnknown},
		{"deadline", context.DeadlineExceeded, outcomeUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, classify(tc.err))
		})
	}
}
