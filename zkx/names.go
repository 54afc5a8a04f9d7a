package zkx

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxNameLen bounds a member id or recipe name (one znode path component).
const MaxNameLen = 128

// ValidName checks a name used as one znode path component (a replica's
// member id, a recipe's member id): non-empty, at most MaxNameLen bytes of
// printable UTF-8 without spaces or '/', not "." or "..", and none of the
// ranges ZooKeeper's PathUtils refuses. The error says why.
func ValidName(name string) error {
	if len(name) > MaxNameLen {
		return fmt.Errorf("%d bytes, at most %d", len(name), MaxNameLen)
	}
	if err := ValidComponent(name); err != nil {
		return err
	}
	for _, r := range name {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return fmt.Errorf("contains character %U", r)
		}
	}
	return nil
}

// MaxComponentLen bounds one component of a directory path (ValidComponent).
const MaxComponentLen = 255

// ValidComponent checks one component of a directory path a caller
// chooses (a recipe's Dir, which may sit below a room whose name holds
// spaces): non-empty, at most MaxComponentLen bytes of UTF-8 without '/',
// not "." or "..", no control characters and none of the ranges
// ZooKeeper's PathUtils refuses. Unlike ValidName it allows spaces. The
// error says why.
func ValidComponent(name string) error {
	switch {
	case name == "":
		return errors.New("empty")
	case len(name) > MaxComponentLen:
		return fmt.Errorf("%d bytes, at most %d", len(name), MaxComponentLen)
	case name == "." || name == "..":
		return fmt.Errorf("%q is a relative path element", name)
	case !utf8.ValidString(name):
		return errors.New("not valid UTF-8")
	case strings.ContainsRune(name, '/'):
		return errors.New("contains '/'")
	}
	for _, r := range name {
		if unicode.IsControl(r) || (r >= 0xd800 && r <= 0xf8ff) || (r >= 0xfff0 && r <= 0xffff) {
			return fmt.Errorf("contains character %U", r)
		}
	}
	return nil
}
