package tlsfiles

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// DefaultCheckEvery is how often, at most, a Source looks at its files'
// mtime, size and inode when it is used.
const DefaultCheckEvery = time.Second

// Files names the PEM files of one TLS identity.
type Files struct {
	// CA holds the certificates of the authorities peers are verified
	// against (required).
	CA string
	// Cert holds this side's certificate, optionally followed by
	// intermediates; Key its private key (PKCS#8, PKCS#1 or SEC 1). Both
	// or neither: a client that only verifies the server needs neither.
	Cert, Key string
}

// Options tune LoadWithOptions. The zero value is Load's behaviour.
type Options struct {
	// Logger receives a line for every reload and every refused rotation
	// (nil: discard).
	Logger *slog.Logger
	// CheckEvery bounds how often the files are stat'ed on use (default
	// DefaultCheckEvery, 1s; negative: on every use).
	CheckEvery time.Duration
	// Now is the clock for validity checks (default time.Now).
	Now func() time.Time
}

// Source is the current TLS material of Files, re-read when the files
// change. Its methods are safe for concurrent use. The configs it hands
// out ask it for the material at each handshake, so a rotation reaches
// the next connection without building a new config.
type Source struct {
	files      Files
	log        *slog.Logger
	checkEvery time.Duration
	now        func() time.Time

	cur atomic.Pointer[material] // the last good material; never nil after Load

	mu        sync.Mutex // guards the fields below; held while checking and reading files
	lastCheck time.Time
	seen      [3]stamp // of the files (CA, Cert, Key) at the last read attempt
	readErr   error    // of the last read attempt; nil when it succeeded
	inUseErr  error    // the certificate in use is no longer valid; nil while it is
	reloads   int
}

// RereadBefore: while the certificate in use expires within this time (or
// has expired), the files are read again at every check even when their
// stamps did not change, as they are after a read refused as not yet
// valid.
const RereadBefore = time.Hour

// material is one consistent, validated read of the files.
type material struct {
	pool    *x509.CertPool
	skipped []string         // CA certificates left out of pool (expired, not yet valid)
	cert    *tls.Certificate // nil without Files.Cert
	leaf    *x509.Certificate
	subject string // leaf's RFC 2253 subject
	// subjectErr: why subject cannot be given (ErrSubjectNotReproducible);
	// the certificate still serves TLS, Identity returns this.
	subjectErr error
}

// stamp identifies a version of a file.
type stamp struct {
	ok    bool
	mtime time.Time
	size  int64
	ino   uint64
	dev   uint64
}

func statFile(path string) stamp {
	if path == "" {
		return stamp{}
	}
	st, err := os.Stat(path)
	if err != nil {
		return stamp{}
	}
	s := stamp{ok: true, mtime: st.ModTime(), size: st.Size()}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		s.ino, s.dev = uint64(sys.Ino), uint64(sys.Dev) //nolint:unconvert // types differ per platform
	}
	return s
}

// Load reads and validates f now (Options{}: no log, checked at most
// every second). The error is a *FileError naming the file and the
// reason.
func Load(f Files) (*Source, error) { return LoadWithOptions(f, Options{}) }

// LoadWithOptions is Load with options.
func LoadWithOptions(f Files, o Options) (*Source, error) {
	if f.CA == "" {
		return nil, fmt.Errorf("%w: CA is empty", ErrBadConfig)
	}
	if (f.Cert == "") != (f.Key == "") {
		return nil, fmt.Errorf("%w: Cert %q and Key %q: give both or neither", ErrBadConfig, f.Cert, f.Key)
	}
	s := &Source{files: f, log: o.Logger, checkEvery: o.CheckEvery, now: o.Now}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.checkEvery == 0 {
		s.checkEvery = DefaultCheckEvery
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen = s.stamps()
	m, err := s.read()
	if err != nil {
		return nil, err
	}
	s.logSkipped(nil, m)
	s.cur.Store(m)
	s.lastCheck = s.now()
	return s, nil
}

// Files returns the files the Source reads.
func (s *Source) Files() Files { return s.files }

func (s *Source) stamps() [3]stamp {
	return [3]stamp{statFile(s.files.CA), statFile(s.files.Cert), statFile(s.files.Key)}
}

// Reload re-reads the files now. On error the last good material stays in
// use, and the error (a *FileError) is also what Err returns.
func (s *Source) Reload() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen = s.stamps()
	err := s.reloadLocked()
	s.checkInUse()
	return err
}

func (s *Source) reloadLocked() error {
	s.lastCheck = s.now()
	m, err := s.read()
	if err != nil {
		if s.readErr == nil || s.readErr.Error() != err.Error() {
			s.log.Error("tlsfiles: new files refused; keeping the last good ones", "err", err)
		}
		s.readErr = err
		return err
	}
	old := s.cur.Load()
	s.logSkipped(old, m)
	s.cur.Store(m)
	s.readErr = nil
	s.reloads++
	if old == nil || m.leaf == nil || old.leaf == nil || !bytes.Equal(old.leaf.Raw, m.leaf.Raw) {
		args := []any{"ca", s.files.CA}
		if m.leaf != nil {
			args = append(args, "cert", s.files.Cert, "subject", m.subject,
				"serial", m.leaf.SerialNumber.String(), "not_after", m.leaf.NotAfter.UTC())
		}
		s.log.Info("tlsfiles: loaded new files", args...)
	}
	return nil
}

// Err returns nil when the material in use is valid and is the files'
// current content. Otherwise it says why: the certificate in use is no
// longer valid (ErrExpired, "in use"), and/or the files' current content
// was refused (the last good material stays in use); both joined when
// both hold and differ.
func (s *Source) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.inUseErr == nil:
		return s.readErr
	case s.readErr == nil || s.readErr.Error() == errors.Unwrap(s.inUseErr).Error():
		return s.inUseErr
	}
	return errors.Join(s.inUseErr, s.readErr)
}

// check re-reads the files, at most every CheckEvery, if they changed
// since the last attempt, or, with unchanged files, if the last read was
// refused as not yet valid (a NotBefore slightly ahead: the issuer's
// clock) or the certificate in use expires within RereadBefore.
func (s *Source) check() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if s.checkEvery > 0 && now.Sub(s.lastCheck) < s.checkEvery {
		return
	}
	s.lastCheck = now
	st := s.stamps()
	if st != s.seen || s.rereadUnchanged(now) {
		s.seen = st
		_ = s.reloadLocked() // logged and kept in readErr
	}
	s.checkInUse()
}

// rereadUnchanged says whether files with unchanged stamps are read again.
// The caller holds s.mu.
func (s *Source) rereadUnchanged(now time.Time) bool {
	if errors.Is(s.readErr, ErrNotYetValid) {
		return true
	}
	m := s.cur.Load()
	return m != nil && m.leaf != nil && m.leaf.NotAfter.Sub(now) < RereadBefore
}

// checkInUse reports a certificate in use that is no longer valid
// (unchanged files, or newer ones refused): it is still presented, peers
// refuse it, and Err and the log say why, whatever the last read gave.
// The caller holds s.mu.
func (s *Source) checkInUse() {
	m := s.cur.Load()
	if m == nil || m.leaf == nil {
		s.inUseErr = nil
		return
	}
	err := validity("Cert", s.files.Cert, m.leaf, s.now())
	if err != nil {
		err = fmt.Errorf("the certificate in use: %w", err)
		if s.inUseErr == nil || s.inUseErr.Error() != err.Error() {
			s.log.Error("tlsfiles: the certificate in use is no longer valid; replace the files", "err", err)
		}
	}
	s.inUseErr = err
}

// logSkipped logs the CA certificates m leaves out of its pool, when they
// differ from old's.
func (s *Source) logSkipped(old, m *material) {
	if old != nil && slices.Equal(old.skipped, m.skipped) {
		return
	}
	for _, why := range m.skipped {
		s.log.Warn("tlsfiles: a CA certificate is left out of the pool", "ca", s.files.CA, "certificate", why)
	}
}

// current returns the material to use now, after a check of the files.
func (s *Source) current() *material {
	s.check()
	return s.cur.Load()
}

// Certificate returns the certificate in use (nil without Files.Cert),
// after checking the files.
func (s *Source) Certificate() *x509.Certificate { return s.current().leaf }

// Identity returns the current certificate's subject as ZooKeeper's
// X509AuthenticationProvider names the client (see SubjectName): the id
// of an ACL entry of scheme x509 that grants this certificate. A subject
// SubjectName cannot write as Java does is ErrSubjectNotReproducible,
// naming the file and the attribute.
func (s *Source) Identity() (string, error) {
	m := s.current()
	if m.leaf == nil {
		return "", ErrNoCertificateConfigured
	}
	if m.subjectErr != nil {
		return "", m.subjectErr
	}
	return m.subject, nil
}

// ClientConfig returns a client config that presents the current
// certificate (if any) and verifies the server's chain against the
// current CA file and its name against serverName (a DNS name or an IP
// address; required: with "" every handshake fails). Go's own
// verification is off (InsecureSkipVerify) only because it is done in
// VerifyConnection against the CA read at that handshake.
func (s *Source) ClientConfig(serverName string) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         serverName,
		InsecureSkipVerify: true, //nolint:gosec // VerifyConnection verifies chain and name
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if m := s.current(); m.cert != nil {
				return m.cert, nil
			}
			return &tls.Certificate{}, nil // none: the server decides
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			return s.verifyPeer("server", serverName, cs.PeerCertificates)
		},
	}
}

// ServerConfig returns a server config that presents the current
// certificate and verifies client certificates against the current CA
// file, as clientAuth says.
func (s *Source) ServerConfig(clientAuth tls.ClientAuthType) *tls.Config {
	base := &tls.Config{MinVersion: tls.VersionTLS12}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		m := s.current()
		if m.cert == nil {
			return nil, ErrNoCertificateConfigured
		}
		c := &tls.Config{
			MinVersion:   tls.VersionTLS12,
			Certificates: []tls.Certificate{*m.cert},
			ClientAuth:   clientAuth,
			ClientCAs:    m.pool,
		}
		// Go would verify against ClientCAs itself; verifying here names
		// the CA file when a client is refused.
		switch clientAuth {
		case tls.RequireAndVerifyClientCert:
			c.ClientAuth = tls.RequireAnyClientCert
		case tls.VerifyClientCertIfGiven:
			c.ClientAuth = tls.RequestClientCert
		default:
			return c, nil
		}
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				if clientAuth == tls.RequireAndVerifyClientCert {
					return &VerifyError{Peer: "client", CAPath: s.files.CA, Err: errors.New("no client certificate")}
				}
				return nil
			}
			return s.verifyPeerWith(m, "client", "", cs.PeerCertificates)
		}
		return c, nil
	}
	return base
}

func (s *Source) verifyPeer(peer, name string, chain []*x509.Certificate) error {
	return s.verifyPeerWith(s.current(), peer, name, chain)
}

func (s *Source) verifyPeerWith(m *material, peer, name string, chain []*x509.Certificate) error {
	if len(chain) == 0 {
		return &VerifyError{Peer: peer, CAPath: s.files.CA, Name: name, Err: errors.New("no certificate")}
	}
	leaf := chain[0]
	subject, _ := SubjectName(leaf)
	fail := func(err error) error {
		return &VerifyError{Peer: peer, CAPath: s.files.CA, Name: name, Subject: subject, Err: err}
	}
	if peer == "server" && name == "" {
		return fail(errors.New("no server name to verify (tlsfiles: ClientConfig needs one)"))
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	usage := x509.ExtKeyUsageServerAuth
	if peer == "client" {
		usage = x509.ExtKeyUsageClientAuth
	}
	_, err := leaf.Verify(x509.VerifyOptions{
		Roots:         m.pool,
		Intermediates: inter,
		DNSName:       name,
		CurrentTime:   s.now(),
		KeyUsages:     []x509.ExtKeyUsage{usage},
	})
	if err != nil {
		return fail(err)
	}
	return nil
}

// read reads and validates the files. The caller holds s.mu.
func (s *Source) read() (*material, error) {
	now := s.now()
	caPEM, err := readFile("CA", s.files.CA)
	if err != nil {
		return nil, err
	}
	cas, err := parseCerts("CA", s.files.CA, caPEM)
	if err != nil {
		return nil, err
	}
	// A CA certificate that is not valid now (the old CA of a rotation
	// left in the bundle) is left out; the file is refused only when none
	// is left.
	pool := x509.NewCertPool()
	m := &material{pool: pool}
	var first *FileError
	for i, c := range cas {
		if err := validity("CA", s.files.CA, c, now); err != nil {
			fe := err.(*FileError) //nolint:errcheck // validity returns *FileError
			subject, _ := SubjectName(c)
			why := fmt.Sprintf("certificate %d of %d, %s: %v (%s)", i+1, len(cas), subject, fe.Err, fe.Detail)
			m.skipped = append(m.skipped, why)
			if first == nil {
				first = fe
			}
			continue
		}
		pool.AddCert(c)
	}
	if len(m.skipped) == len(cas) {
		return nil, &FileError{Role: "CA", Path: s.files.CA, Err: first.Err,
			Detail: "no valid CA certificate: " + strings.Join(m.skipped, "; ")}
	}
	if s.files.Cert == "" {
		return m, nil
	}
	certPEM, err := readFile("Cert", s.files.Cert)
	if err != nil {
		return nil, err
	}
	chain, err := parseCerts("Cert", s.files.Cert, certPEM)
	if err != nil {
		return nil, err
	}
	keyPEM, err := readFile("Key", s.files.Key)
	if err != nil {
		return nil, err
	}
	if err := hasKeyBlock(s.files.Key, keyPEM); err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, &FileError{Role: "Key", Path: s.files.Key, Err: ErrKeyMismatch,
			Detail: "cert " + s.files.Cert, Cause: err}
	}
	leaf := chain[0]
	if err := validity("Cert", s.files.Cert, leaf, now); err != nil {
		return nil, err
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{
		Roots: pool, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	}); err != nil {
		return nil, &FileError{Role: "Cert", Path: s.files.Cert, Err: ErrUntrusted,
			Detail: "CA file " + s.files.CA, Cause: err}
	}
	subject, err := SubjectName(leaf)
	if err != nil {
		m.subjectErr = fmt.Errorf("tlsfiles: Cert file %s: %w", s.files.Cert, err)
	}
	pair.Leaf = leaf
	m.cert, m.leaf, m.subject = &pair, leaf, subject
	return m, nil
}

func readFile(role, path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, &FileError{Role: role, Path: path, Err: ErrMissing}
		}
		return nil, &FileError{Role: role, Path: path, Err: ErrMissing, Cause: err}
	}
	return b, nil
}

func parseCerts(role, path string, data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	blocks := 0
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		blocks++
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, &FileError{Role: role, Path: path, Err: ErrNoCertificate, Detail: "a CERTIFICATE block does not parse", Cause: err}
		}
		certs = append(certs, c)
	}
	if blocks == 0 {
		return nil, &FileError{Role: role, Path: path, Err: ErrNotPEM}
	}
	if len(certs) == 0 {
		return nil, &FileError{Role: role, Path: path, Err: ErrNoCertificate}
	}
	return certs, nil
}

func hasKeyBlock(path string, data []byte) error {
	blocks := 0
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		blocks++
		if b.Type == "PRIVATE KEY" || b.Type == "EC PRIVATE KEY" || b.Type == "RSA PRIVATE KEY" {
			return nil
		}
	}
	if blocks == 0 {
		return &FileError{Role: "Key", Path: path, Err: ErrNotPEM}
	}
	return &FileError{Role: "Key", Path: path, Err: ErrNoKey}
}

func validity(role, path string, c *x509.Certificate, now time.Time) error {
	if now.After(c.NotAfter) {
		return &FileError{Role: role, Path: path, Err: ErrExpired,
			Detail: "NotAfter " + c.NotAfter.UTC().Format(time.RFC3339)}
	}
	if now.Before(c.NotBefore) {
		return &FileError{Role: role, Path: path, Err: ErrNotYetValid,
			Detail: "NotBefore " + c.NotBefore.UTC().Format(time.RFC3339)}
	}
	return nil
}
