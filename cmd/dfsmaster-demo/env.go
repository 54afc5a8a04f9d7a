package main

import (
	"flag"
	"io"

	"github.com/roomlog/roomlog/internal/cli"
)

// Environment: the ROOMLOG_* scheme the roomlog command uses
// (internal/cli). Each variable is the fallback of one flag, read only
// when the command line does not give that flag; the older names are
// still read, with a deprecation warning on stderr. None holds a secret:
// the credential variables name files.
const (
	envZK         = "ROOMLOG_ZK"                    // --zk (serve, chunkserver)
	envDigestFile = "ROOMLOG_ZK_DIGEST_FILE"        // --zk-digest-file (serve, chunkserver, pair)
	envTokenFile  = "ROOMLOG_CHECKPOINT_TOKEN_FILE" // --checkpoint-token-file (serve)
)

// oldEnv maps each variable to the deprecated names it replaces.
var oldEnv = map[string][]string{
	envZK:         {"ZK"},
	envDigestFile: {"DFSMASTER_ZK_DIGEST_FILE", "ROOMLOG_DIGEST_FILE"},
	envTokenFile:  {"DFSMASTER_CHECKPOINT_TOKEN_FILE"},
}

// flagFromEnv sets *p from the environment variable env (or one of its
// deprecated names, with a warning on stderr) unless the parsed flag set
// fs was given the flag name. It leaves the flag itself unmarked, so a
// later fs.Visit still tells a flag from the environment.
func flagFromEnv(fs *flag.FlagSet, stderr io.Writer, name string, p *string, env string) {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	if given {
		return
	}
	if v := cli.Getenv(stderr, "dfsmaster-demo", env, oldEnv[env]...); v != "" {
		*p = v
	}
}
