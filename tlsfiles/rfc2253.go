package tlsfiles

import (
	"crypto/x509"
	"encoding/asn1"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode/utf16"
)

// SubjectName returns cert's subject as Java's X500Principal.getName()
// (RFC 2253 form) writes it, which is the id ZooKeeper's
// X509AuthenticationProvider gives a client (scheme x509):
//
//   - relative distinguished names from the last in the certificate to
//     the first, joined by ","; the values of a multi-valued one joined by
//     "+" in their certificate order;
//   - the keywords CN, C, L, ST, O, OU, STREET, DC and UID; any other
//     attribute (emailAddress, serialNumber...) as its dotted OID with the
//     value as "#" and the lowercase hex of its DER encoding, as is a value
//     that is not a directory string;
//   - in a string value, each of , = + < > # ; " \ is escaped with a
//     backslash wherever it occurs, NUL is written \00, and leading and
//     trailing spaces are escaped; every other character is kept as is.
func SubjectName(cert *x509.Certificate) (string, error) {
	return rfc2253(cert.RawSubject)
}

type atv struct {
	Type  asn1.ObjectIdentifier
	Value asn1.RawValue
}

// The SET suffix makes encoding/asn1 read a SET OF.
type rdnSET []atv

var rfc2253Keywords = map[string]string{
	"2.5.4.3":                    "CN",
	"2.5.4.6":                    "C",
	"2.5.4.7":                    "L",
	"2.5.4.8":                    "ST",
	"2.5.4.10":                   "O",
	"2.5.4.11":                   "OU",
	"2.5.4.9":                    "STREET",
	"0.9.2342.19200300.100.1.25": "DC",
	"0.9.2342.19200300.100.1.1":  "UID",
}

// ASN.1 universal tags of the directory strings Java writes as text.
const (
	tagUTF8String      = 12
	tagPrintableString = 19
	tagT61String       = 20
	tagIA5String       = 22
	tagGeneralString   = 27
	tagBMPString       = 30
)

func rfc2253(raw []byte) (string, error) {
	var seq []rdnSET
	rest, err := asn1.Unmarshal(raw, &seq)
	if err != nil {
		return "", fmt.Errorf("tlsfiles: subject: %w", err)
	}
	if len(rest) > 0 {
		return "", fmt.Errorf("tlsfiles: subject: %d trailing bytes", len(rest))
	}
	var b strings.Builder
	for i := len(seq) - 1; i >= 0; i-- {
		if i != len(seq)-1 {
			b.WriteByte(',')
		}
		for j, a := range seq[i] {
			if j > 0 {
				b.WriteByte('+')
			}
			writeATV(&b, a)
		}
	}
	return b.String(), nil
}

func writeATV(b *strings.Builder, a atv) {
	oid := a.Type.String()
	kw, known := rfc2253Keywords[oid]
	v := a.Value
	str, isString := "", false
	if v.Class == asn1.ClassUniversal && !v.IsCompound {
		switch v.Tag {
		case tagUTF8String, tagPrintableString, tagT61String, tagIA5String, tagGeneralString:
			str, isString = string(v.Bytes), true
		case tagBMPString:
			if len(v.Bytes)%2 == 0 {
				u := make([]uint16, len(v.Bytes)/2)
				for k := range u {
					u[k] = uint16(v.Bytes[2*k])<<8 | uint16(v.Bytes[2*k+1])
				}
				str, isString = string(utf16.Decode(u)), true
			}
		}
	}
	if !known || !isString {
		if known {
			b.WriteString(kw)
		} else {
			b.WriteString(oid)
		}
		b.WriteString("=#")
		b.WriteString(hex.EncodeToString(v.FullBytes))
		return
	}
	b.WriteString(kw)
	b.WriteByte('=')
	var esc strings.Builder
	for _, c := range str {
		switch {
		case strings.ContainsRune(",=+<>#;\"\\", c):
			esc.WriteByte('\\')
			esc.WriteRune(c)
		case c == 0:
			esc.WriteString(`\00`)
		default:
			esc.WriteRune(c)
		}
	}
	s := []rune(esc.String())
	lead := 0
	for lead < len(s) && (s[lead] == ' ' || s[lead] == '\r') {
		lead++
	}
	trail := len(s) - 1
	for trail >= 0 && (s[trail] == ' ' || s[trail] == '\r') {
		trail--
	}
	for k, c := range s {
		if k < lead || k > trail {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
}
