package replica

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/roomlog/roomlog/internal/infra/zkensemble"
)

// One single-server ensemble shared by the tests of this package (rooms and
// paths are unique per test); tests that break ZooKeeper start their own.
var (
	sharedOnce sync.Once
	sharedEns  *zkensemble.Ensemble
	sharedErr  error
)

func sharedEnsemble(t testing.TB) *zkensemble.Ensemble {
	t.Helper()
	zkensemble.Require(t)
	sharedOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		sharedEns, sharedErr = zkensemble.Start(ctx, zkensemble.Options{})
	})
	if sharedErr != nil {
		t.Fatalf("start shared ensemble: %v", sharedErr)
	}
	return sharedEns
}

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedEns != nil {
		if err := sharedEns.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "close shared ensemble:", err)
		}
	}
	os.Exit(code)
}
