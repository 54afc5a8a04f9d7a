package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// Sentinel errors. Check them with errors.Is.
var (
	// ErrCorrupt: a checkpoint, manifest or transfer failed verification
	// (checksum, size, missing/extra file, truncated stream, bad manifest).
	ErrCorrupt = errors.New("checkpoint: corrupt")
	// ErrNoCheckpoint: there is no (valid) checkpoint where one was asked for.
	ErrNoCheckpoint = errors.New("checkpoint: no checkpoint")
	// ErrNotEmpty: Restore's destination exists and is not an empty directory.
	ErrNotEmpty = errors.New("checkpoint: destination is not empty")
)

// FormatVersion is the manifest format this package writes and reads.
const FormatVersion = 1

// Layout names (see doc.go).
const (
	ManifestName = "roomlog-checkpoint.json" // the manifest, at the top of a checkpoint directory
	DBDir        = "db"                      // the Pebble files, flat
	dirPrefix    = "ckpt-"                   // + %020d index
	tmpPrefix    = ".tmp-"                   // temp dirs under root (create, fetch)
)

// Limits on what a manifest may describe, so that parsing foreign input
// allocates a bounded amount.
const (
	maxManifestBytes = 64 << 20
	maxFiles         = 1 << 20
	maxFileNameLen   = 96 // "db/"+name must fit a USTAR header name (100 bytes)
	maxFileSize      = 1 << 42
	maxRoomLen       = 1024
)

// File is one Pebble file of a checkpoint, relative to its db directory.
type File struct {
	Name   string
	Size   int64
	CRC32C uint32
}

// Manifest describes a checkpoint. Checksum is the hex SHA-256 of the
// manifest's canonical form (compact JSON of the struct with Checksum
// empty), so that any edit of the manifest is detected.
type Manifest struct {
	FormatVersion int
	Room          string
	Epoch         uint64
	Index         uint64
	Created       time.Time
	Files         []File
	Checksum      string
}

// Bytes returns the total size of the manifest's files.
func (m *Manifest) Bytes() int64 {
	var n int64
	for _, f := range m.Files {
		n += f.Size
	}
	return n
}

// canonicalChecksum computes the manifest's self checksum.
func (m Manifest) canonicalChecksum() (string, error) {
	m.Checksum = ""
	b, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// Marshal validates m, sets its Checksum and returns the JSON form
// (indented) that is stored in ManifestName.
func (m *Manifest) Marshal() ([]byte, error) {
	m.Checksum = ""
	if m.Files == nil {
		m.Files = []File{}
	}
	if err := m.validate(); err != nil {
		return nil, err
	}
	sum, err := m.canonicalChecksum()
	if err != nil {
		return nil, fmt.Errorf("checkpoint: marshal manifest: %w", err)
	}
	m.Checksum = sum
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("checkpoint: marshal manifest: %w", err)
	}
	return append(b, '\n'), nil
}

// ParseManifest parses and validates a manifest: strict JSON (no unknown
// fields, nothing after it), known format version, valid file names and
// sizes, and a matching self checksum. Every failure wraps ErrCorrupt. It
// never panics.
func ParseManifest(b []byte) (Manifest, error) {
	var m Manifest
	if len(b) > maxManifestBytes {
		return m, fmt.Errorf("%w: manifest is %d bytes, limit %d", ErrCorrupt, len(b), maxManifestBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return Manifest{}, fmt.Errorf("%w: manifest: %w", ErrCorrupt, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Manifest{}, fmt.Errorf("%w: manifest: data after the JSON object", ErrCorrupt)
	}
	if err := m.validate(); err != nil {
		return Manifest{}, err
	}
	sum, err := m.canonicalChecksum()
	if err != nil {
		return Manifest{}, fmt.Errorf("%w: manifest: %w", ErrCorrupt, err)
	}
	if sum != m.Checksum {
		return Manifest{}, fmt.Errorf("%w: manifest checksum %q does not match its content (%s)", ErrCorrupt, m.Checksum, sum)
	}
	return m, nil
}

// validate checks everything but the checksum.
func (m *Manifest) validate() error {
	var errs []error
	if m.FormatVersion != FormatVersion {
		errs = append(errs, fmt.Errorf("unknown format version %d (want %d)", m.FormatVersion, FormatVersion))
	}
	if len(m.Room) > maxRoomLen || !utf8.ValidString(m.Room) {
		errs = append(errs, fmt.Errorf("bad room name (%d bytes)", len(m.Room)))
	}
	if m.Files == nil {
		errs = append(errs, errors.New("no file list"))
	}
	if len(m.Files) > maxFiles {
		errs = append(errs, fmt.Errorf("%d files, limit %d", len(m.Files), maxFiles))
	}
	seen := make(map[string]bool, len(m.Files))
	for i, f := range m.Files {
		if err := validFileName(f.Name); err != nil {
			errs = append(errs, fmt.Errorf("file %d: %w", i, err))
		} else if seen[f.Name] {
			errs = append(errs, fmt.Errorf("file %d: %q listed twice", i, f.Name))
		}
		seen[f.Name] = true
		if f.Size < 0 || f.Size > maxFileSize {
			errs = append(errs, fmt.Errorf("file %d (%q): bad size %d", i, f.Name, f.Size))
		}
		if len(errs) > 20 {
			break
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: manifest: %w", ErrCorrupt, errors.Join(errs...))
}

// validFileName accepts a plain file name: no path separators, no "." or
// "..", no control characters, not hidden, at most maxFileNameLen bytes.
func validFileName(name string) error {
	switch {
	case name == "":
		return errors.New("empty file name")
	case len(name) > maxFileNameLen:
		return fmt.Errorf("file name of %d bytes, limit %d", len(name), maxFileNameLen)
	case strings.ContainsAny(name, `/\`):
		return fmt.Errorf("file name %q contains a path separator", name)
	case name[0] == '.':
		return fmt.Errorf("file name %q starts with a dot", name)
	case !utf8.ValidString(name):
		return fmt.Errorf("file name %q is not UTF-8", name)
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("file name %q contains a control character", name)
		}
	}
	return nil
}

// dirName is the name of the checkpoint directory for index.
func dirName(index uint64) string { return fmt.Sprintf("%s%020d", dirPrefix, index) }

// parseDirName returns the index a checkpoint directory name stands for.
func parseDirName(name string) (uint64, bool) {
	if len(name) != len(dirPrefix)+20 || !strings.HasPrefix(name, dirPrefix) {
		return 0, false
	}
	var idx uint64
	for _, c := range name[len(dirPrefix):] {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if idx > (1<<64-1-d)/10 {
			return 0, false
		}
		idx = idx*10 + d
	}
	return idx, true
}
