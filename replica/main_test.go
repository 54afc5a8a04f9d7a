package replica

import (
	"os"
	"testing"

	"github.com/roomlog/roomlog/internal/infra/zkensemble"
)

// One single-server ensemble shared by the tests of this package (rooms and
// paths are unique per test); tests that break ZooKeeper start their own.
var shared = zkensemble.NewShared(zkensemble.Options{})

func sharedEnsemble(t testing.TB) *zkensemble.Ensemble {
	t.Helper()
	return shared.Get(t)
}

func TestMain(m *testing.M) { os.Exit(shared.Run(m)) }
