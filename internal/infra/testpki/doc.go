// Package testpki makes certificate authorities and certificates for
// roomlog's tests, demo and benchmarks (crypto/x509, ECDSA P-256) and
// writes them as PEM files that tlsfiles reads and ZooKeeper's PEM key and
// trust stores accept: certificates as CERTIFICATE blocks, keys as PKCS#8
// PRIVATE KEY blocks. Files are written to a temp name and renamed, so a
// reader sees the old file or the new one (a new inode), never half of one.
//
// It is test infrastructure: the keys are generated on the spot and
// written unencrypted.
//
// # Using it
//
//  1. ca, err := testpki.NewCA("name"): a self-signed ECDSA P-256 CA,
//     subject CN=name,O=roomlog-test, valid for ten years.
//  2. files, err := ca.Issue(dir, "member-a", testpki.Options{}) writes
//     dir/ca.pem, dir/member-a.pem and dir/member-a-key.pem and returns
//     their paths as tlsfiles.Files: a client and server certificate for
//     127.0.0.1 and localhost, subject CN=member-a,O=roomlog-test, valid
//     from an hour ago for a day. Options set other hosts, key usages,
//     validity (an expired or not yet valid certificate) or subject.
//  3. Issuing again under the same name replaces the files (a rotation).
//     ca.Make issues without writing; WriteFile writes any file the same
//     way (temp name, rename).
package testpki
