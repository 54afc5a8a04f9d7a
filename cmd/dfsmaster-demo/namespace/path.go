package namespace

import (
	"path"
	"strings"
	"unicode/utf8"
)

// Path limits (the usual POSIX and HDFS bounds).
const (
	MaxPathBytes = 4096 // whole path, in bytes
	MaxNameBytes = 255  // one component, in bytes
)

// ValidatePath reports whether p is a valid namespace path: absolute, clean
// (no empty components, no trailing slash, no "." or ".."), valid UTF-8
// without NUL, at most MaxPathBytes long with components of at most
// MaxNameBytes. The error wraps ErrInvalidPath.
func ValidatePath(p string) error {
	switch {
	case p == "":
		return reject(ErrInvalidPath, "empty path")
	case len(p) > MaxPathBytes:
		return reject(ErrInvalidPath, "path is %d bytes long (max %d)", len(p), MaxPathBytes)
	case !utf8.ValidString(p):
		return reject(ErrInvalidPath, "path %q is not valid UTF-8", p)
	case strings.IndexByte(p, 0) >= 0:
		return reject(ErrInvalidPath, "path %q contains NUL", p)
	case p[0] != '/':
		return reject(ErrInvalidPath, "path %q is not absolute", p)
	case path.Clean(p) != p:
		return reject(ErrInvalidPath, "path %q is not clean (empty, \".\" or \"..\" component, or trailing slash)", p)
	}
	for _, name := range components(p) {
		if len(name) > MaxNameBytes {
			return reject(ErrInvalidPath, "path %q has a component of %d bytes (max %d)", p, len(name), MaxNameBytes)
		}
	}
	return nil
}

// components splits a valid path into its names; the root has none.
func components(p string) []string {
	if p == "/" {
		return nil
	}
	return strings.Split(p[1:], "/")
}
