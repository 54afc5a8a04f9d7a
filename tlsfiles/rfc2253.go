package tlsfiles

import (
	"crypto/x509"
	"encoding/asn1"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode/utf8"
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
//
// A keyword attribute whose string value Java renders in a way this does
// not reproduce is refused with ErrSubjectNotReproducible naming the
// attribute: a BMPString (Java 17 writes its bytes, not the UTF-16 text),
// a non-ASCII byte in a PrintableString, T61String, IA5String or
// GeneralString, or a UTF8String that is not UTF-8.
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
			if err := writeATV(&b, a); err != nil {
				return "", err
			}
		}
	}
	return b.String(), nil
}

var stringTagNames = map[int]string{
	tagUTF8String: "UTF8String", tagPrintableString: "PrintableString", tagT61String: "T61String",
	tagIA5String: "IA5String", tagGeneralString: "GeneralString", tagBMPString: "BMPString",
}

func writeATV(b *strings.Builder, a atv) error {
	oid := a.Type.String()
	kw, known := rfc2253Keywords[oid]
	v := a.Value
	str, isString := "", false
	if known && v.Class == asn1.ClassUniversal && !v.IsCompound {
		refuse := func(why string) error {
			return fmt.Errorf("%w: attribute %s (%s) is a %s %s", ErrSubjectNotReproducible, kw, oid, stringTagNames[v.Tag], why)
		}
		switch v.Tag {
		case tagUTF8String:
			if !utf8.Valid(v.Bytes) {
				return refuse("that is not UTF-8")
			}
			str, isString = string(v.Bytes), true
		case tagPrintableString, tagT61String, tagIA5String, tagGeneralString:
			for _, c := range v.Bytes {
				if c >= 0x80 {
					return refuse("with a non-ASCII byte, which Java decodes its own way; use a UTF8String")
				}
			}
			str, isString = string(v.Bytes), true
		case tagBMPString:
			return refuse("(Java's X500Principal.getName() writes its raw bytes, not its text); use a UTF8String")
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
		return nil
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
	return nil
}
