package replica

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/store"
)

// cluster is a set of in-process replicas of one room.
type cluster struct {
	t      testing.TB
	ens    *zkensemble.Ensemble
	room   string
	root   string
	mutate func(*Config)

	mu   sync.Mutex
	reps map[string]*Replica
}

func newCluster(t testing.TB, ens *zkensemble.Ensemble, mutate func(*Config)) *cluster {
	c := &cluster{t: t, ens: ens, room: "r" + newGUID()[:10], root: t.TempDir(), mutate: mutate, reps: map[string]*Replica{}}
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, r := range c.reps {
			require.NoError(t, r.Close())
		}
	})
	return c
}

func (c *cluster) config(id string) Config {
	cfg := Config{
		Servers:        c.ens.Addrs(),
		SessionTimeout: 4 * time.Second, // session tests shorten it; loaded CI machines need slack
		Room:           c.room,
		ID:             id,
		DataDir:        filepath.Join(c.root, id),
		ListenAddr:     "127.0.0.1:0",
		Logger:         testLogger(c.t),
	}
	if c.mutate != nil {
		c.mutate(&cfg)
	}
	return cfg
}

func (c *cluster) open(id string) *Replica {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := Open(ctx, c.config(id))
	require.NoError(c.t, err)
	c.mu.Lock()
	c.reps[id] = r
	c.mu.Unlock()
	return r
}

func (c *cluster) openN(n int) []*Replica {
	out := make([]*Replica, n)
	for i := range out {
		out[i] = c.open(fmt.Sprintf("m%d", i))
	}
	return out
}

// close closes id and forgets it.
func (c *cluster) close(id string) {
	c.t.Helper()
	c.mu.Lock()
	r := c.reps[id]
	delete(c.reps, id)
	c.mu.Unlock()
	require.NoError(c.t, r.Close())
}

func (c *cluster) all() []*Replica {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*Replica, 0, len(c.reps))
	for _, r := range c.reps {
		out = append(out, r)
	}
	return out
}

// waitPrimary waits until exactly one replica is primary and every other
// other returns a replica of the cluster other than p (the last in all's
// order): in a pair, the standby.
func (c *cluster) other(p *Replica) *Replica {
	c.t.Helper()
	var s *Replica
	for _, r := range c.all() {
		if r != p {
			s = r
		}
	}
	require.NotNil(c.t, s, "no replica but the primary")
	return s
}

// is a standby that names it, and returns it.
func (c *cluster) waitPrimary(d time.Duration) *Replica {
	c.t.Helper()
	var p *Replica
	require.Eventually(c.t, func() bool {
		p = nil
		reps := c.all()
		for _, r := range reps {
			if r.Status().Role == RolePrimary {
				if p != nil {
					return false
				}
				p = r
			}
		}
		if p == nil {
			return false
		}
		for _, r := range reps {
			s := r.Status()
			if r != p && (s.Role != RoleStandby || s.PrimaryID != p.ID()) {
				return false
			}
		}
		return true
	}, d, 5*time.Millisecond, "exactly one primary in %s", c.room)
	return p
}

// waitConverged waits until every replica applied at least idx and all
// report the same state hash at the same index.
func (c *cluster) waitConverged(idx uint64, d time.Duration) string {
	c.t.Helper()
	var hash string
	require.Eventually(c.t, func() bool {
		hash = ""
		var at uint64
		for _, r := range c.all() {
			h, i, err := r.StateHash()
			if err != nil || i < idx {
				return false
			}
			if hash == "" {
				hash, at = h, i
			} else if h != hash || i != at {
				return false
			}
		}
		return true
	}, d, 5*time.Millisecond, "replicas converge at >= %d", idx)
	return hash
}

func setOp(k, v string) []byte {
	b, err := store.EncodeOps([]store.Op{{Kind: store.OpSet, Key: []byte(k), Value: []byte(v)}})
	if err != nil {
		panic(err)
	}
	return b
}

// proposeRetry proposes on whichever replica is primary, retrying
// not-primary and transient errors until ctx ends. It returns the result
// and whether it was acknowledged.
func (c *cluster) proposeRetry(ctx context.Context, entry []byte) (Result, error) {
	for {
		var lastErr error
		for _, r := range c.all() {
			if r.Status().Role != RolePrimary {
				continue
			}
			res, err := r.Propose(ctx, entry)
			if err == nil {
				return res, nil
			}
			lastErr = err
			if errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, ErrNoResponse) {
				return res, err
			}
		}
		select {
		case <-ctx.Done():
			if lastErr == nil {
				lastErr = ctx.Err()
			}
			return Result{}, lastErr
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// newGUID returns 32 hex characters of randomness (unique test paths).
func newGUID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("replica: crypto/rand: %v", err))
	}
	return hex.EncodeToString(b[:])
}

// guidHexLen is the length of an election guid.
const guidHexLen = 32

// candidateData is the election recipe's candidate format (recipe/election
// owns it; the replica's address is its data), for forging candidates.
type candidateData struct {
	V    int    `msgpack:"v"`
	ID   string `msgpack:"id"`
	Addr string `msgpack:"data"` // msgpack str; the recipe reads it as bytes
}
