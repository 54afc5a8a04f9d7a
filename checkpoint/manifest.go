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
	// ErrForeign: the checkpoint belongs to another room or another
	// incarnation of the room (Origin differs), or records no origin at all
	// (a format-1 manifest). It is valid as such, but not for this room.
	ErrForeign = errors.New("checkpoint: checkpoint of another room or room incarnation")
	// ErrUnsupportedVersion: a manifest of a format version newer than
	// this binary reads (a newer roomlog made the checkpoint). It is not
	// corruption: the checkpoint is kept, and a bootstrap looks for
	// another source.
	ErrUnsupportedVersion = errors.New("checkpoint: unsupported manifest format version")
	// ErrTooLarge: a fetched checkpoint declares more bytes than
	// FetchOptions.MaxBytes allows; nothing of it was written.
	ErrTooLarge = errors.New("checkpoint: checkpoint larger than the fetch limit")
	// ErrTimeout: a fetch gave up on a peer that did not connect, did not
	// answer or stopped sending within FetchOptions' timeouts.
	ErrTimeout = errors.New("checkpoint: fetch timed out")
	// ErrUnauthorized: the serving peer refused the fetch (401/403): the
	// bearer token (FetchOptions.BearerToken) is missing or wrong.
	ErrUnauthorized = errors.New("checkpoint: unauthorized")
)

// FormatVersion is the manifest format this package writes. It reads
// FormatVersion and legacyFormatVersion (see doc.go: a format-1 manifest
// records no origin and is refused by Restore, Check and Fetch with an
// Origin).
const FormatVersion = 2

// legacyFormatVersion: manifests written before origins existed.
const legacyFormatVersion = 1

// Layout names (see doc.go).
const (
	ManifestName  = "roomlog-checkpoint.json" // the manifest, at the top of a checkpoint directory
	DBDir         = "db"                      // the Pebble files, flat
	dirPrefix     = "ckpt-"                   // + %020d index
	tmpPrefix     = ".tmp-"                   // temp dirs under root (create, fetch, probe, remove)
	corruptPrefix = ".corrupt-"               // invalid or foreign checkpoints moved aside
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
	// RoomCzxid is the zxid that created the room znode (format 2; absent
	// and 0 in format 1): it tells a room deleted and re-created under the
	// same name, or a same-named room of another ZooKeeper, apart.
	RoomCzxid int64 `json:",omitempty"`
	Epoch     uint64
	Index     uint64
	Created   time.Time
	Files     []File
	Checksum  string
}

// Origin identifies the room incarnation a checkpoint belongs to: the
// room's name and the zxid that created its znode (Stat.Czxid).
type Origin struct {
	Room      string
	RoomCzxid int64
}

func (o Origin) String() string {
	return fmt.Sprintf("room %q created at zxid 0x%x", o.Room, o.RoomCzxid)
}

// Origin returns the origin the manifest records (RoomCzxid 0 for a
// format-1 manifest).
func (m *Manifest) Origin() Origin { return Origin{Room: m.Room, RoomCzxid: m.RoomCzxid} }

// CheckOrigin returns nil if the manifest records exactly want, else an
// error wrapping ErrForeign that names both origins. A format-1 manifest
// (no origin recorded) never matches.
func (m *Manifest) CheckOrigin(want Origin) error {
	if want.RoomCzxid == 0 {
		return fmt.Errorf("checkpoint: no origin to check the checkpoint against (want %v)", want)
	}
	if m.RoomCzxid == 0 {
		return fmt.Errorf("%w: the checkpoint of room %q at index %d has a format %d manifest, which records no room incarnation; want %v",
			ErrForeign, m.Room, m.Index, m.FormatVersion, want)
	}
	if m.Origin() != want {
		return fmt.Errorf("%w: the checkpoint at index %d is of %v; want %v", ErrForeign, m.Index, m.Origin(), want)
	}
	return nil
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
	// The format version first, leniently: a newer format may add fields
	// that the strict decode below would call corrupt.
	var head struct{ FormatVersion int }
	if err := json.Unmarshal(b, &head); err == nil && head.FormatVersion > FormatVersion {
		return Manifest{}, fmt.Errorf("%w: manifest format version %d; this binary reads %d and %d",
			ErrUnsupportedVersion, head.FormatVersion, legacyFormatVersion, FormatVersion)
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
	switch {
	case m.FormatVersion == FormatVersion && m.RoomCzxid <= 0:
		errs = append(errs, fmt.Errorf("format %d needs a positive RoomCzxid, not %d", m.FormatVersion, m.RoomCzxid))
	case m.FormatVersion == legacyFormatVersion && m.RoomCzxid != 0:
		errs = append(errs, fmt.Errorf("format %d has no RoomCzxid (got %d)", m.FormatVersion, m.RoomCzxid))
	case m.FormatVersion != FormatVersion && m.FormatVersion != legacyFormatVersion:
		errs = append(errs, fmt.Errorf("unknown format version %d (want %d or %d)", m.FormatVersion, legacyFormatVersion, FormatVersion))
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
