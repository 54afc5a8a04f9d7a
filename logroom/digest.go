package logroom

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode"
)

// ErrBadDigest: digest credentials that do not parse (ParseDigest,
// LoadDigestFile).
var ErrBadDigest = errors.New("logroom: bad digest credentials")

// maxDigestFile bounds a credentials file.
const maxDigestFile = 4096

// ParseDigest parses "user:password" (ZooKeeper digest credentials). The
// user is non-empty and holds no ':'; the password is non-empty; neither
// holds control characters or surrounding spaces. Errors never include the
// password.
func ParseDigest(s string) (*Digest, error) {
	user, pass, ok := strings.Cut(s, ":")
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: want user:password (no ':' found)", ErrBadDigest)
	case user == "":
		return nil, fmt.Errorf("%w: empty user", ErrBadDigest)
	case pass == "":
		return nil, fmt.Errorf("%w: empty password for user %q", ErrBadDigest, user)
	case strings.TrimSpace(user) != user || strings.TrimSpace(pass) != pass:
		return nil, fmt.Errorf("%w: user or password has surrounding spaces", ErrBadDigest)
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return nil, fmt.Errorf("%w: control character in user or password", ErrBadDigest)
	}
	return &Digest{User: user, Password: pass}, nil
}

// LoadDigestFile reads "user:password" from the first line of path (a
// trailing newline is allowed; nothing may follow it), so that a password
// never appears on a command line. The file must be a regular file of at
// most 4 KiB; its content never appears in an error.
func LoadDigestFile(path string) (*Digest, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("logroom: digest file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("logroom: digest file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrBadDigest, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxDigestFile+1))
	if err != nil {
		return nil, fmt.Errorf("logroom: digest file %s: %w", path, err)
	}
	if len(b) > maxDigestFile {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrBadDigest, path, maxDigestFile)
	}
	s := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	d, err := ParseDigest(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return d, nil
}
