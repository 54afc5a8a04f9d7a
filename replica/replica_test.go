package replica

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/store"
)

func TestConfigValidate(t *testing.T) {
	good := Config{Servers: []string{"127.0.0.1:2181"}, Room: "r1", ID: "m1", DataDir: "/tmp/x"}
	require.NoError(t, good.Validate())
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		fields []string
	}{
		{"empty", func(c *Config) { *c = Config{} }, []string{"Servers", "Room", "ID", "DataDir"}},
		{"bad server", func(c *Config) { c.Servers = []string{"nohost"} }, []string{"Servers[0]"}},
		{"session", func(c *Config) { c.SessionTimeout = time.Millisecond }, []string{"SessionTimeout"}},
		{"base", func(c *Config) { c.Base = "rel/" }, []string{"Base"}},
		{"base root", func(c *Config) { c.Base = "/" }, []string{"Base", "must be absolute"}},
		{"base reserved", func(c *Config) { c.Base = "/zookeeper/x" }, []string{"Base", `component "zookeeper": reserved`}},
		{"room", func(c *Config) { c.Room = "a/b" }, []string{"Room"}},
		{"id slash", func(c *Config) { c.ID = "a/b" }, []string{"ID"}},
		{"id space", func(c *Config) { c.ID = "a b" }, []string{"ID"}},
		{"id dot", func(c *Config) { c.ID = ".." }, []string{"ID"}},
		{"advertise", func(c *Config) { c.AdvertiseAddr = "ftp://x" }, []string{"AdvertiseAddr"}},
		{"listen", func(c *Config) { c.ListenAddr = "nope" }, []string{"ListenAddr"}},
		{"keep", func(c *Config) { c.KeepCheckpoints = -1 }, []string{"KeepCheckpoints"}},
		{"pending", func(c *Config) { c.MaxPendingProposals = -1 }, []string{"MaxPendingProposals"}},
		{"owner", func(c *Config) { c.Writer.Owner = "x" }, []string{"Writer.Owner"}},
		{"oncommit", func(c *Config) { c.Writer.OnCommit = func([]logroom.Entry) {} }, []string{"Writer.OnCommit"}},
		{"writer", func(c *Config) { c.Writer.MaxInFlight = -1 }, []string{"Writer:"}},
		{"store", func(c *Config) { c.StoreOptions = &store.Options{GroupSyncInterval: time.Hour} }, []string{"StoreOptions"}},
		{"many", func(c *Config) { c.ID = ""; c.Room = ""; c.TransferTimeout = -1 }, []string{"ID", "Room", "TransferTimeout"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.mutate(&c)
			err := c.Validate()
			require.Error(t, err)
			require.ErrorIs(t, err, ErrInvalidConfig)
			for _, f := range tc.fields {
				require.Contains(t, err.Error(), f)
			}
		})
	}
	for _, a := range []string{"host:1", "http://host:1", "https://h:2/x/"} {
		c := good
		c.AdvertiseAddr = a
		require.NoError(t, c.Validate(), a)
	}
}

func TestElectProposeRead(t *testing.T) {
	ens := sharedEnsemble(t)
	c := newCluster(t, ens, nil)
	reps := c.openN(3)
	p := c.waitPrimary(20 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	res, err := p.Propose(ctx, setOp("k1", "v1"))
	require.NoError(t, err)
	require.NotZero(t, res.Index)
	require.NoError(t, store.OpsResult(res.Response))
	v, err := p.Get([]byte("k1"))
	require.NoError(t, err, "a read right after Propose sees the write")
	require.Equal(t, "v1", string(v))
	require.GreaterOrEqual(t, p.Status().Applied, res.Index)

	// A rejected command is a response, not an error.
	res2, err := p.Propose(ctx, []byte("garbage"))
	require.NoError(t, err)
	require.ErrorIs(t, store.OpsResult(res2.Response), store.ErrRejected)
	require.Equal(t, res.Index+1, res2.Index)

	for _, r := range reps {
		if r == p {
			continue
		}
		_, err := r.Propose(ctx, setOp("x", "y"))
		require.ErrorIs(t, err, ErrNotPrimary)
		var np *NotPrimaryError
		require.True(t, errors.As(err, &np))
		require.Equal(t, p.ID(), np.PrimaryID)
		require.Equal(t, p.cfg.AdvertiseAddr, np.PrimaryAddr)
		require.NotEmpty(t, np.PrimaryAddr)
		require.False(t, np.Self, "a standby does not name itself")
		require.NoError(t, r.WaitApplied(ctx, res2.Index))
		v, err := r.Get([]byte("k1"))
		require.NoError(t, err)
		require.Equal(t, "v1", string(v))
	}
	c.waitConverged(res2.Index, 10*time.Second)

	st := p.Status()
	require.Equal(t, RolePrimary, st.Role)
	require.Len(t, st.Members, 3)
	require.True(t, st.Connected)
	require.NotZero(t, st.Epoch)
}

// TestNotPrimarySelf: a replica that won the election but is still taking
// over names itself, with Self set, so an embedder retries rather than
// stops as if it were a standby (the README's example once did: it saw
// its own address and returned without committing).
func TestNotPrimarySelf(t *testing.T) {
	r := &Replica{cfg: Config{ID: "m1", AdvertiseAddr: "10.0.0.1:7000"}}
	r.snap.Store(&statusSnap{role: RoleTakingOver, primaryID: "m1", primaryAddr: ""})
	var np *NotPrimaryError
	require.True(t, errors.As(r.notPrimary(), &np))
	require.True(t, np.Self)
	require.Equal(t, "10.0.0.1:7000", np.PrimaryAddr)
	require.Contains(t, np.Error(), "taking over or handing over")

	r.snap.Store(&statusSnap{role: RoleStandby, primaryID: "m2", primaryAddr: "10.0.0.2:7000"})
	require.True(t, errors.As(r.notPrimary(), &np))
	require.False(t, np.Self)
	require.Equal(t, "10.0.0.2:7000", np.PrimaryAddr)
}
