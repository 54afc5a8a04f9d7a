package zkensemble

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSharedWithoutZooKeeper(t *testing.T) {
	missing := fmt.Errorf("%w: run scripts/install-zookeeper.sh", ErrUnavailable)

	t.Run("CI=true fails", func(t *testing.T) {
		t.Setenv("CI", "true")
		f := &fakeTB{}
		s := NewShared(Options{})
		require.Nil(t, s.get(f, missing))
		require.Contains(t, f.fatal, "scripts/install-zookeeper.sh")
		require.Empty(t, f.skip)
		require.NoError(t, s.Close(), "nothing was started")
	})
	for _, ci := range []string{"", "false", "1"} {
		t.Run("CI="+ci+" skips", func(t *testing.T) {
			t.Setenv("CI", ci)
			f := &fakeTB{}
			s := NewShared(Options{})
			require.Nil(t, s.get(f, missing))
			require.Contains(t, f.skip, "scripts/install-zookeeper.sh")
			require.Empty(t, f.fatal)
		})
	}
}

// A failed start fails the test that started it and every later one, with
// the start's error; nothing is started again.
func TestSharedStartFails(t *testing.T) {
	s := NewShared(Options{Servers: 2})
	for range 2 {
		f := &fakeTB{}
		require.Nil(t, s.get(f, nil))
		require.Contains(t, f.fatal, "Servers=2")
		require.Empty(t, f.skip)
	}
	require.NoError(t, s.Close())
}

func TestShared(t *testing.T) {
	s := NewShared(Options{})
	t.Cleanup(func() { _ = s.Close() })
	e := s.Get(t)
	require.Same(t, e, s.Get(t), "one ensemble for every caller")
	require.True(t, e.Running(0))
	require.NoError(t, s.Close())
	require.False(t, e.Running(0))
	require.NoError(t, s.Close(), "idempotent")
}
