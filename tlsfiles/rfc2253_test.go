package tlsfiles_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/asn1"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/testpki"
	"github.com/roomlog/roomlog/tlsfiles"
)

type rawATV struct {
	Type  asn1.ObjectIdentifier
	Value asn1.RawValue
}

type rawRDNSET []rawATV

func strValue(tag int, s string) asn1.RawValue {
	return asn1.RawValue{Tag: tag, Bytes: []byte(s)}
}

func bmpValue(s string) asn1.RawValue {
	u := utf16.Encode([]rune(s))
	b := make([]byte, 0, 2*len(u))
	for _, x := range u {
		b = append(b, byte(x>>8), byte(x))
	}
	return asn1.RawValue{Tag: 30, Bytes: b}
}

var (
	oidCN     = asn1.ObjectIdentifier{2, 5, 4, 3}
	oidO      = asn1.ObjectIdentifier{2, 5, 4, 10}
	oidOU     = asn1.ObjectIdentifier{2, 5, 4, 11}
	oidTitle  = asn1.ObjectIdentifier{2, 5, 4, 12}
	oidDC     = asn1.ObjectIdentifier{0, 9, 2342, 19200300, 100, 1, 25}
	oidUID    = asn1.ObjectIdentifier{0, 9, 2342, 19200300, 100, 1, 1}
	oidEmail  = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 1}
	oidStreet = asn1.ObjectIdentifier{2, 5, 4, 9}
)

// certWithSubject makes a certificate whose subject is rdns, signed by ca
// (nil: self-signed).
func certWithSubject(t *testing.T, ca *testpki.CA, rdns []rawRDNSET, serial int64) (der []byte, key *ecdsa.PrivateKey) {
	t.Helper()
	raw, err := asn1.Marshal(rdns)
	require.NoError(t, err)
	key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), RawSubject: raw,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}}
	parent, signer := tmpl, key
	if ca != nil {
		parent, signer = ca.Cert, ca.Key
	}
	der, err = x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	require.NoError(t, err)
	return der, key
}

// subjectCases are subjects whose Java rendering SubjectName reproduces
// (ok) or refuses (the attribute named in the error).
var subjectCases = []struct {
	rdns    []rawRDNSET
	refused string // "" = reproduced
}{
	{[]rawRDNSET{{{oidCN, strValue(12, "a")}, {oidO, strValue(12, "b")}}, {{oidOU, strValue(19, "x")}, {oidUID, strValue(12, "y")}}}, ""},
	{[]rawRDNSET{{{oidO, strValue(12, "Müller AG")}}, {{oidCN, strValue(12, "#hash  ")}}}, ""},
	{[]rawRDNSET{{{oidCN, strValue(12, "a\x00b\r\nc= d")}}}, ""},
	{[]rawRDNSET{{{oidCN, strValue(12, " \r lead")}}}, ""},
	{[]rawRDNSET{{{oidDC, strValue(22, "example")}}, {{oidDC, strValue(22, "com")}}, {{oidStreet, strValue(12, "Main St 1")}},
		{{oidEmail, strValue(22, "a@b.c")}}, {{oidTitle, strValue(12, "boss")}}}, ""},
	{[]rawRDNSET{{{oidCN, strValue(12, "")}}}, ""},
	{[]rawRDNSET{{{asn1.ObjectIdentifier{1, 2, 3, 4}, strValue(12, "x")}}, {{oidCN, strValue(12, "z")}}}, ""},
	{[]rawRDNSET{{{oidCN, strValue(12, "tab\there")}}, {{oidO, strValue(12, "ünïcödé,+")}}}, ""},
	{[]rawRDNSET{{{oidO, strValue(12, "o")}}, {{oidCN, bmpValue("Zoë")}}}, "CN"},
	{[]rawRDNSET{{{oidOU, bmpValue("plain ascii")}}}, "OU"},
	{[]rawRDNSET{{{oidCN, strValue(20, "M\xfcller")}}}, "CN"}, // T61String, not ASCII
}

// TestSubjectNotReproducible: a subject attribute whose Java rendering
// SubjectName cannot write (a BMPString, which Java 17's getName() writes
// as its raw bytes, not as UTF-16; a non-ASCII byte in a string type
// other than UTF8String) is refused with
// ErrSubjectNotReproducible naming the attribute. The files still load
// (the certificate works for TLS); Identity returns that error, so no
// x509 ACL entry that would never match is made. Before the fix the
// BMPString was decoded as UTF-16 ("CN=Zoë") and used.
func TestSubjectNotReproducible(t *testing.T) {
	for i, tc := range subjectCases {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			der, _ := certWithSubject(t, nil, tc.rdns, int64(i+1))
			c, err := x509.ParseCertificate(der)
			require.NoError(t, err)
			_, err = tlsfiles.SubjectName(c)
			if tc.refused == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tlsfiles.ErrSubjectNotReproducible)
			require.ErrorContains(t, err, tc.refused+" ")
		})
	}

	dir := t.TempDir()
	ca := newCA(t, "ca")
	files := issue(t, ca, dir, "m", testpki.Options{})
	der, key := certWithSubject(t, ca, []rawRDNSET{{{oidCN, bmpValue("Zoë")}}}, 99)
	p8, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	require.NoError(t, testpki.WriteFile(files.Cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	require.NoError(t, testpki.WriteFile(files.Key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8})))
	src, err := tlsfiles.Load(files)
	require.NoError(t, err, "the certificate still serves TLS")
	_, err = src.Identity()
	require.ErrorIs(t, err, tlsfiles.ErrSubjectNotReproducible)
	require.ErrorContains(t, err, "CN")
	require.ErrorContains(t, err, "BMPString")
}

// TestSubjectNameAgainstJava compares SubjectName with Java's
// X500Principal.getName() (the id ZooKeeper's x509 provider uses) for
// every subject SubjectName does not refuse. Skipped without java.
func TestSubjectNameAgainstJava(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	if _, err := exec.LookPath("java"); err != nil {
		t.Skip("no java")
	}
	dir := t.TempDir()
	var want []string
	for i, tc := range subjectCases {
		der, _ := certWithSubject(t, nil, tc.rdns, int64(i+1))
		c, err := x509.ParseCertificate(der)
		require.NoError(t, err)
		s, err := tlsfiles.SubjectName(c)
		if tc.refused != "" {
			require.Error(t, err)
			s = "(refused)"
		}
		want = append(want, s)
		require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("%02d.der", i)), der, 0o644))
	}
	src := `import java.io.*; import java.nio.file.*; import java.security.cert.*;
public class N { public static void main(String[] a) throws Exception {
 CertificateFactory f = CertificateFactory.getInstance("X.509");
 for (int i = 0; i < Integer.parseInt(a[1]); i++) {
  try (InputStream in = Files.newInputStream(Paths.get(a[0], String.format("%02d.der", i)))) {
   X509Certificate c = (X509Certificate) f.generateCertificate(in);
   String n = c.getSubjectX500Principal().getName();
   StringBuilder sb = new StringBuilder();
   for (char ch : n.toCharArray()) { if (ch < 0x20 || ch > 0x7e) sb.append(String.format("\\u%04x", (int) ch)); else sb.append(ch); }
   System.out.println(sb);
  } } } }`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "N.java"), []byte(src), 0o644))
	out, err := exec.Command("java", filepath.Join(dir, "N.java"), dir, fmt.Sprint(len(subjectCases))).CombinedOutput()
	require.NoError(t, err, string(out))
	got := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	require.Len(t, got, len(subjectCases), string(out))
	esc := func(s string) string {
		var b strings.Builder
		for _, u := range utf16.Encode([]rune(s)) {
			if u < 0x20 || u > 0x7e {
				fmt.Fprintf(&b, "\\u%04x", u)
			} else {
				b.WriteRune(rune(u))
			}
		}
		return b.String()
	}
	for i := range subjectCases {
		if want[i] == "(refused)" {
			t.Logf("case %d refused by SubjectName; java: %s", i, got[i])
			continue
		}
		require.Equal(t, got[i], esc(want[i]), "case %d", i)
	}
}
