package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/version"
)

// TestUsage needs no ZooKeeper: bad usage is refused before dialling.
func TestUsage(t *testing.T) {
	cases := []struct {
		args []string
		code int
		msg  string
	}{
		{nil, exitUsage, "missing command"},
		{[]string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{[]string{"channels"}, exitUsage, "channels takes 1 argument(s), got 0"},
		{[]string{"rooms", "extra"}, exitUsage, "rooms takes 0 argument(s), got 1"},
		{[]string{"channels", "a/b"}, exitUsage, "contains '/'"},
		{[]string{"verify", "zookeeper"}, exitUsage, "reserved"},
		{[]string{"channels", ""}, exitUsage, "empty room name"},
		{[]string{"dump", "r", "--from", "0"}, exitUsage, "--from must be >= 1"},
		{[]string{"dump", "r", "--from", "9", "--to", "3"}, exitUsage, "--to 3 is below --from 9"},
		{[]string{"verify", "r", "--from", "2"}, exitUsage, "apply to dump only"},
		{[]string{"dump", "r", "--from", "x"}, exitUsage, "invalid value"},
		{[]string{"--digest", "u:pw", "rooms"}, exitUsage, "takes no password any more (visible in ps): use --zk-digest-file FILE"},
		{[]string{"--zk-digest-file", "/nonexistent/file", "rooms"}, exitUsage, "--zk-digest-file: logroom: digest file: open /nonexistent/file"},
		{[]string{"--zk-digest-file", "/etc", "rooms"}, exitUsage, "is not a regular file"},
		{[]string{"--base", "relative", "rooms"}, exitUsage, `--base: logroom: bad name: base path "relative" must be absolute`},
		{[]string{"--base", "/a//b", "rooms"}, exitUsage, `component "": empty`},
		{[]string{"--base", "/zookeeper", "rooms"}, exitUsage, `component "zookeeper": reserved`},
		{[]string{"--zk", " , ", "rooms"}, exitUsage, "no ZooKeeper server"},
		{[]string{"--timeout", "0s", "rooms"}, exitUsage, "--timeout must be > 0"},
		{[]string{"--nope", "rooms"}, exitUsage, "flag provided but not defined"},
		{[]string{"-h"}, exitOK, ""},
		{[]string{"help"}, exitOK, ""},
		{[]string{"transfer", "r", "--add", "x"}, exitUsage, "apply to acl only"},
		{[]string{"acl", "r", "--add", "nope:x"}, exitUsage, `unknown scheme "nope"`},
		{[]string{"acl", "r", "--add", "digest:u"}, exitUsage, "digest:USER:HASH"},
		{[]string{"acl", "r", "--add", "world:anyone"}, exitUsage, "never opened to everyone"},
		{[]string{"dump", "r", "--to", "b"}, exitUsage, "dump takes an index"},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(tc.args, &out, &errb)
			require.Equal(t, tc.code, code, "stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
			require.Contains(t, errb.String(), tc.msg)
		})
	}
	var out, errb bytes.Buffer
	require.Equal(t, exitOK, run([]string{"help"}, &out, &errb))
	require.Contains(t, out.String(), "verify ROOM")
}

func TestParseArgs(t *testing.T) {
	var errb bytes.Buffer
	o, pos, err := parseArgs([]string{"dump", "--json", "r1", "--from", "5", "--zk", "h:1"}, &errb)
	require.NoError(t, err)
	require.Equal(t, []string{"dump", "r1"}, pos)
	require.True(t, o.json)
	require.Equal(t, uint64(5), o.from)
	require.Equal(t, "h:1", o.zk)
	require.True(t, o.set["from"])
	require.False(t, o.set["to"])

	// "--" ends the flags: a room named like a flag.
	_, pos, err = parseArgs([]string{"--json", "channels", "--", "--from"}, &errb)
	require.NoError(t, err)
	require.Equal(t, []string{"channels", "--from"}, pos)

	t.Setenv(envZK, "env-host:2181")
	t.Setenv(envDigest, "u:p")
	o, _, err = parseArgs([]string{"rooms"}, &errb)
	require.NoError(t, err)
	require.Equal(t, "env-host:2181", o.zk)
	require.Equal(t, "u:p", o.digest)
	require.Empty(t, errb.String())

	// The older names still work, with a deprecation warning.
	t.Setenv(envZK, "")
	t.Setenv(envDigest, "")
	t.Setenv("ZK", "old-host:2181")
	t.Setenv("ROOMLOG_DIGEST_FILE", "/old/file")
	o, _, err = parseArgs([]string{"rooms"}, &errb)
	require.NoError(t, err)
	require.Equal(t, "old-host:2181", o.zk)
	require.Equal(t, "/old/file", o.digestFile)
	require.Contains(t, errb.String(), "environment variable ZK is deprecated; set ROOMLOG_ZK instead")
	require.Contains(t, errb.String(), "ROOMLOG_DIGEST_FILE is deprecated; set ROOMLOG_ZK_DIGEST_FILE instead")

	// --to: an index for dump, a member for transfer.
	o, _, err = parseArgs([]string{"transfer", "r", "--to", "m2"}, &errb)
	require.NoError(t, err)
	require.Equal(t, "m2", o.toMember)
	o, _, err = parseArgs([]string{"dump", "r", "--to", "7"}, &errb)
	require.NoError(t, err)
	require.Equal(t, uint64(7), o.to)
}

// TestHelpConventions: -h, --help and help print to stdout and exit 0;
// every command has its own help (COMMAND -h, help COMMAND); --version
// works like version; the exit codes are documented.
func TestHelpConventions(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}, {"rooms", "--zk", "x", "--help"}} {
		var out, errb bytes.Buffer
		require.Equal(t, exitOK, run(args, &out, &errb), "%q", args)
		require.Empty(t, errb.String(), "%q", args)
		if args[0] != "rooms" {
			require.Contains(t, out.String(), "usage: roomlog", "%q", args)
			require.Contains(t, out.String(), "3  ZooKeeper unreachable")
			require.Contains(t, out.String(), "-zk-digest-file")
		}
	}
	names := []string{"reseed", "restore"}
	for name := range commands {
		names = append(names, name)
	}
	for _, name := range names {
		for _, args := range [][]string{{name, "-h"}, {"help", name}, {"--zk", "h:1", name, "--help"}} {
			var out, errb bytes.Buffer
			require.Equal(t, exitOK, run(args, &out, &errb), "%q: %s", args, errb.String())
			require.Contains(t, out.String(), "usage: roomlog "+name, "%q", args)
			require.NotContains(t, out.String(), "commands:", "%q prints the command's help, not the tool's", args)
		}
	}
	var out, errb bytes.Buffer
	require.Equal(t, exitOK, run([]string{"--version"}, &out, &errb), errb.String())
	require.Contains(t, out.String(), version.Release)
}

// TestUnreachable: a ZooKeeper that does not answer is reported within the
// timeout.
func TestUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	var out, errb bytes.Buffer
	start := time.Now()
	code := run([]string{"--zk", addr, "--timeout", "500ms", "rooms"}, &out, &errb)
	require.Equal(t, exitUnreachable, code)
	require.Contains(t, errb.String(), "cannot reach ZooKeeper at "+addr+": no session within 500ms")
	require.Less(t, time.Since(start), 10*time.Second)
	require.Empty(t, out.String())
}

// TestMissingAndReadOnly: missing rooms and bases are clear errors, and no
// command writes anything (room-version without --set included; --set is
// the one write, TestRoomVersionErrors): the whole tree is the same before
// and after every command ran, including on a missing room and a missing
// base.
func TestMissingAndReadOnly(t *testing.T) {
	e := zkensemble.ForTest(t, zkensemble.Options{Servers: 1})
	c := dialZK(t, e, nil)
	buildRoom(t, c, "/ro", "r", true)
	cl := newCLI(t, e, "/ro")
	before := snapshotTree(t, c.Conn(), "/")

	code, _, errs := cl.run("channels", "nosuch")
	require.Equal(t, exitNoRoom, code)
	require.Contains(t, errs, `room "nosuch" not found under /ro`)
	for _, cmd := range []string{"members", "dump", "verify", "checkpoints", "room-version", "acl", "transfer", "checkpoint"} {
		code, _, errs = cl.run(cmd, "nosuch")
		require.Equal(t, exitNoRoom, code, cmd)
		require.Contains(t, errs, "not found", cmd)
	}
	code, _, _ = newCLI(t, e, "/nobase").run("verify", "r")
	require.Equal(t, exitNoRoom, code)

	for _, args := range [][]string{
		{"rooms"}, {"channels", "r"}, {"members", "r"}, {"dump", "r"}, {"dump", "r", "--from", "20"},
		{"verify", "r"}, {"checkpoints", "r"}, {"rooms", "--json"}, {"verify", "r", "--json"},
		{"room-version", "r"}, {"room-version", "r", "--json"}, // read-only without --set
	} {
		cl.ok(args...)
	}
	// A foreign znode that is not a room is not listed.
	_, err := c.Conn().Create("/ro/not-a-room", []byte("x"), 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	before["/ro/not-a-room"] = snapshotTree(t, c.Conn(), "/ro/not-a-room")["/ro/not-a-room"]
	var rows []roomRow
	cl.json(&rows, "rooms")
	require.Len(t, rows, 1)
	require.Equal(t, "r", rows[0].Name)
	// The /ro parent's child version changed with that create; re-read it.
	before["/ro"] = snapshotTree(t, c.Conn(), "/ro")["/ro"]

	after := snapshotTree(t, c.Conn(), "/")
	delete(before, "/zookeeper/quota") // server-managed
	delete(after, "/zookeeper/quota")
	require.Equal(t, before, after, "the tool wrote to ZooKeeper")
}

// TestDigestRoom: a room created with digest credentials can be inspected
// only with them.
func TestDigestRoom(t *testing.T) {
	e := zkensemble.ForTest(t, zkensemble.Options{Servers: 1})
	owner := dialZK(t, e, &logroom.Digest{User: "ops", Password: "s3cret"})
	buildRoom(t, owner, "/secure", "locked", false)
	plain := dialZK(t, e, nil)
	buildRoom(t, plain, "/secure2", "open", false)

	// Without credentials: a permission error naming the way out.
	cl := newCLI(t, e, "/secure")
	code, _, errs := cl.run("channels", "locked")
	require.Equal(t, exitDenied, code)
	require.Contains(t, errs, "zk: not authenticated")
	require.Contains(t, errs, "pass --zk-digest-file FILE holding user:password")
	t.Setenv(envDigest, "ops:wrong")
	code, _, errs = cl.run("verify", "locked")
	require.Equal(t, exitDenied, code)
	require.Contains(t, errs, "zk: not authenticated")
	t.Setenv(envDigest, "")

	// The base itself was created by the digest client: listing it needs
	// the credentials too.
	code, _, errs = cl.run("rooms")
	require.Equal(t, exitDenied, code)
	require.Contains(t, errs, "permission denied")

	// Under a base anyone may read, a locked room is listed as such.
	_, err := plain.Conn().Create("/mixed", nil, 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	buildRoom(t, owner, "/mixed", "locked", false)
	buildRoom(t, plain, "/mixed", "open", false)
	out := newCLI(t, e, "/mixed").ok("rooms")
	require.Regexp(t, `(?m)^locked\s+\(no access: the room's ACL; pass --zk-digest-file or a --zk-tls-cert it names\)$`, out)
	require.Regexp(t, `(?m)^open\s+\S+\s+2\s+w2\s+4\s+1\s+0$`, out)

	// With them (flag or environment), everything works.
	t.Setenv(envDigest, "ops:s3cret")
	require.Contains(t, cl.ok("verify", "locked"), `OK room "locked"`)
	require.Len(t, parseDump(t, cl.ok("dump", "locked")), 34)
	t.Setenv(envDigest, "")
	// A credentials file (flag or environment): the password stays off
	// the command line.
	file := filepath.Join(t.TempDir(), "zk-digest")
	require.NoError(t, os.WriteFile(file, []byte("ops:s3cret\n"), 0o600))
	require.Contains(t, newCLI(t, e, "/secure", "--zk-digest-file", file).ok("verify", "locked"), `OK room "locked"`)
	wrong := filepath.Join(t.TempDir(), "wrong")
	require.NoError(t, os.WriteFile(wrong, []byte("ops:nope\n"), 0o600))
	code, _, errs = newCLI(t, e, "/secure", "--zk-digest-file", wrong).run("verify", "locked")
	require.Equal(t, exitDenied, code)
	require.Contains(t, errs, "zk: not authenticated")
	t.Setenv(envDigestFile, file)
	require.Contains(t, cl.ok("channels", "locked"), "room locked  epoch 2")
	t.Setenv(envDigestFile, "")
	t.Setenv(envDigest, "ops:s3cret")
	require.Contains(t, cl.ok("channels", "locked"), "room locked  epoch 2")
}
