package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEveryCommandHelp: every command, and every ctl command, has its own
// help: 'COMMAND -h' prints it to stdout with exit 0 and nothing on stderr,
// and it names the command.
func TestEveryCommandHelp(t *testing.T) {
	for _, sc := range subcommands() {
		for _, args := range [][]string{{sc.name, "-h"}, {sc.name, "--help"}, {"help", sc.name}} {
			var stdout, stderr bytes.Buffer
			require.Equal(t, exitOK, run(t.Context(), args, &stdout, &stderr), "%q: %s", args, stderr.String())
			require.Contains(t, stdout.String(), "usage: dfsmaster-demo "+sc.name, "%q", args)
			require.Empty(t, stderr.String(), "%q", args)
		}
	}
	for _, name := range []string{"mkdir", "create", "addblock", "rename", "delete", "ls", "stat", "status", "health", "hash"} {
		for _, args := range [][]string{{"ctl", name, "-h"}, {"ctl", "--addr", "127.0.0.1:1", name, "--help"}, {"ctl", name, "/p", "-h"}} {
			var stdout, stderr bytes.Buffer
			require.Equal(t, exitOK, run(t.Context(), args, &stdout, &stderr), "%q: %s", args, stderr.String())
			require.True(t, strings.HasPrefix(stdout.String(), "usage: dfsmaster-demo ctl [ctl flags] "+name), "%q: %s", args, stdout.String())
			require.Empty(t, stderr.String(), "%q", args)
		}
	}
	var stdout, stderr bytes.Buffer
	require.Equal(t, exitUsage, run(t.Context(), []string{"ctl", "frobnicate", "-h"}, &stdout, &stderr))
	require.Contains(t, stderr.String(), `unknown command "frobnicate"`)
}

// TestJSONEverywhere: every command that prints a result takes --json:
// ctl (before or after its command; the answer is JSON either way),
// restore, pair (checked by its flag set: the run itself is
// TestPairDemo's) and version.
func TestJSONEverywhere(t *testing.T) {
	_, addr := startMaster(t, true, "")
	for _, args := range [][]string{
		{"--json", "--addr", addr, "status"},
		{"--addr", addr, "status", "--json"},
		{"--addr", addr, "--json", "mkdir", "--json", "/j"},
		{"--addr", addr, "ls", "--json", "/"},
	} {
		code, out, errOut := ctl(t, args...)
		require.Equal(t, exitOK, code, "%q: %s", args, errOut)
		var v map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &v), "%q: %s", args, out)
	}
	// restore and pair know the flag: a bad line is refused for what is
	// wrong with it, not for --json.
	for _, args := range [][]string{{"restore", "--json"}, {"pair", "--json", "--zk-servers", "2"}} {
		var stdout, stderr bytes.Buffer
		require.Equal(t, exitUsage, run(t.Context(), args, &stdout, &stderr), "%q", args)
		require.NotContains(t, stderr.String(), "flag provided but not defined", "%q", args)
	}
}

// TestPairResultJSON: pair --json prints the result alone on stdout, one
// JSON object, and the progress (the RESULT line's place) elsewhere;
// without it the last progress line is RESULT {json}.
func TestPairResultJSON(t *testing.T) {
	res := pairResult{OK: true, OpsAcked: 42, Epoch: 2}
	var stdout, progress bytes.Buffer
	require.Equal(t, exitOK, printPairResult(&stdout, &printer{w: &progress}, res, true))
	require.Empty(t, progress.String())
	var got pairResult
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &got))
	require.Equal(t, res, got)

	stdout.Reset()
	res.OK = false
	require.Equal(t, exitError, printPairResult(&stdout, &printer{w: &progress}, res, false))
	require.Empty(t, stdout.String())
	require.True(t, strings.HasPrefix(progress.String(), "RESULT {"), progress.String())
}
