package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"

	"github.com/roomlog/roomlog/tlsfiles"
)

// tlsFlags are --tls-ca, --tls-cert and --tls-key: the PEM files of the
// HTTPS side (serve: the API and the checkpoint endpoint, mutual TLS; ctl:
// the client). All three, or none.
type tlsFlags struct {
	ca, cert, key *string
}

func addTLSFlags(fs *flag.FlagSet, what string) tlsFlags {
	return tlsFlags{
		ca:   fs.String("tls-ca", "", "`FILE`: PEM CA certificate(s) the other side's certificate must be signed by ("+what+"; with --tls-cert and --tls-key)"),
		cert: fs.String("tls-cert", "", "`FILE`: this side's PEM certificate (the CA must have signed it; re-read when it changes)"),
		key:  fs.String("tls-key", "", "`FILE`: the PEM private key of --tls-cert"),
	}
}

// set reports whether any of the flags was given.
func (f tlsFlags) set() bool { return *f.ca != "" || *f.cert != "" || *f.key != "" }

// load reads the files (nil, nil when no flag was given). A missing
// flag, or a file refused (expired, another CA's, a key that does not
// match) is an error naming the flag and the file.
func (f tlsFlags) load(log *slog.Logger) (*tlsfiles.Source, error) {
	if !f.set() {
		return nil, nil
	}
	var missing []string
	for _, fl := range []struct{ name, v string }{{"--tls-ca", *f.ca}, {"--tls-cert", *f.cert}, {"--tls-key", *f.key}} {
		if fl.v == "" {
			missing = append(missing, fl.name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("--tls-ca, --tls-cert and --tls-key go together: %v missing", missing)
	}
	src, err := tlsfiles.LoadWithOptions(tlsfiles.Files{CA: *f.ca, Cert: *f.cert, Key: *f.key}, tlsfiles.Options{Logger: log})
	if err != nil {
		var fe *tlsfiles.FileError
		if errors.As(err, &fe) {
			return nil, fmt.Errorf("--tls-%s: %w", map[string]string{"CA": "ca", "Cert": "cert", "Key": "key"}[fe.Role], err)
		}
		return nil, fmt.Errorf("--tls-*: %w", err)
	}
	return src, nil
}
