package tlsfiles

import (
	"errors"
	"fmt"
)

// Reasons a file is refused, wrapped in a *FileError; check them with
// errors.Is.
var (
	// ErrMissing: the file does not exist (or cannot be read).
	ErrMissing = errors.New("missing")
	// ErrNotPEM: the file holds no PEM block.
	ErrNotPEM = errors.New("not PEM")
	// ErrNoCertificate: the file holds PEM but no CERTIFICATE block.
	ErrNoCertificate = errors.New("no certificate")
	// ErrNoKey: the key file holds no private key block.
	ErrNoKey = errors.New("no private key")
	// ErrKeyMismatch: the private key is not the certificate's key.
	ErrKeyMismatch = errors.New("key does not match cert")
	// ErrExpired: the certificate's NotAfter has passed.
	ErrExpired = errors.New("expired")
	// ErrNotYetValid: the certificate's NotBefore is still to come.
	ErrNotYetValid = errors.New("not yet valid")
	// ErrUntrusted: the certificate is not signed by the CA (the chain
	// does not verify against the CA file).
	ErrUntrusted = errors.New("not signed by the CA")
	// ErrBadConfig: Files names no CA, or a Cert without a Key (or the
	// reverse).
	ErrBadConfig = errors.New("tlsfiles: bad config")
	// ErrNoCertificateConfigured: a server config, or Identity, without
	// Files.Cert.
	ErrNoCertificateConfigured = errors.New("tlsfiles: no certificate configured (Files.Cert is empty)")
)

// FileError is a refused file: which one (Role "CA", "Cert" or "Key",
// and Path) and why (Err wraps one of the reasons above, and may carry
// the underlying parse or verify error).
type FileError struct {
	Role   string
	Path   string
	Err    error  // one of ErrMissing ... ErrUntrusted
	Detail string // e.g. "NotAfter 2026-11-27T06:00:00Z"; may be empty
	Cause  error  // the underlying error (os, x509), may be nil
}

func (e *FileError) Error() string {
	s := fmt.Sprintf("tlsfiles: %s file %s: %v", e.Role, e.Path, e.Err)
	if e.Detail != "" {
		s += " (" + e.Detail + ")"
	}
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	return s
}

// Unwrap returns the reason and the cause.
func (e *FileError) Unwrap() []error {
	if e.Cause != nil {
		return []error{e.Err, e.Cause}
	}
	return []error{e.Err}
}

// VerifyError is a peer certificate refused during a handshake: it names
// the CA file it was checked against.
type VerifyError struct {
	Peer    string // "server" or "client"
	CAPath  string
	Name    string // the host name checked ("" for a client)
	Subject string
	Err     error
}

func (e *VerifyError) Error() string {
	s := fmt.Sprintf("tlsfiles: %s certificate %q", e.Peer, e.Subject)
	if e.Name != "" {
		s += fmt.Sprintf(" for %q", e.Name)
	}
	return s + fmt.Sprintf(" refused (CA file %s): %v", e.CAPath, e.Err)
}

// Unwrap returns ErrPeerUntrusted and the verification error.
func (e *VerifyError) Unwrap() []error { return []error{ErrPeerUntrusted, e.Err} }

// ErrPeerUntrusted is wrapped by every VerifyError.
var ErrPeerUntrusted = errors.New("peer certificate not trusted")

// ErrSubjectNotReproducible: the certificate's subject holds an attribute
// whose rendering by Java's X500Principal.getName() SubjectName cannot
// reproduce (a BMPString; a non-ASCII byte in a string type other than
// UTF8String; a UTF8String that is not UTF-8), so no x509 ACL id can be
// given for it. Issue the certificate with UTF8String or PrintableString
// values.
var ErrSubjectNotReproducible = errors.New("tlsfiles: subject not reproducible as Java writes it")
