package internal

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/roomlog/roomlog/"

// floors lists, from the ground up, the roomlog packages the non-test
// files of each floor may import ("x/" stands for x and every package
// under it). A package that matches no entry (cmd/, bench/, chaos/,
// failover/, internal/harness/) may import anything: it is above them all.
// Together the entries say: version (what a binary is and which room
// versions it speaks) and zkx import nothing of roomlog; the recipes
// sit on zkx alone, never on logroom; no library package imports internal/
// (neither the harness nor its ground floor); the ground floor of the
// harness imports nothing of roomlog but itself. third_party/ (foreign
// code kept in this module: the patched ZooKeeper client) imports nothing
// of roomlog, and any floor may import it.
var floors = []struct {
	pkg string
	may []string
}{
	{"third_party/", nil},
	{"version", nil},
	{"zkx", nil},
	{"tlsfiles", nil}, // issue 29: TLS material from rotating PEM files, a leaf below everything
	{"store", []string{"version"}},
	{"logroom", []string{"zkx", "version"}},
	{"checkpoint", []string{"store", "version"}},
	{"archive", []string{"store", "logroom", "checkpoint", "version"}}, // issue 27: the archive sits on the log and checkpoint formats
	{"recipe/", []string{"zkx", "recipe/"}},
	{"replica/", []string{"zkx", "store", "logroom", "checkpoint", "archive", "recipe/", "replica/", "version", "tlsfiles"}},
	{"internal/infra/", []string{"internal/infra/", "tlsfiles"}},
}

// matches reports whether pkg is pattern ("x") or, for "x/", x or a
// package under it.
func matches(pkg, pattern string) bool {
	if dir, ok := strings.CutSuffix(pattern, "/"); ok {
		return pkg == dir || strings.HasPrefix(pkg, pattern)
	}
	return pkg == pattern
}

// allowed reports whether a non-test file of pkg may import dep, and if
// not, which floor forbids it.
func allowed(pkg, dep string) (floor string, ok bool) {
	for _, fl := range floors {
		if !matches(pkg, fl.pkg) {
			continue
		}
		may := matches(dep, "third_party/")
		for _, m := range fl.may {
			may = may || matches(dep, m)
		}
		if !may {
			return fl.pkg, false
		}
	}
	return "", true
}

// TestFloors checks the import rules of doc.go and of floors on the
// module's packages (non-test imports, as `go list` reports them).
func TestFloors(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module+"...")
	cmd.Dir = ".."
	out, err := cmd.Output()
	require.NoError(t, err, "go list")
	imports := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		var own []string
		for _, imp := range f[1:] {
			if strings.HasPrefix(imp, module) {
				own = append(own, strings.TrimPrefix(imp, module))
			}
		}
		imports[strings.TrimPrefix(f[0], module)] = own
	}
	for _, p := range []string{"zkx", "logroom", "replica", "recipe/election", "recipe/internal/zkr",
		"internal/infra/zkensemble", "internal/harness/testnode", "internal/harness/recipetest"} {
		require.Contains(t, imports, p, "the rules name a package that is gone: update floors")
	}
	for pkg, deps := range imports {
		for _, d := range deps {
			floor, ok := allowed(pkg, d)
			require.True(t, ok, "%s imports %s, which the floor %q may not (floors)", pkg, d, floor)
		}
	}
}

// TestFloorsCatch runs the rules on imports that break them.
func TestFloorsCatch(t *testing.T) {
	broken := map[string]string{
		"zkx":                  "logroom",
		"recipe/election":      "logroom",
		"recipe/internal/zkr":  "internal/harness/recipetest",
		"replica":              "internal/harness/testnode",
		"logroom":              "internal/infra/zkensemble",
		"internal/infra/spawn": "zkx",
	}
	for pkg, dep := range broken {
		_, ok := allowed(pkg, dep)
		require.False(t, ok, "%s importing %s passes the rules", pkg, dep)
	}
	_, ok := allowed("replica", "recipe/membership")
	require.True(t, ok)
}
