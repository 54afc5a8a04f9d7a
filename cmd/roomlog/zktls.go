package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/tlsfiles"
)

// zkTLSFlags are the flags of TLS to ZooKeeper, shared by every command
// that dials it (the top-level commands and reseed).
type zkTLSFlags struct {
	ca, cert, key string
	serverName    string
	acl           aclFlag
}

// aclFlag collects --zk-acl-x509 values (repeatable, or comma-separated
// is not possible: subjects hold commas).
type aclFlag []string

func (a *aclFlag) String() string     { return strings.Join(*a, "; ") }
func (a *aclFlag) Set(v string) error { *a = append(*a, v); return nil }

// zkTLSValued are the flags that take a value (commandAt skips them).
var zkTLSValued = []string{"zk-tls-ca", "zk-tls-cert", "zk-tls-key", "zk-tls-server-name", "zk-acl-x509"}

func (f *zkTLSFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.ca, "zk-tls-ca", "", "connect to ZooKeeper over TLS (its secureClientPort), verifying the servers against this CA file (PEM)")
	fs.StringVar(&f.cert, "zk-tls-cert", "", "client certificate (PEM) presented to ZooKeeper; its subject is this client's x509 identity (needs --zk-tls-key)")
	fs.StringVar(&f.key, "zk-tls-key", "", "private key (PEM) of --zk-tls-cert")
	fs.StringVar(&f.serverName, "zk-tls-server-name", "", "name the ZooKeeper servers' certificates are verified against (default: the host of each --zk address)")
	fs.Var(&f.acl, "zk-acl-x509", "certificate identity (RFC 2253 subject, e.g. 'CN=master-1,O=dfs') granted all permissions on znodes this tool creates (scheme x509); repeatable; 'self' is --zk-tls-cert's. Default with --zk-tls-cert and no digest: 'self' only (never world:anyone)")
}

// dialConfig returns the ZooKeeper dial config for servers and auth with
// these flags: it loads the TLS files (an error names the file and the
// reason) and resolves 'self'.
func (f *zkTLSFlags) dialConfig(servers []string, auth *logroom.Digest) (logroom.DialConfig, error) {
	d := logroom.DialConfig{Servers: servers, Auth: auth}
	if f.ca == "" {
		if f.cert != "" || f.key != "" || f.serverName != "" {
			return d, fmt.Errorf("--zk-tls-cert, --zk-tls-key and --zk-tls-server-name need --zk-tls-ca")
		}
	} else {
		src, err := tlsfiles.Load(tlsfiles.Files{CA: f.ca, Cert: f.cert, Key: f.key})
		if err != nil {
			return d, err
		}
		d.TLS, d.TLSServerName = src, f.serverName
		for _, id := range f.acl {
			if id == "self" {
				if id, err = src.Identity(); err != nil {
					return d, fmt.Errorf("--zk-acl-x509 self: %w", err)
				}
			}
			d.ACLIdentities = append(d.ACLIdentities, id)
		}
		return d, d.Validate()
	}
	for _, id := range f.acl {
		if id == "self" {
			return d, fmt.Errorf("--zk-acl-x509 self needs --zk-tls-cert")
		}
		d.ACLIdentities = append(d.ACLIdentities, id)
	}
	return d, d.Validate()
}
