package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"

	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/tlsfiles"
	"github.com/roomlog/roomlog/zkx"
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

// workerIdentFlag collects --zk-acl-x509-worker ID=SUBJECT values (one
// per chunk server); parse checks them.
type workerIdentFlag []string

func (a *workerIdentFlag) String() string     { return strings.Join(*a, "; ") }
func (a *workerIdentFlag) Set(v string) error { *a = append(*a, v); return nil }

// parse maps each worker id to its x509 identity. A value that is not
// ID=SUBJECT (the id a valid znode name, the subject RFC 2253
// TYPE=VALUE attributes), an id given twice or a subject given to two
// ids is an error naming the value: one certificate shared by two
// workers would give each the other's tasks.
func (a workerIdentFlag) parse() (map[string]string, error) {
	if len(a) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(a))
	by := map[string]string{} // subject -> worker id
	for _, v := range a {
		id, subject, ok := strings.Cut(v, "=")
		if !ok || id == "" || subject == "" {
			return nil, fmt.Errorf("--zk-acl-x509-worker %q: want ID=SUBJECT (a chunk server's --id and its certificate's subject, e.g. cs1=CN=cs1,O=dfs)", v)
		}
		if err := zkx.ValidName(id); err != nil {
			return nil, fmt.Errorf("--zk-acl-x509-worker %q: worker id %q: %v", v, id, err)
		}
		if err := validSubject(subject); err != nil {
			return nil, fmt.Errorf("--zk-acl-x509-worker %q: subject %q: %v (want ID=SUBJECT, e.g. cs1=CN=cs1,O=dfs)", v, subject, err)
		}
		if _, dup := out[id]; dup {
			return nil, fmt.Errorf("--zk-acl-x509-worker %q: worker %s given twice", v, id)
		}
		if other, dup := by[subject]; dup {
			return nil, fmt.Errorf("--zk-acl-x509-worker %q: subject %q is worker %s's too: each chunk server needs a certificate of its own", v, subject, other)
		}
		out[id], by[subject] = subject, id
	}
	return out, nil
}

// validSubject checks that s looks like an RFC 2253 subject (as
// tlsfiles.SubjectName writes one): attributes TYPE=VALUE separated by
// unescaped ',' or '+', each with a type and '='.
func validSubject(s string) error {
	var rdns []string
	start, esc := 0, false
	for i := 0; i < len(s); i++ {
		switch {
		case esc:
			esc = false
		case s[i] == '\\':
			esc = true
		case s[i] == ',' || s[i] == '+':
			rdns = append(rdns, s[start:i])
			start = i + 1
		}
	}
	rdns = append(rdns, s[start:])
	for _, r := range rdns {
		typ, _, ok := strings.Cut(r, "=")
		if !ok || strings.TrimSpace(typ) == "" {
			return fmt.Errorf("attribute %q is not TYPE=VALUE", r)
		}
	}
	return nil
}
