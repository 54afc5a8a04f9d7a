// Package tlsfiles gives TLS configurations built from PEM files that an
// operator (or cert-manager, Vault, a cron job) replaces while the process
// runs: the CA bundle, this side's certificate and its key.
//
// roomlog uses it for its links to ZooKeeper (zkx.DialConfig.TLS,
// replica.Config.ZooKeeperTLS) and between masters (the checkpoint
// endpoint); the tools take the same three files as flags. It imports
// nothing of roomlog.
//
// # Using it
//
//  1. src, err := tlsfiles.Load(tlsfiles.Files{CA: "ca.pem", Cert: "me.pem", Key: "me-key.pem"}).
//     Load reads and validates the files at once; a client that only
//     verifies its server gives the CA alone.
//  2. Dial with src.ClientConfig(serverName), or serve with
//     src.ServerConfig(tls.RequireAndVerifyClientCert). Both configs ask
//     src for the material at every handshake, so build them once.
//  3. src.Identity() is the certificate's subject as ZooKeeper's x509
//     authentication provider names it: the id of an ACL entry of scheme
//     x509 granting this certificate.
//  4. Replace the files whenever you like. Write each to a temp name and
//     rename it over the old one (testpki.WriteFile does), so no reader
//     sees half a file; a certificate and its key replaced one after the
//     other are taken as a pair once both are in place.
//
// # Validation
//
// Every read checks, in this order, and refuses with a *FileError naming
// the file (Role CA, Cert or Key, and Path) and the reason, a sentinel to
// test with errors.Is:
//
//	ErrMissing        the file cannot be read
//	ErrNotPEM         no PEM block in it
//	ErrNoCertificate  PEM, but no (parsable) CERTIFICATE block
//	ErrNoKey          the key file holds no private key block
//	ErrKeyMismatch    the key is not the certificate's (tls.X509KeyPair)
//	ErrExpired        now is past NotAfter (the message gives NotAfter)
//	ErrNotYetValid    now is before NotBefore (the message gives it)
//	ErrUntrusted      the certificate (and the intermediates after it in
//	                  the Cert file) does not verify against the CA file
//
// A CA certificate that is expired or not yet valid (the old CA left in
// the bundle after a CA rotation) is left out of the pool and logged at
// warn with its position and subject; the CA file is refused (ErrExpired
// or ErrNotYetValid) only when no valid CA certificate is left, and the
// message names each one.
//
// # Rotation
//
// A Source keeps the last good material. When it is used (a handshake,
// Identity, Certificate) and at least Options.CheckEvery (1 s) has passed
// since its last look, it stats the three files; if the mtime, size,
// inode or device of any changed since the last read attempt, it reads
// and validates them again. A read that succeeds replaces the material
// (logged at info with the new subject, serial and NotAfter); one that
// fails keeps the old material, logs the error and makes Err return it
// until a later read succeeds. So a rotation to broken or expired files
// never serves them, and a half-done rotation (new cert, old key) is
// retried at the next change of either file. Unchanged files are read
// again (at most every CheckEvery) after a read refused as not yet valid
// (a NotBefore a little ahead of our clock: adopted once it is valid) and
// while the certificate in use expires within RereadBefore (1 h). Reload
// reads at once.
//
// A certificate that expires while in use is still presented (the peer
// refuses it, by name) and Err reports it ("the certificate in use:
// ... expired"), joined with why newer files were refused if they were;
// rotation is the fix, and Certificate's NotAfter
// tells when it is due. Connections already open are not touched: only
// new handshakes use new material (go-zookeeper's reconnects included, so
// a ZooKeeper session survives a rotation). A server bounds how long a
// peer verified once keeps access with LimitConnAge(srv, maxAge): no
// request starts on a connection older than maxAge, and none is open at
// 2×maxAge, however busy its client keeps it.
//
// # Verifying peers
//
// ClientConfig sets InsecureSkipVerify and does the full verification in
// VerifyConnection instead: the chain against the CA pool read at that
// handshake (Go's own check would use a pool fixed in the config) and the
// server's name (a DNS name or an IP address in its SANs) against
// serverName, which is required. ServerConfig's GetConfigForClient
// returns a config with the current certificate and, for
// RequireAndVerifyClientCert and VerifyClientCertIfGiven, verifies client
// chains against the current CA the same way. A refused peer is a
// *VerifyError wrapping ErrPeerUntrusted that names the CA file, the
// peer's subject, the name checked and crypto/x509's reason.
//
// # Identities (RFC 2253, as Java writes them)
//
// ZooKeeper's X509AuthenticationProvider authenticates a TLS client as
// X500Principal.getName() of its certificate's subject. SubjectName and
// Identity write the same string (see SubjectName for the rules), e.g.
// "CN=member-a,O=roomlog-test" for a subject of O=roomlog-test, CN=member-a;
// zkx's tests check it against a real ZooKeeper by creating a znode whose
// only ACL entry is x509:<Identity()> and reading it with that certificate,
// and TestSubjectNameAgainstJava against getName() itself when java is
// installed. A subject attribute whose Java rendering SubjectName cannot
// reproduce (a BMPString, non-ASCII bytes outside a UTF8String) is refused
// with ErrSubjectNotReproducible naming the attribute: such a certificate
// still serves TLS, but Identity gives no id for it.
package tlsfiles
