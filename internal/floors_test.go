package internal

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/roomlog/roomlog/"

// TestFloors checks the import rules of doc.go on the module's packages
// (non-test imports, as `go list` reports them).
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
	require.Contains(t, imports, "zkx")
	require.Contains(t, imports, "internal/harness/testnode")
	below := []string{"logroom", "store", "checkpoint", "replica", "recipe/", "zkx", "internal/infra/"}
	for pkg, deps := range imports {
		isBelow := false
		for _, b := range below {
			if pkg == strings.TrimSuffix(b, "/") || (strings.HasSuffix(b, "/") && strings.HasPrefix(pkg, b)) {
				isBelow = true
			}
		}
		for _, d := range deps {
			if isBelow {
				require.False(t, strings.HasPrefix(d, "internal/harness/"), "%s (below replica) imports %s", pkg, d)
			}
			switch {
			case pkg == "zkx":
				require.Fail(t, "zkx imports roomlog", "%s", d)
			case strings.HasPrefix(pkg, "internal/infra/"):
				require.True(t, strings.HasPrefix(d, "internal/infra/"), "%s (ground floor) imports %s", pkg, d)
			}
		}
	}
}
