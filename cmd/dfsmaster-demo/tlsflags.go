package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"

	"github.com/roomlog/roomlog/logroom"
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

// zkTLSFlags are the flags of TLS to ZooKeeper, named as cmd/roomlog's:
// --zk-tls-ca, --zk-tls-cert, --zk-tls-key, --zk-tls-server-name and
// --zk-acl-x509 (repeatable; "self" is --zk-tls-cert's subject).
type zkTLSFlags struct {
	ca, cert, key, serverName *string
	acl                       *aclList
}

// aclList collects --zk-acl-x509 values (subjects hold commas, so one
// flag per identity).
type aclList []string

func (a *aclList) String() string     { return strings.Join(*a, "; ") }
func (a *aclList) Set(v string) error { *a = append(*a, v); return nil }

func addZKTLSFlags(fs *flag.FlagSet) zkTLSFlags {
	f := zkTLSFlags{
		ca:         fs.String("zk-tls-ca", "", "`FILE`: connect to ZooKeeper over TLS (its secureClientPort; --zk names those ports), verifying the servers against this PEM CA file"),
		cert:       fs.String("zk-tls-cert", "", "`FILE`: PEM client certificate presented to ZooKeeper; its subject is this process's x509 identity (with --zk-tls-key)"),
		key:        fs.String("zk-tls-key", "", "`FILE`: the PEM private key of --zk-tls-cert"),
		serverName: fs.String("zk-tls-server-name", "", "name the ZooKeeper servers' certificates are verified against (default: the host of each --zk address)"),
		acl:        &aclList{},
	}
	fs.Var(f.acl, "zk-acl-x509", "certificate identity (RFC 2253 subject, e.g. 'CN=m1,O=dfs') granted all permissions on the znodes this process creates (scheme x509); "+
		"repeatable; 'self' is --zk-tls-cert's; every master of a room lists the same ones")
	return f
}

// zkTLS is what zkTLSFlags load: the TLS material, the server name and
// the ACL identities ('self' resolved).
type zkTLS struct {
	src        *tlsfiles.Source // nil: plain TCP
	serverName string
	acl        []string
}

// load reads the files (an error names the flag, the file and the
// reason) and resolves 'self'.
func (f zkTLSFlags) load(log *slog.Logger) (zkTLS, error) {
	var z zkTLS
	if *f.ca == "" {
		if *f.cert != "" || *f.key != "" || *f.serverName != "" {
			return z, errors.New("--zk-tls-cert, --zk-tls-key and --zk-tls-server-name need --zk-tls-ca")
		}
	} else {
		src, err := tlsfiles.LoadWithOptions(tlsfiles.Files{CA: *f.ca, Cert: *f.cert, Key: *f.key}, tlsfiles.Options{Logger: log})
		if err != nil {
			return z, fmt.Errorf("--zk-tls-*: %w", err)
		}
		z.src, z.serverName = src, *f.serverName
	}
	for _, id := range *f.acl {
		if id == "self" {
			if z.src == nil {
				return z, errors.New("--zk-acl-x509 self needs --zk-tls-cert")
			}
			var err error
			if id, err = z.src.Identity(); err != nil {
				return z, fmt.Errorf("--zk-acl-x509 self: %w", err)
			}
		}
		z.acl = append(z.acl, id)
	}
	return z, nil
}

// dial adds the TLS material and the ACL identities to d.
func (z zkTLS) dial(d logroom.DialConfig) logroom.DialConfig {
	if z.src != nil { // a nil *Source in the interface would not be nil
		d.TLS = z.src
	}
	d.TLSServerName, d.ACLIdentities = z.serverName, z.acl
	return d
}
