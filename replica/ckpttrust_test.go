package replica

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/checkpoint"
	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/store"

	"github.com/roomlog/roomlog/zkx"
)

// Trust-boundary tests of the replica's checkpoint paths: origin,
// hostile peers, junk on disk, deletion without a served checkpoint,
// crash leftovers, room names that URL escaping changes.

// ckptTrustRooms are room names logroom.ValidateName accepts that
// url.PathEscape changes (and a few it does not).
var ckptTrustRooms = []string{
	"a b", "a%20b", "a%b", "%", "100%", "命名空间", "命名 空间 %41", "ünïcödé", "a;b", "a,b", "a?b", "a#b",
	"{x}", "a+b", "a:b@c", "a=b&c", "...", `a\b`, "tab\u00a0nbsp", "plain",
}

// smallStore applies n set entries (epoch 1) to a new store in dir.
func smallStore(t *testing.T, dir string, n int) *store.Store {
	t.Helper()
	s, err := store.Open(dir, nil)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	var batch []store.Entry
	for i := 1; i <= n; i++ {
		batch = append(batch, store.Entry{Index: uint64(i), Epoch: 1, Data: setOp(fmt.Sprint("k", i), "v")})
		if len(batch) == 100 || i == n {
			_, err := s.Apply(batch)
			require.NoError(t, err)
			batch = batch[:0]
		}
	}
	return s
}

func TestCkptTrustHandlerRoomNames(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := smallStore(t, filepath.Join(t.TempDir(), "store"), 20)
	for _, room := range ckptTrustRooms {
		t.Run(room, func(t *testing.T) {
			require.NoError(t, logroom.ValidateName(room))
			origin := checkpoint.Origin{Room: room, RoomCzxid: 7}
			root := t.TempDir()
			_, err := checkpoint.Create(ctx, s, root, origin)
			require.NoError(t, err)
			r := &Replica{cfg: Config{Room: room}, ckptRoot: root}
			// Mounted as serveHTTP and the embedders (doc.go) do.
			mux := http.NewServeMux()
			mux.Handle(CheckpointPath(room), r.CheckpointHandler())
			srv := httptest.NewServer(mux)
			defer srv.Close()
			url := srv.URL + CheckpointPath(room)

			m, err := checkpoint.FetchManifest(ctx, url, checkpoint.FetchOptions{Origin: origin})
			require.NoError(t, err, "GET %smanifest", url)
			require.Equal(t, origin, m.Origin())
			info, err := checkpoint.Fetch(ctx, url, filepath.Join(t.TempDir(), "dst"), checkpoint.FetchOptions{Origin: origin})
			require.NoError(t, err, "GET %s", url)
			require.EqualValues(t, 20, info.Manifest.Index)

			// Another room's path (an extension of this name) is not served.
			other := srv.URL + CheckpointPath(room+"x")
			resp, err := http.Get(other + "manifest")
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusNotFound, resp.StatusCode)
			// Nor is anything else under this room's path.
			resp, err = http.Get(url + "other")
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusNotFound, resp.StatusCode)
		})
	}
}

// logBuf collects log lines (safe for concurrent use).
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// lineWith returns the last line containing s ("" if none).
func (l *logBuf) lineWith(s string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	lines := strings.Split(l.b.String(), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], s) {
			return lines[i]
		}
	}
	return ""
}

// openWith opens id like cluster.open, with mut applied to its config.
func openWith(c *cluster, id string, mut func(*Config)) *Replica {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := c.config(id)
	if mut != nil {
		mut(&cfg)
	}
	r, err := Open(ctx, cfg)
	require.NoError(c.t, err)
	c.mu.Lock()
	c.reps[id] = r
	c.mu.Unlock()
	return r
}

// fakeMember creates an ephemeral members/<id> node from a second session
// (as a live member would hold it), advertising addr and a checkpoint.
func fakeMember(t *testing.T, ens *zkensemble.Ensemble, r *Replica, id, addr string, ckpt uint64) {
	t.Helper()
	conn := zkConn(t, ens)
	d := memberData{V: formatVersion1, ID: id, Addr: addr, Role: roleStrStandby, Applied: 1 << 40, Checkpoint: ckpt}
	_, err := conn.Create(r.room.Path(membersDir)+"/"+id, encode(d), zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
}

// gate serves h while open, 503 otherwise.
type gate struct {
	open atomic.Bool
	h    http.Handler
	hits atomic.Int64
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.hits.Add(1)
	if !g.open.Load() {
		http.Error(w, "closed by the test", http.StatusServiceUnavailable)
		return
	}
	g.h.ServeHTTP(w, r)
}

// stallHalf answers what h answers, with its full Content-Length, but
// sends only the first half of the body and then nothing until the client
// gives up or the test ends.
func stallHalf(t *testing.T, h http.Handler, hits *atomic.Int64) http.Handler {
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		body := rec.Body.Bytes()
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		w.Write(body[:len(body)/2])
		http.NewResponseController(w).Flush()
		select {
		case <-r.Context().Done():
		case <-done:
		}
	})
}

// serveCheckpointRoot serves root's newest checkpoint at room's path.
func serveCheckpointRoot(t *testing.T, room, root string, hits *atomic.Int64) *httptest.Server {
	mux := http.NewServeMux()
	r := &Replica{cfg: Config{Room: room}, ckptRoot: root}
	h := r.CheckpointHandler()
	mux.Handle(CheckpointPath(room), http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		hits.Add(1)
		h.ServeHTTP(w, req)
	}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// junkTar is a checkpoint stream with a valid manifest (checksum, origin)
// of index, and no files: it describes no store.
func junkTar(t *testing.T, origin checkpoint.Origin, index uint64) []byte {
	m := checkpoint.Manifest{FormatVersion: checkpoint.FormatVersion, Room: origin.Room, RoomCzxid: origin.RoomCzxid,
		Epoch: 1, Index: index, Files: []checkpoint.File{}}
	mb, err := m.Marshal()
	require.NoError(t, err)
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: checkpoint.ManifestName, Typeflag: tar.TypeReg, Size: int64(len(mb)), Mode: 0o644}))
	_, err = tw.Write(mb)
	require.NoError(t, err)
	require.NoError(t, tw.Close())
	return b.Bytes()
}

// requireOwnCheckpointsOnly checks every checkpoint listed under r's root
// is of r's origin and opens.
func requireOwnCheckpointsOnly(t *testing.T, r *Replica) {
	t.Helper()
	l, err := checkpoint.List(r.ckptRoot)
	require.NoError(t, err)
	for _, info := range l {
		_, err := checkpoint.Check(info.Path, r.origin())
		require.NoError(t, err, "%s lists a checkpoint it must not keep", r.ID())
	}
}

// TestCkptTrustBootstrapFallback: a standby behind a deleted channel finds
// only hostile or broken sources (junk manifest, a peer that stalls
// mid-stream, a redirect, a checkpoint of another incarnation of the same
// room name, a primary answering 503): each is tried in turn (best index
// first), each refused within its bound, the error names them all, and
// the store stays as it was. Once a good source answers, it bootstraps.
func TestCkptTrustBootstrapFallback(t *testing.T) {
	ens := sharedEnsemble(t)
	c := newCluster(t, ens, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	// m0 advertises a front the test can close; its own handler behind it.
	front := &gate{}
	front.open.Store(true)
	frontSrv := httptest.NewServer(front)
	defer frontSrv.Close()
	m0 := openWith(c, "m0", func(cfg *Config) { cfg.ListenAddr, cfg.AdvertiseAddr = "", frontSrv.URL })
	mux := http.NewServeMux()
	mux.Handle(CheckpointPath(c.room), m0.CheckpointHandler())
	front.h = mux
	require.Equal(t, m0, c.waitPrimary(20*time.Second))
	m1 := c.open("m1")
	c.waitPrimary(20 * time.Second)
	for i := 0; i < 50; i++ {
		_, err := m0.Propose(ctx, setOp(fmt.Sprint("a", i), "v"))
		require.NoError(t, err)
	}
	idx, err := m0.Barrier(ctx)
	require.NoError(t, err)
	c.waitConverged(idx, 20*time.Second)
	hash1, applied1, err := m1.StateHash()
	require.NoError(t, err)
	c.close("m1")

	for i := 0; i < 50; i++ {
		_, err := m0.Propose(ctx, setOp(fmt.Sprint("b", i), "v"))
		require.NoError(t, err)
	}
	require.NoError(t, m0.Checkpoint(ctx))
	base := m0.Status().CheckpointIndex
	require.Greater(t, base, applied1)
	require.Eventually(t, func() bool {
		chans, err := m0.Room().Channels(ctx)
		return err == nil && chans[0].FirstIndex > applied1+1
	}, 20*time.Second, 5*time.Millisecond, "the channels m1 still needs are deleted")

	// The hostile sources, all advertising more than m0.
	own := m0.origin()
	var junkHits, stallHits, redirHits, foreignHits atomic.Int64
	junk := junkTar(t, own, 1_000_000)
	junkSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		junkHits.Add(1)
		w.Write(junk)
	}))
	defer junkSrv.Close()
	stallSrv := httptest.NewServer(stallHalf(t, mux, &stallHits))
	defer stallSrv.Close()
	redirSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		redirHits.Add(1)
		http.Redirect(w, r, frontSrv.URL+r.URL.Path, http.StatusFound)
	}))
	defer redirSrv.Close()
	// Another incarnation of the same room name: a real, valid checkpoint.
	foreign := checkpoint.Origin{Room: c.room, RoomCzxid: own.RoomCzxid + 1}
	fstore := smallStore(t, filepath.Join(t.TempDir(), "foreign-store"), int(base)+200)
	froot := t.TempDir()
	_, err = checkpoint.Create(ctx, fstore, froot, foreign)
	require.NoError(t, err)
	foreignSrv := serveCheckpointRoot(t, c.room, froot, &foreignHits)

	fakeMember(t, ens, m0, "h-junk", junkSrv.URL, 1_000_000)
	fakeMember(t, ens, m0, "h-stall", stallSrv.URL, base+400)
	fakeMember(t, ens, m0, "h-redirect", redirSrv.URL, base+300)
	fakeMember(t, ens, m0, "h-foreign", foreignSrv.URL, base+200)
	front.open.Store(false)

	// m1 comes back: every source fails; its store is untouched.
	const idle = 500 * time.Millisecond
	fetchOpts := func(cfg *Config) {
		cfg.CheckpointFetch = checkpoint.FetchOptions{ConnectTimeout: time.Second, ResponseHeaderTimeout: time.Second, IdleTimeout: idle}
	}
	// (The error is read from m1's log: Status().TailErr races with the
	// tail goroutine, see the report.)
	logs := &logBuf{}
	m1 = openWith(c, "m1", func(cfg *Config) {
		fetchOpts(cfg)
		cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	var msg string
	require.Eventually(t, func() bool {
		msg = logs.lineWith(ErrNoCheckpointSource.Error() + ": need index")
		if msg == "" {
			return false
		}
		for _, id := range []string{"h-junk", "h-stall", "h-redirect", "h-foreign", "m0"} {
			if !strings.Contains(msg, id+`\" (index`) {
				return false
			}
		}
		return true
	}, 30*time.Second, 5*time.Millisecond, "m1 reports every failed source")
	t.Logf("m1: %s", msg)
	require.Contains(t, msg, "idle timeout", "the stalled peer timed out")
	require.Contains(t, msg, "redirect")
	require.Contains(t, msg, fmt.Sprintf("0x%x", foreign.RoomCzxid), "the foreign incarnation is named")
	require.Contains(t, msg, fmt.Sprintf("0x%x", own.RoomCzxid))
	require.Contains(t, msg, "503")
	for name, n := range map[string]*atomic.Int64{"junk": &junkHits, "stall": &stallHits, "redirect": &redirHits, "foreign": &foreignHits} {
		require.Positive(t, n.Load(), "the %s source was never tried", name)
	}
	hash, applied, err := m1.StateHash()
	require.NoError(t, err)
	require.Equal(t, applied1, applied, "m1's store changed")
	require.Equal(t, hash1, hash, "m1's store changed")
	require.Zero(t, m1.Status().Bootstraps)
	requireOwnCheckpointsOnly(t, m1)
	require.NotEqual(t, uint64(1_000_000), m1.Status().CheckpointIndex)

	// m0 serves again: m1 bootstraps from it, a new member too.
	front.open.Store(true)
	m2 := openWith(c, "m2", fetchOpts)
	idx, err = m0.Barrier(ctx)
	require.NoError(t, err)
	c.waitConverged(idx, 30*time.Second)
	require.Equal(t, 1, m1.Status().Bootstraps)
	require.Equal(t, 1, m2.Status().Bootstraps)
	requireOwnCheckpointsOnly(t, m1)
	requireOwnCheckpointsOnly(t, m2)
	v, err := m1.Get([]byte("b49"))
	require.NoError(t, err)
	require.Equal(t, "v", string(v))
	v, err = m1.Get([]byte(fmt.Sprint("k", base+100)))
	require.True(t, errors.Is(err, store.ErrNotFound) || (err == nil && v == nil), "foreign state leaked into m1: %q %v", v, err)
}

// TestCkptTrustBootstrapOddRoomName: a room whose name URL escaping
// changes serves and fetches its checkpoints (end to end, and through the
// primary's deletion probe).
func TestCkptTrustBootstrapOddRoomName(t *testing.T) {
	ens := sharedEnsemble(t)
	c := newCluster(t, ens, nil)
	c.room = "命名 空间 a%20b;" + newGUID()[:6]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m0 := c.open("m0")
	require.Equal(t, m0, c.waitPrimary(20*time.Second))
	for i := 0; i < 30; i++ {
		_, err := m0.Propose(ctx, setOp(fmt.Sprint("k", i), "v"))
		require.NoError(t, err)
	}
	require.NoError(t, m0.Checkpoint(ctx))
	require.Eventually(t, func() bool {
		chans, err := m0.Room().Channels(ctx)
		return err == nil && chans[0].FirstIndex > 1
	}, 20*time.Second, 5*time.Millisecond, "channel 1 deleted (the primary's own served checkpoint covers it)")
	m1 := c.open("m1")
	idx, err := m0.Barrier(ctx)
	require.NoError(t, err)
	c.waitConverged(idx, 30*time.Second)
	require.Equal(t, 1, m1.Status().Bootstraps)
}

// TestCkptTrustOpenDropsBadCheckpoints: checkpoints left on disk that do
// not open as a store, record another origin or none (format 1) are
// removed at Open, never advertised nor served; the replica makes a fresh
// checkpoint in their place.
func TestCkptTrustOpenDropsBadCheckpoints(t *testing.T) {
	ens := sharedEnsemble(t)
	c := newCluster(t, ens, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m0 := c.open("m0")
	c.waitPrimary(20 * time.Second)
	for i := 0; i < 30; i++ {
		_, err := m0.Propose(ctx, setOp(fmt.Sprint("k", i), "v"))
		require.NoError(t, err)
	}
	require.NoError(t, m0.Checkpoint(ctx))
	own := m0.origin()
	good, err := checkpoint.Newest(m0.ckptRoot)
	require.NoError(t, err)
	root := m0.ckptRoot
	c.close("m0")

	// Junk: valid checksum and origin, no files, index 10^6.
	junkDir := filepath.Join(root, fmt.Sprintf("ckpt-%020d", 1_000_000))
	require.NoError(t, os.MkdirAll(filepath.Join(junkDir, checkpoint.DBDir), 0o755))
	jm := checkpoint.Manifest{FormatVersion: checkpoint.FormatVersion, Room: own.Room, RoomCzxid: own.RoomCzxid, Epoch: 1, Index: 1_000_000, Files: []checkpoint.File{}}
	jb, err := jm.Marshal()
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(junkDir, checkpoint.ManifestName), jb, 0o644))
	// Another incarnation's valid checkpoint at a higher index.
	fstore := smallStore(t, filepath.Join(t.TempDir(), "foreign-store"), int(good.Manifest.Index)+50)
	_, err = checkpoint.Create(ctx, fstore, root, checkpoint.Origin{Room: own.Room, RoomCzxid: own.RoomCzxid + 1})
	require.NoError(t, err)
	// The good one rewritten as format 1 (no origin).
	lm := good.Manifest
	lm.FormatVersion, lm.RoomCzxid = 1, 0
	lb, err := lm.Marshal()
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(good.Path, checkpoint.ManifestName), lb, 0o644))
	l, err := checkpoint.List(root)
	require.NoError(t, err)
	require.Len(t, l, 3)

	m0 = c.open("m0")
	require.NotEqual(t, uint64(1_000_000), m0.Status().CheckpointIndex, "junk advertised")
	requireOwnCheckpointsOnly(t, m0)
	_, err = os.Stat(junkDir)
	require.True(t, os.IsNotExist(err), "junk kept on disk")
	// A fresh checkpoint replaces the dropped ones, and is what is served.
	require.Eventually(t, func() bool {
		return m0.Status().CheckpointIndex >= good.Manifest.Index
	}, 20*time.Second, 5*time.Millisecond, "a new checkpoint")
	requireOwnCheckpointsOnly(t, m0)
	m, err := checkpoint.FetchManifest(ctx, "http://"+m0.ListenAddr()+CheckpointPath(c.room), checkpoint.FetchOptions{Origin: own})
	require.NoError(t, err)
	require.Equal(t, m0.Status().CheckpointIndex, m.Index)
}

// TestCkptTrustDeletionNeedsServedCheckpoint: with no member serving a
// checkpoint, no channel is deleted even though every member applied it;
// the room fills up to ErrRoomFull; a member that serves a checkpoint
// unblocks deletion and appends succeed again.
func TestCkptTrustDeletionNeedsServedCheckpoint(t *testing.T) {
	ens := sharedEnsemble(t)
	c := newCluster(t, ens, func(cfg *Config) {
		cfg.ListenAddr = ""
		cfg.CheckpointEveryEntries, cfg.CheckpointEveryBytes = -1, -1
		cfg.Writer.MaxRoomBytes = 256 << 10
		cfg.RetainRoomBytes = 64 << 10
	})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c.openN(2)
	p := c.waitPrimary(20 * time.Second)
	for i := 0; i < 20; i++ {
		_, err := p.Propose(ctx, setOp(fmt.Sprint("k", i), "v"))
		require.NoError(t, err)
	}
	require.NoError(t, p.Checkpoint(ctx))
	allApplied := func() bool {
		a := p.Status().Applied
		ms := p.Status().Members
		if len(ms) != 2 {
			return false
		}
		for _, m := range ms {
			if m.Applied < a {
				return false
			}
		}
		return true
	}
	require.Eventually(t, allApplied, 10*time.Second, 5*time.Millisecond, "every member published its applied index")
	// Now every live member applied the sealed channels and the primary's
	// checkpoint covers them: only the missing served checkpoint holds them.
	require.NoError(t, p.Checkpoint(ctx))
	chans, err := p.Room().Channels(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(chans), 3)
	require.EqualValues(t, 1, chans[0].FirstIndex, "a channel was deleted though no member serves a checkpoint")

	// The room fills up: a clear, recoverable backpressure error.
	// Incompressible values: batches are stored as they are, so the room's
	// bytes grow with what is proposed.
	rng := rand.New(rand.NewPCG(1, 2))
	raw := make([]byte, 2000)
	var fullErr error
	for i := 0; i < 2000 && fullErr == nil; i++ {
		for j := range raw {
			raw[j] = byte(rng.Uint32())
		}
		_, err := p.Propose(ctx, setOp(fmt.Sprint("f", i), string(raw)))
		if errors.Is(err, logroom.ErrRoomFull) {
			fullErr = err
		} else {
			require.NoError(t, err)
		}
	}
	require.Error(t, fullErr, "the room never filled up")
	t.Logf("full: %v", fullErr)
	chans, err = p.Room().Channels(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, chans[0].FirstIndex)

	// A member that serves checkpoints joins and checkpoints: deletion resumes.
	srv := openWith(c, "server", func(cfg *Config) { cfg.ListenAddr = "127.0.0.1:0" })
	require.Eventually(t, func() bool { return srv.Status().Applied >= p.Status().Applied }, 30*time.Second, 5*time.Millisecond, "server caught up")
	require.NoError(t, srv.Checkpoint(ctx))
	require.Eventually(t, func() bool {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		defer ccancel()
		if err := p.Checkpoint(cctx); err != nil {
			t.Logf("checkpoint: %v", err)
		}
		_, err := p.Propose(cctx, setOp("after", string(raw)))
		return err == nil
	}, 30*time.Second, 5*time.Millisecond, "appends succeed once a served checkpoint allows deletion")
	chans, err = p.Room().Channels(ctx)
	require.NoError(t, err)
	require.Greater(t, chans[0].FirstIndex, uint64(1))
}

// TestCkptTrustOpenRecoversInterruptedRestore: the leftovers of a crash in
// the middle of a bootstrap's store swap are resolved at Open.
func TestCkptTrustOpenRecoversInterruptedRestore(t *testing.T) {
	ens := sharedEnsemble(t)
	c := newCluster(t, ens, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m0 := c.open("m0")
	c.waitPrimary(20 * time.Second)
	for i := 0; i < 30; i++ {
		_, err := m0.Propose(ctx, setOp(fmt.Sprint("k", i), "v"))
		require.NoError(t, err)
	}
	hash, idx, err := m0.StateHash()
	require.NoError(t, err)
	c.close("m0")
	dir := filepath.Join(c.root, "m0")
	storeDir := filepath.Join(dir, "store")
	leftovers := func() []string {
		var out []string
		ents, err := os.ReadDir(dir)
		require.NoError(t, err)
		for _, e := range ents {
			if e.Name() == "store.old" || strings.HasPrefix(e.Name(), ".tmp-restore-") {
				out = append(out, e.Name())
			}
		}
		return out
	}
	reopen := func() {
		t.Helper()
		m0 = c.open("m0")
		require.Empty(t, leftovers())
		h, i, err := m0.StateHash()
		require.NoError(t, err)
		require.Equal(t, idx, i)
		require.Equal(t, hash, h)
		require.Zero(t, m0.Status().Bootstraps)
		c.close("m0")
	}

	// Crash after the store was moved aside, with a restore half copied:
	// the old store is put back (not replaced by an empty one).
	require.NoError(t, os.Rename(storeDir, storeDir+".old"))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, ".tmp-restore-123", "junk"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, ".tmp-restore-123", "000001.sst"), []byte("partial"), 0o644))
	reopen()

	// Crash after the restored store was renamed into place, before the
	// old one was deleted: the old one goes.
	require.NoError(t, os.MkdirAll(storeDir+".old", 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(storeDir+".old", "MANIFEST-000001"), []byte("old"), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, ".tmp-restore-456"), 0o755))
	reopen()
}

// TestCkptTrustDropStopsAdvertising: a checkpoint dropped after a failed
// restore, or moved aside by the handler because its files no longer match
// its manifest, is no longer listed, served, or advertised (localCkpt,
// which member data publishes, follows the disk and may go down).
func TestCkptTrustDropStopsAdvertising(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := smallStore(t, filepath.Join(dir, "store"), 10)
	origin := checkpoint.Origin{Room: "r", RoomCzxid: 9}
	root := filepath.Join(dir, "checkpoints")
	var infos []checkpoint.Info
	for i := 0; i < 3; i++ {
		info, err := checkpoint.Create(ctx, s, root, origin)
		require.NoError(t, err)
		infos = append(infos, info)
		_, err = s.Apply([]store.Entry{{Index: s.AppliedIndex() + 1, Epoch: 1, Data: setOp("x", fmt.Sprint(i))}})
		require.NoError(t, err)
	}
	r := &Replica{cfg: Config{Room: "r"}, roomCzxid: 9, ckptRoot: root, log: slog.New(slog.DiscardHandler), ckptReady: zkx.NewSignal()}
	r.localCkpt.Store(infos[2].Manifest.Index)
	published := func() bool {
		select {
		case <-r.ckptReady.C():
			return true
		default:
			return false
		}
	}

	// A failed restore drops the newest.
	r.dropCheckpoint(infos[2].Path, errors.New("restore failed (test)"))
	_, err := os.Stat(infos[2].Path)
	require.True(t, os.IsNotExist(err))
	require.Equal(t, infos[1].Manifest.Index, r.localCkpt.Load())
	require.True(t, published(), "the lower index is published")

	// The handler finds the next newest broken and moves it aside; the
	// sweep's refresh follows.
	big := infos[1].Manifest.Files[0]
	for _, f := range infos[1].Manifest.Files {
		if f.Size > big.Size {
			big = f
		}
	}
	p := filepath.Join(infos[1].Path, checkpoint.DBDir, big.Name)
	require.NoError(t, os.Remove(p))
	require.NoError(t, os.WriteFile(p, []byte("x"), 0o644))
	srv := httptest.NewServer(stripRoomPrefix("r", checkpoint.Handler(root)))
	defer srv.Close()
	m, err := checkpoint.FetchManifest(ctx, srv.URL+CheckpointPath("r"), checkpoint.FetchOptions{Origin: origin})
	require.NoError(t, err)
	require.Equal(t, infos[0].Manifest.Index, m.Index, "the broken checkpoint is not served")
	r.refreshLocalCkpt()
	require.Equal(t, infos[0].Manifest.Index, r.localCkpt.Load())
	require.True(t, published())
	requireOwnCheckpointsOnly(t, r)

	// Nothing left: 0 is advertised.
	r.dropCheckpoint(infos[0].Path, errors.New("test"))
	require.Zero(t, r.localCkpt.Load())
}
