package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/namespace"
)

// Strictness of request bodies and paths beyond encoding/json's (see
// doc.go, "Strictness"). encoding/json matches object keys to fields case-
// insensitively, keeps the last of duplicate keys, and silently replaces
// invalid UTF-8 (and lone UTF-16 surrogate escapes) in strings with U+FFFD;
// the API accepts none of that.

// pathFields are the JSON keys of the request bodies whose value is a
// namespace path: their strings must be valid UTF-8 as sent (else 400
// invalid_path, like any bad path).
var pathFields = map[string]bool{"path": true, "src": true, "dst": true}

// jsonKeys returns the exact JSON object keys of struct type T (its fields'
// json tag names, or field names when untagged).
func jsonKeys[T any]() []string {
	rt := reflect.TypeFor[T]()
	keys := make([]string, 0, rt.NumField())
	for i := 0; i < rt.NumField(); i++ {
		f := rt.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		keys = append(keys, name)
	}
	return keys
}

// prescanObject checks the top level of a JSON object body before it is
// decoded into a struct with the exact keys keys: every key must be one of
// them exactly (a key that differs only by case is named as such),
// no key may repeat, and the string value of a path field must be valid
// UTF-8 as sent, without lone surrogate escapes. Anything else about the
// body (not an object, malformed JSON, wrong types, trailing data) is left
// to the decoder, which reports it. The scan is linear in the body, which
// MaxBodyBytes bounds.
func prescanObject(body []byte, keys []string) *httpError {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil // not an object: the decoder says why
	}
	seen := make(map[string]bool, len(keys))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		key, ok := tok.(string)
		if !ok {
			return nil
		}
		if !contains(keys, key) {
			for _, k := range keys {
				if strings.EqualFold(k, key) {
					return badRequest("unknown field %q: JSON keys are case-sensitive; did you mean %q?", key, k)
				}
			}
			return badRequest("unknown field %q (fields: %s)", key, strings.Join(keys, ", "))
		}
		if seen[key] {
			return badRequest("duplicate field %q", key)
		}
		seen[key] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil
		}
		if pathFields[key] && len(raw) > 0 && raw[0] == '"' {
			if why := badJSONString(raw); why != "" {
				return &httpError{status: http.StatusBadRequest, code: string(namespace.CodeInvalidPath),
					msg: fmt.Sprintf("%s: %s", key, why)}
			}
		}
	}
	return nil
}

// badJSONString says why a JSON string literal (quotes included, already
// known to be well-formed JSON) does not denote valid UTF-8 text: raw bytes
// that are not UTF-8, or a \u escape of an unpaired UTF-16 surrogate
// (encoding/json turns both into U+FFFD). "" when it is fine.
func badJSONString(raw []byte) string {
	if !utf8.Valid(raw) {
		return "not valid UTF-8"
	}
	s := raw[1 : len(raw)-1]
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			continue
		}
		i++ // the escaped character
		if i >= len(s) || s[i] != 'u' {
			continue
		}
		r, ok := hex4(s, i+1)
		if !ok {
			return "malformed \\u escape"
		}
		i += 4
		switch {
		case r >= 0xDC00 && r <= 0xDFFF:
			return fmt.Sprintf("unpaired UTF-16 surrogate \\u%04X (not valid UTF-8)", r)
		case r >= 0xD800 && r <= 0xDBFF:
			// Must be followed at once by an escaped low surrogate.
			if i+2 >= len(s) || s[i+1] != '\\' || s[i+2] != 'u' {
				return fmt.Sprintf("unpaired UTF-16 surrogate \\u%04X (not valid UTF-8)", r)
			}
			lo, ok := hex4(s, i+3)
			if !ok || lo < 0xDC00 || lo > 0xDFFF {
				return fmt.Sprintf("unpaired UTF-16 surrogate \\u%04X (not valid UTF-8)", r)
			}
			i += 6
		}
	}
	return ""
}

// hex4 parses the 4 hex digits of s at i.
func hex4(s []byte, i int) (rune, bool) {
	if i+4 > len(s) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(s[i:i+4]), 16, 32)
	return rune(v), err == nil
}

// checkPathText refuses a path (of the field named what) that is not valid
// UTF-8 or that holds a control character (C0, DEL, C1: newline, tab, NUL,
// ESC, ...): 400 invalid_path. namespace.ValidatePath checks the rest (and
// rejects invalid UTF-8 and NUL again); the API is stricter than the log
// format, so this check stays out of the applier, whose verdicts must not
// change for entries already in a log.
func checkPathText(what, p string) *httpError {
	bad := func(format string, args ...any) *httpError {
		return &httpError{status: http.StatusBadRequest, code: string(namespace.CodeInvalidPath),
			msg: what + ": " + fmt.Sprintf(format, args...)}
	}
	if !utf8.ValidString(p) {
		return bad("path %q is not valid UTF-8", p)
	}
	for i, r := range p {
		if unicode.IsControl(r) {
			return bad("path %q has a control character (U+%04X) at byte %d", p, r, i)
		}
	}
	return nil
}

// checkNotRoot refuses an operation on the root ("rename /", "delete /")
// before it reaches the log: 400 invalid_path, the code the namespace
// applier would answer with, but without an index, since no entry is used.
func checkNotRoot(op, p string) *httpError {
	if p != "/" {
		return nil
	}
	return &httpError{status: http.StatusBadRequest, code: string(namespace.CodeInvalidPath),
		msg: fmt.Sprintf("%s /: the root cannot be %s", op, map[string]string{"rename": "moved", "delete": "deleted"}[op])}
}
