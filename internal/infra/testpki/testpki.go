package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/roomlog/roomlog/tlsfiles"
)

// CA is a self-signed certificate authority.
type CA struct {
	Name string
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// PEM is the CA certificate, PEM encoded.
	PEM []byte
}

// NewCA makes a CA whose subject is CN=name,O=roomlog-test, valid from an
// hour ago for ten years.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"roomlog-test"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("testpki: CA %s: %w", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Name: name, Cert: cert, Key: key, PEM: pemBlock("CERTIFICATE", der)}, nil
}

// Options describe a certificate to issue. The zero value is a client and
// server certificate for 127.0.0.1 and localhost, valid from an hour ago
// for a day.
type Options struct {
	// Hosts are the DNS names and IP addresses of the certificate
	// (default 127.0.0.1 and localhost).
	Hosts []string
	// NotBefore and NotAfter default to an hour ago and a day from now.
	NotBefore, NotAfter time.Time
	// Client and Server set the extended key usages (neither: both).
	Client, Server bool
	// Subject overrides the subject (default CN=<name>,O=roomlog-test).
	Subject *pkix.Name
}

// Cert is an issued certificate and its key.
type Cert struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// CertPEM and KeyPEM are the files' contents (KeyPEM is PKCS#8).
	CertPEM, KeyPEM []byte
}

// Make issues a certificate without writing it.
func (ca *CA) Make(name string, o Options) (*Cert, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	if o.NotBefore.IsZero() {
		o.NotBefore = now.Add(-time.Hour)
	}
	if o.NotAfter.IsZero() {
		o.NotAfter = now.Add(24 * time.Hour)
	}
	if len(o.Hosts) == 0 {
		o.Hosts = []string{"127.0.0.1", "localhost"}
	}
	if !o.Client && !o.Server {
		o.Client, o.Server = true, true
	}
	subject := pkix.Name{CommonName: name, Organization: []string{"roomlog-test"}}
	if o.Subject != nil {
		subject = *o.Subject
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      subject,
		NotBefore:    o.NotBefore,
		NotAfter:     o.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
	}
	if o.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	if o.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	for _, h := range o.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("testpki: issue %s: %w", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	p8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &Cert{Cert: cert, Key: key, CertPEM: pemBlock("CERTIFICATE", der), KeyPEM: pemBlock("PRIVATE KEY", p8)}, nil
}

// Issue issues a certificate and writes dir/ca.pem (the CA),
// dir/<name>.pem (the certificate) and dir/<name>-key.pem (its key),
// creating dir. It returns the three paths.
func (ca *CA) Issue(dir, name string, o Options) (tlsfiles.Files, error) {
	c, err := ca.Make(name, o)
	if err != nil {
		return tlsfiles.Files{}, err
	}
	f := FilesIn(dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return tlsfiles.Files{}, err
	}
	err = errors.Join(
		WriteFile(f.CA, ca.PEM),
		WriteFile(f.Cert, c.CertPEM),
		WriteFile(f.Key, c.KeyPEM))
	return f, err
}

// FilesIn returns the paths Issue writes for name in dir.
func FilesIn(dir, name string) tlsfiles.Files {
	return tlsfiles.Files{
		CA:   filepath.Join(dir, "ca.pem"),
		Cert: filepath.Join(dir, name+".pem"),
		Key:  filepath.Join(dir, name+"-key.pem"),
	}
}

// WriteCA writes the CA certificate to path.
func (ca *CA) WriteCA(path string) error { return WriteFile(path, ca.PEM) }

// WriteFile writes data to a temp file beside path and renames it over
// path (mode 0600).
func WriteFile(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}
