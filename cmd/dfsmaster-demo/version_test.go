package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/api"
	"github.com/roomlog/roomlog/internal/cli"
	"github.com/roomlog/roomlog/replica"
	"github.com/roomlog/roomlog/version"
)

// TestVersionCommand: "version" and "--version" print version.Info's line
// and exit 0; the usage lists the command.
func TestVersionCommand(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		var stdout, stderr bytes.Buffer
		require.Equal(t, exitOK, run(context.Background(), args, &stdout, &stderr), "%q: %s", args, stderr.String())
		require.Equal(t, version.Info().String()+"\n", stdout.String(), "%q", args)
		require.Empty(t, stderr.String())
	}
	require.Contains(t, version.Info().String(), version.Release+" (commit ")

	var stdout, stderr bytes.Buffer
	require.Equal(t, exitUsage, run(context.Background(), []string{"version", "extra"}, &stdout, &stderr))
	require.Contains(t, stderr.String(), "unexpected arguments")
	require.Empty(t, stdout.String())

	// --json: the object roomlog version --json prints.
	stdout.Reset()
	stderr.Reset()
	require.Equal(t, exitOK, run(context.Background(), []string{"version", "--json"}, &stdout, &stderr), stderr.String())
	var v cli.Version
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &v))
	require.Equal(t, cli.VersionOf(version.Info()), v)
	require.Equal(t, version.Release, v.Release)

	stdout.Reset()
	stderr.Reset()
	require.Equal(t, exitOK, run(context.Background(), []string{"help"}, &stdout, &stderr))
	require.Contains(t, stdout.String(), "\n  version ")
}

func TestBuildCommit(t *testing.T) {
	for _, tc := range []struct {
		b    version.Build
		want string
	}{
		{version.Build{Commit: "0123456789abcdef0123456789abcdef01234567"}, "0123456789abcdef0123456789abcdef01234567"},
		{version.Build{Commit: "0123456789abcdef0123456789abcdef01234567", Modified: true}, "0123456789abcdef0123456789abcdef01234567+dirty"},
		{version.Build{}, "unknown"},
	} {
		require.Equal(t, tc.want, buildCommit(tc.b))
	}
}

// TestBuildInfoMetric: every master's registry has roomlog_build_info 1,
// labelled with the binary's release, commit and Go version.
func TestBuildInfoMetric(t *testing.T) {
	b := version.Info()
	want := `# HELP roomlog_build_info Always 1; the labels name this binary's release, commit and Go version.
# TYPE roomlog_build_info gauge
roomlog_build_info{commit="` + buildCommit(b) + `",goversion="` + b.GoVersion + `",release="` + version.Release + `"} 1
`
	require.NoError(t, testutil.GatherAndCompare(newRegistry(), bytes.NewBufferString(want), "roomlog_build_info"))
	require.NotEmpty(t, b.GoVersion)

	fake := version.Build{Release: "v9.9.9", Commit: "abc", Modified: true, GoVersion: "go1.99"}
	require.NoError(t, testutil.CollectAndCompare(buildInfoGauge(fake), bytes.NewBufferString(`
# HELP roomlog_build_info Always 1; the labels name this binary's release, commit and Go version.
# TYPE roomlog_build_info gauge
roomlog_build_info{commit="abc+dirty",goversion="go1.99",release="v9.9.9"} 1
`)))
}

// TestStatusFromReplica: the API's status carries the replica's room
// version fields, the binary's release and commit, and each member's
// advertised room versions.
func TestStatusFromReplica(t *testing.T) {
	s := replica.Status{
		ID: "m1", Room: "ns", Role: replica.RolePrimary, Epoch: 3, Applied: 10, PrimaryID: "m1",
		RoomVersion: 1, RoomVersionSince: 7, RoomVersionTarget: 2, RoomVersionBlocked: `member "m2" supports 1..1`,
		RoomVersionMin: 1, RoomVersionMax: 2,
		Members: []replica.MemberStatus{
			{ID: "m1", Role: replica.RolePrimary, Applied: 10, RoomVersionMin: 1, RoomVersionMax: 2},
			{ID: "m2", Role: replica.RoleStandby, Applied: 9, RoomVersionMin: 1, RoomVersionMax: 1},
		},
		Err: errors.New("boom"),
	}
	b := version.Build{Release: "v0.2.0", Commit: "0123456789abcdef0123456789abcdef01234567", GoVersion: "go1.26"}
	got := statusFromReplica(s, "h:1", b)
	require.Equal(t, "v0.2.0", got.Version)
	require.Equal(t, "0123456789abcdef0123456789abcdef01234567", got.Commit)
	require.Equal(t, 1, got.RoomVersion)
	require.Equal(t, uint64(7), got.RoomVersionSince)
	require.Equal(t, 2, got.RoomVersionTarget)
	require.Equal(t, `member "m2" supports 1..1`, got.RoomVersionBlocked)
	require.Equal(t, [2]int{1, 2}, [2]int{got.RoomVersionMin, got.RoomVersionMax})
	require.Equal(t, []api.Member{
		{ID: "m1", Role: api.RolePrimary, AppliedIndex: 10, RoomVersionMin: 1, RoomVersionMax: 2},
		{ID: "m2", Role: api.RoleStandby, AppliedIndex: 9, Lag: 1, RoomVersionMin: 1, RoomVersionMax: 1},
	}, got.Members)
	require.Equal(t, "ns", got.Room)
	require.Equal(t, "h:1", got.Addr)
	require.Equal(t, "boom", got.Error)
}
