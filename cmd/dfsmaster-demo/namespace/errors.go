package namespace

import (
	"errors"
	"fmt"
)

// Code is the stable, machine-readable name of a rejected command or read.
// It is what the HTTP API puts in {"error": code}.
type Code string

// The codes a command or a read can be rejected with.
const (
	CodeInvalidPath   Code = "invalid_path"    // not absolute, not clean, too long, bad UTF-8, NUL; or an impossible move (root, into itself)
	CodeNotFound      Code = "not_found"       // the path (or a parent) does not exist
	CodeAlreadyExists Code = "already_exists"  // the target path exists
	CodeNotEmpty      Code = "not_empty"       // non-recursive delete of a directory with children
	CodeNotADirectory Code = "not_a_directory" // a parent component is a file
	CodeIsADirectory  Code = "is_a_directory"  // a file operation on a directory
	CodeBadRequest    Code = "bad_request"     // malformed command, unknown version, out-of-range number
	codeOK            Code = ""
)

// Sentinel errors, one per Code. Errors returned by this package (and by
// Response.Err) wrap exactly one of them; check with errors.Is.
var (
	ErrInvalidPath   = errors.New("invalid path")
	ErrNotFound      = errors.New("not found")
	ErrAlreadyExists = errors.New("already exists")
	ErrNotEmpty      = errors.New("directory not empty")
	ErrNotADirectory = errors.New("not a directory")
	ErrIsADirectory  = errors.New("is a directory")
	ErrBadRequest    = errors.New("bad request")
)

// codes is ordered so CodeOf is deterministic.
var codes = [...]struct {
	code Code
	err  error
}{
	{CodeInvalidPath, ErrInvalidPath},
	{CodeNotFound, ErrNotFound},
	{CodeAlreadyExists, ErrAlreadyExists},
	{CodeNotEmpty, ErrNotEmpty},
	{CodeNotADirectory, ErrNotADirectory},
	{CodeIsADirectory, ErrIsADirectory},
	{CodeBadRequest, ErrBadRequest},
}

// CodeOf returns the Code of an error of this package, and false for any
// other error (nil included).
func CodeOf(err error) (Code, bool) {
	if err == nil {
		return codeOK, false
	}
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return c.code, true
		}
	}
	return codeOK, false
}

// Sentinel returns the sentinel error of code, or nil for a code this
// version does not know.
func Sentinel(code Code) error {
	for _, c := range codes {
		if c.code == code {
			return c.err
		}
	}
	return nil
}

// sentinelOf is Sentinel with unknown codes mapped to ErrBadRequest, so a
// response from a newer version still reads as a rejection.
func sentinelOf(code Code) error {
	if err := Sentinel(code); err != nil {
		return err
	}
	return ErrBadRequest
}

// reject builds a rejection that wraps the sentinel of code.
func reject(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))
}

// rejection is an error carried back in a Response: it keeps the exact
// message the applier produced and unwraps to the sentinel of its code.
type rejection struct {
	code Code
	msg  string
}

func (r *rejection) Error() string { return r.msg }
func (r *rejection) Unwrap() error { return sentinelOf(r.code) }
