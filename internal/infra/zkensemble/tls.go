package zkensemble

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/roomlog/roomlog/internal/infra/testpki"
	"github.com/roomlog/roomlog/tlsfiles"
)

// TLSOptions give every server a TLS client port (secureClientPort,
// Options.TLS). See the package documentation, "TLS".
type TLSOptions struct {
	// CA signs the servers' certificates and is their trust store: only
	// clients with a certificate of this CA are accepted. nil: a new CA
	// (TLSCA returns it).
	CA *testpki.CA
	// ClientAuth is ssl.clientAuth: "need" (default: a client without a
	// certificate is refused), "want" or "none".
	ClientAuth string
	// PlainQuorum leaves the quorum and election links of a 3-server
	// ensemble in clear. By default they are TLS too (sslQuorum=true, with
	// the same key and trust stores): without it every write a client
	// sends over TLS crosses the server-to-server links in clear. Only for
	// tests that need a plaintext quorum (a control, a cost comparison).
	PlainQuorum bool
}

func (o *TLSOptions) validate() []string {
	if o == nil {
		return nil
	}
	switch o.ClientAuth {
	case "", "need", "want", "none":
		return nil
	}
	return []string{fmt.Sprintf("TLS.ClientAuth=%q (want need, want or none)", o.ClientAuth)}
}

// debianNetty are the Netty jars the TLS port needs beside those that
// Debian's zookeeper.jar manifest names (buffer, common, handler,
// transport, transport-native-epoll): the handler's SSL code loads
// classes of codec and resolver, and epoll those of unix-common.
var debianNetty = []string{
	"/usr/share/java/netty-codec.jar",
	"/usr/share/java/netty-resolver.jar",
	"/usr/share/java/netty-transport-native-unix-common.jar",
}

// tlsClasspath returns the classpath of a TLS server: inst's, plus the
// Netty jars Debian's manifest leaves out. A tarball (ZOOKEEPER_HOME)
// ships every Netty jar in lib/.
func tlsClasspath(inst install) ([]string, error) { return tlsClasspathWith(inst, debianNetty) }

// tlsClasspathWith is tlsClasspath with the Debian jars to add given.
func tlsClasspathWith(inst install, netty []string) ([]string, error) {
	if !strings.HasPrefix(inst.source, "ZOOKEEPER_HOME=") {
		cp := append([]string(nil), inst.classpath...)
		var missing []string
		for _, j := range netty {
			if fileExists(j) {
				cp = append(cp, j)
			} else {
				missing = append(missing, j)
			}
		}
		if len(missing) > 0 {
			return nil, fmt.Errorf("%w: TLS needs %s (Debian package libnetty-java); run scripts/install-zookeeper.sh",
				ErrUnavailable, strings.Join(missing, ", "))
		}
		return cp, nil
	}
	return inst.classpath, nil
}

func (s *server) tlsDir() string       { return filepath.Join(s.dir, "tls") }
func (s *server) keyStorePath() string { return filepath.Join(s.tlsDir(), "keystore.pem") }
func (s *server) secureAddr() string   { return fmt.Sprintf("127.0.0.1:%d", s.securePort) }

// TLSFiles returns server i's TLS files: CA (its trust store, the
// ensemble's CA), Cert and Key (its certificate, for 127.0.0.1 and
// localhost). Zero without Options.TLS or for a bad index.
func (e *Ensemble) TLSFiles(i int) tlsfiles.Files {
	if e.opts.TLS == nil || i < 0 || i >= len(e.servers) {
		return tlsfiles.Files{}
	}
	return testpki.FilesIn(e.servers[i].tlsDir(), "server")
}

// writeTLSFiles issues server s's certificate and writes its key store
// (key and certificate in one PEM file, as ZooKeeper's PEM key store
// reads it) and trust store.
func writeTLSFiles(ca *testpki.CA, s *server) error {
	f, err := ca.Issue(s.tlsDir(), "server", testpki.Options{Server: true, Client: true})
	if err != nil {
		return err
	}
	cert, cerr := os.ReadFile(f.Cert)
	key, kerr := os.ReadFile(f.Key)
	if err := errors.Join(cerr, kerr); err != nil {
		return err
	}
	return testpki.WriteFile(s.keyStorePath(), append(key, cert...))
}

// tlsConfig is the zoo.cfg part of a TLS server; quorum says whether the
// server has peers (a 3-server ensemble).
func tlsConfig(o *TLSOptions, s *server, quorum bool) string {
	auth := o.ClientAuth
	if auth == "" {
		auth = "need"
	}
	f := testpki.FilesIn(s.tlsDir(), "server")
	var b strings.Builder
	fmt.Fprintf(&b, "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n")
	fmt.Fprintf(&b, "secureClientPort=%d\n", s.securePort)
	fmt.Fprintf(&b, "secureClientPortAddress=127.0.0.1\n")
	fmt.Fprintf(&b, "ssl.keyStore.location=%s\n", s.keyStorePath())
	fmt.Fprintf(&b, "ssl.keyStore.type=PEM\n")
	fmt.Fprintf(&b, "ssl.trustStore.location=%s\n", f.CA)
	fmt.Fprintf(&b, "ssl.trustStore.type=PEM\n")
	fmt.Fprintf(&b, "ssl.clientAuth=%s\n", auth)
	fmt.Fprintf(&b, "authProvider.x509=org.apache.zookeeper.server.auth.X509AuthenticationProvider\n")
	if quorum && !o.PlainQuorum {
		fmt.Fprintf(&b, "sslQuorum=true\n")
		fmt.Fprintf(&b, "ssl.quorum.keyStore.location=%s\n", s.keyStorePath())
		fmt.Fprintf(&b, "ssl.quorum.keyStore.type=PEM\n")
		fmt.Fprintf(&b, "ssl.quorum.trustStore.location=%s\n", f.CA)
		fmt.Fprintf(&b, "ssl.quorum.trustStore.type=PEM\n")
	}
	return b.String()
}

// TLSCA returns the CA of the servers' certificates and trust stores
// (Options.TLS.CA, or the one made at Start), or nil without Options.TLS.
// Issue client certificates with it: ca.Issue(dir, name, testpki.Options{}).
func (e *Ensemble) TLSCA() *testpki.CA { return e.tlsCA }

// SecureAddrs returns the TLS client addresses, "127.0.0.1:port" (index i
// is server i), or nil without Options.TLS. They are never proxied, even
// with Options.FaultNet.
func (e *Ensemble) SecureAddrs() []string {
	if e.opts.TLS == nil {
		return nil
	}
	out := make([]string, len(e.servers))
	for i, s := range e.servers {
		out[i] = s.secureAddr()
	}
	return out
}

// SecureConnString returns the comma-joined SecureAddrs.
func (e *Ensemble) SecureConnString() string { return strings.Join(e.SecureAddrs(), ",") }
