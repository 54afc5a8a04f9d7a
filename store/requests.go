package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// RequestID names one logical request (a proposal and all its retries) for
// deduplication: 16 bytes, unique per request. The zero value means "no
// id". Make one with NewRequestID (random) or RequestIDFromKey (derived
// from a client's key, e.g. an HTTP Idempotency-Key).
type RequestID [16]byte

// IsZero reports whether id is the zero ("no id") value.
func (id RequestID) IsZero() bool { return id == RequestID{} }

// String is the id in lowercase hex.
func (id RequestID) String() string { return fmt.Sprintf("%x", id[:]) }

// RequestIDFromKey derives a RequestID from a client-chosen key: the first
// 16 bytes of SHA-256("roomlog request key\x00" || key). Equal keys give
// equal ids; distinct keys collide with probability about n²/2¹²⁹.
func RequestIDFromKey(key string) RequestID {
	h := sha256.New()
	h.Write([]byte("roomlog request key\x00"))
	h.Write([]byte(key))
	var id RequestID
	copy(id[:], h.Sum(nil))
	if id.IsZero() {
		id[15] = 1
	}
	return id
}

// Request is what a request envelope carries besides the payload: the id,
// and the expiry policy the proposer decided, carried in the log so that
// every replica expires the same records at the same entry.
type Request struct {
	ID RequestID
	// Stamp is the proposer's wall clock (Unix milliseconds) when it
	// proposed. It is log time: replicas never read their own clocks.
	Stamp int64
	// TTL: a record whose Stamp is more than TTL before a later entry's
	// Stamp is expired by that entry.
	TTL time.Duration
	// Window: the entry Window log indexes after a record (or any later
	// one) expires it, so the table never holds more than Window records.
	Window uint64
}

// Limits of a request envelope's policy. An envelope outside them is not a
// request envelope (see doc.go).
const (
	MaxRequestWindow = 1 << 26
	MaxRequestTTL    = 30 * 24 * time.Hour
)

// requestMagic starts every request envelope. 0xc1 is the one byte
// msgpack never uses, so no EncodeOps entry starts with it.
var requestMagic = [4]byte{0xc1, 'r', 'q', 1}

// EncodeRequest wraps payload in a request envelope carrying req (see
// doc.go for the format). req.ID must be non-zero with a policy within the
// limits; WrapPlain is the zero-id form.
func EncodeRequest(req Request, payload []byte) ([]byte, error) {
	if req.ID.IsZero() {
		return nil, fmt.Errorf("%w: request envelope with a zero id", ErrInvalid)
	}
	if err := req.check(); err != nil {
		return nil, err
	}
	return encodeEnvelope(req, payload), nil
}

// WrapPlain returns the log form of a plain (id-less) entry: data itself,
// unless data starts like a request envelope, in which case it is wrapped in
// an envelope with the zero id, so that it reaches the Applier unchanged.
func WrapPlain(data []byte) []byte {
	if !bytes.HasPrefix(data, requestMagic[:]) {
		return data
	}
	return encodeEnvelope(Request{}, data)
}

func encodeEnvelope(req Request, payload []byte) []byte {
	out := make([]byte, 0, len(requestMagic)+16+3*binary.MaxVarintLen64+len(payload))
	out = append(out, requestMagic[:]...)
	out = append(out, req.ID[:]...)
	out = binary.AppendUvarint(out, uint64(req.Stamp))
	out = binary.AppendUvarint(out, uint64(req.TTL/time.Millisecond))
	out = binary.AppendUvarint(out, req.Window)
	return append(out, payload...)
}

func (req Request) check() error {
	switch {
	case req.Stamp < 0:
		return fmt.Errorf("%w: request stamp %d is negative", ErrInvalid, req.Stamp)
	case req.TTL < time.Millisecond || req.TTL > MaxRequestTTL:
		return fmt.Errorf("%w: request TTL %v outside [1ms, %v]", ErrInvalid, req.TTL, MaxRequestTTL)
	case req.Window < 1 || req.Window > MaxRequestWindow:
		return fmt.Errorf("%w: request window %d outside [1, %d]", ErrInvalid, req.Window, MaxRequestWindow)
	}
	return nil
}

// DecodeRequest splits a log entry's data into its envelope and payload.
// Only the canonical encoding (EncodeRequest's, minimal uvarints) is an
// envelope.
// ok is false when data is not a well-formed envelope: then it is a plain
// entry and payload is data itself. A zero-id envelope (WrapPlain) returns
// ok with a zero Request.
func DecodeRequest(data []byte) (req Request, payload []byte, ok bool) {
	if !bytes.HasPrefix(data, requestMagic[:]) || len(data) < len(requestMagic)+16 {
		return Request{}, data, false
	}
	p := data[len(requestMagic):]
	copy(req.ID[:], p[:16])
	p = p[16:]
	var v [3]uint64
	for i := range v {
		x, n := binary.Uvarint(p)
		if n <= 0 || n != len(binary.AppendUvarint(nil, x)) { // canonical form only
			return Request{}, data, false
		}
		v[i], p = x, p[n:]
	}
	if req.ID.IsZero() {
		if v != [3]uint64{} {
			return Request{}, data, false
		}
		return Request{}, p, true
	}
	if v[0] > math.MaxInt64 || v[1] > uint64(MaxRequestTTL/time.Millisecond) {
		return Request{}, data, false
	}
	req.Stamp, req.TTL, req.Window = int64(v[0]), time.Duration(v[1])*time.Millisecond, v[2]
	if req.check() != nil {
		return Request{}, data, false
	}
	return req, p, true
}

// Outcome is what applying one entry produced.
type Outcome struct {
	// Response is the Applier's response; for a Duplicate, the original
	// entry's response.
	Response []byte
	// Index is the index whose application produced Response: the entry's
	// own, or for a Duplicate the original's.
	Index uint64
	// Duplicate: the entry's request id was already applied (at Index) and
	// is still in the table; the Applier was not called for this entry.
	Duplicate bool
	// Conflict: the request id was already applied with a different
	// payload. Nothing was applied; Response is nil.
	Conflict bool
}

// RequestRecord is one entry of the request table.
type RequestRecord struct {
	Index    uint64 // the entry that applied the request
	Stamp    int64  // its envelope's stamp
	Response []byte // the Applier's response (nil when it was empty)
	// PayloadHash is the first 8 bytes of the payload's SHA-256: a retry
	// with another payload is a Conflict.
	PayloadHash [8]byte
}

// PayloadHash is what a request record keeps of its payload: the first 8
// bytes of its SHA-256.
func PayloadHash(p []byte) (h [8]byte) {
	s := sha256.Sum256(p)
	copy(h[:], s[:8])
	return h
}

// Request table keys (see doc.go).
var (
	reqIDPrefix    = []byte(internalPrefix + "req/i/") // + id → record
	reqOrderPrefix = []byte(internalPrefix + "req/o/") // + uint64be index → id, stamp
	keyReqLow      = []byte(internalPrefix + "req/low")
	reqIDEnd       = prefixEnd(reqIDPrefix)
	reqOrderEnd    = prefixEnd(reqOrderPrefix)
)

func reqIDKey(id RequestID) []byte {
	return append(bytes.Clone(reqIDPrefix), id[:]...)
}

func reqOrderKey(index uint64) []byte {
	return binary.BigEndian.AppendUint64(bytes.Clone(reqOrderPrefix), index)
}

func encodeRecord(r RequestRecord) []byte {
	out := make([]byte, 24, 24+len(r.Response))
	binary.BigEndian.PutUint64(out[0:], r.Index)
	binary.BigEndian.PutUint64(out[8:], uint64(r.Stamp))
	copy(out[16:], r.PayloadHash[:])
	return append(out, r.Response...)
}

func decodeRecord(v []byte) (RequestRecord, error) {
	if len(v) < 24 {
		return RequestRecord{}, fmt.Errorf("%w: request record of %d bytes", ErrCorrupt, len(v))
	}
	r := RequestRecord{Index: binary.BigEndian.Uint64(v), Stamp: int64(binary.BigEndian.Uint64(v[8:]))}
	copy(r.PayloadHash[:], v[16:24])
	if len(v) > 24 {
		r.Response = bytes.Clone(v[24:])
	}
	return r, nil
}

// orderRec is one order key: the table's expiry queue, oldest index first.
type orderRec struct {
	index uint64
	id    RequestID
	stamp int64
}

// reqQueue caches a prefix of the order range in memory (at most
// reqRefill records) so that expiry does not open an iterator per entry. Only Apply (applyMu held) uses it;
// an aborted Apply resets it (valid = false) since its batch is dropped.
type reqQueue struct {
	valid    bool
	q        []orderRec // oldest first: a prefix of the order keys from next's start
	complete bool       // q holds every order key
	next     uint64     // !complete: the index the next refill starts from
}

const reqRefill = 512

// reqApplier carries the request table through one Apply call.
type reqApplier struct {
	s  *Store
	pb *pebble.Batch
}

func (a *reqApplier) queue() (*reqQueue, error) {
	q := &a.s.reqQ
	if q.valid {
		return q, nil
	}
	*q = reqQueue{valid: true}
	v, closer, err := a.pb.Get(keyReqLow)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		return nil, fmt.Errorf("store: read request table low mark: %w", err)
	default:
		if len(v) != 8 {
			closer.Close()
			return nil, fmt.Errorf("%w: request table low mark of %d bytes", ErrCorrupt, len(v))
		}
		q.next = binary.BigEndian.Uint64(v)
		closer.Close()
	}
	return q, nil
}

// head returns the oldest record of the table (ok false: empty).
func (a *reqApplier) head() (orderRec, bool, error) {
	q, err := a.queue()
	if err != nil {
		return orderRec{}, false, err
	}
	if len(q.q) == 0 && !q.complete {
		if err := a.refill(q); err != nil {
			return orderRec{}, false, err
		}
	}
	if len(q.q) == 0 {
		return orderRec{}, false, nil
	}
	return q.q[0], true, nil
}

func (a *reqApplier) refill(q *reqQueue) error {
	it, err := a.pb.NewIter(&pebble.IterOptions{LowerBound: reqOrderKey(q.next), UpperBound: reqOrderEnd})
	if err != nil {
		return fmt.Errorf("store: request table: %w", err)
	}
	n := 0
	for valid := it.First(); valid && n < reqRefill; valid = it.Next() {
		k := it.Key()
		v, verr := it.ValueAndErr()
		if verr != nil || len(k) != len(reqOrderPrefix)+8 || len(v) != 24 {
			it.Close()
			return fmt.Errorf("%w: request table order key %x (%v)", ErrCorrupt, k, verr)
		}
		r := orderRec{index: binary.BigEndian.Uint64(k[len(reqOrderPrefix):]), stamp: int64(binary.BigEndian.Uint64(v[16:]))}
		copy(r.id[:], v[:16])
		q.q = append(q.q, r)
		q.next = r.index + 1
		n++
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return fmt.Errorf("store: request table: %w", err)
	}
	if n < reqRefill {
		q.complete = true
	}
	return nil
}

// expire removes, oldest first, the records that entry e (holding req)
// expires: those req.Window or more indexes before it, or more than
// req.TTL of log time older. It depends only on the table and e, so every
// replica removes the same records at the same entry.
func (a *reqApplier) expire(index uint64, req Request) error {
	var low uint64
	for {
		h, ok, err := a.head()
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		tooOld := index-h.index >= req.Window ||
			(req.Stamp > h.stamp && req.Stamp-h.stamp > req.TTL.Milliseconds())
		if !tooOld {
			break
		}
		if err := errors.Join(a.pb.Delete(reqIDKey(h.id), nil), a.pb.Delete(reqOrderKey(h.index), nil)); err != nil {
			return fmt.Errorf("store: request table: %w", err)
		}
		a.s.reqQ.q = a.s.reqQ.q[1:]
		low = h.index + 1
	}
	if low == 0 {
		return nil
	}
	// The low mark lets the next Open start its first refill past the
	// deleted order keys instead of iterating their tombstones.
	if err := a.pb.Set(keyReqLow, binary.BigEndian.AppendUint64(nil, low), nil); err != nil {
		return fmt.Errorf("store: request table: %w", err)
	}
	return nil
}

// lookup returns the live record of id in the batch (ok false: none).
func (a *reqApplier) lookup(id RequestID) (RequestRecord, bool, error) {
	v, closer, err := a.pb.Get(reqIDKey(id))
	if errors.Is(err, pebble.ErrNotFound) {
		return RequestRecord{}, false, nil
	}
	if err != nil {
		return RequestRecord{}, false, fmt.Errorf("store: request table: %w", err)
	}
	defer closer.Close()
	r, err := decodeRecord(v)
	if err != nil {
		return RequestRecord{}, false, fmt.Errorf("request %v: %w", id, err)
	}
	return r, true, nil
}

func (a *reqApplier) record(id RequestID, r RequestRecord) error {
	var ov [24]byte
	copy(ov[:16], id[:])
	binary.BigEndian.PutUint64(ov[16:], uint64(r.Stamp))
	if err := errors.Join(a.pb.Set(reqIDKey(id), encodeRecord(r), nil),
		a.pb.Set(reqOrderKey(r.Index), ov[:], nil)); err != nil {
		return fmt.Errorf("store: request table: %w", err)
	}
	q, err := a.queue()
	if err != nil {
		return err
	}
	if q.complete {
		if len(q.q) < reqRefill {
			q.q = append(q.q, orderRec{index: r.Index, id: id, stamp: r.Stamp})
		} else {
			// Keep a prefix only (bounded memory): this record and later
			// ones are read back by a refill once the prefix is used up.
			q.complete, q.next = false, r.Index
		}
	}
	return nil
}

// LookupRequest returns the request table's record of id, read from the
// live database (ok false: not in the table — never applied, or expired).
func (s *Store) LookupRequest(id RequestID) (rec RequestRecord, ok bool, err error) {
	if !s.gate.enter() {
		return RequestRecord{}, false, ErrClosed
	}
	defer s.gate.leave()
	return lookupRequest(s.db, id)
}

func lookupRequest(r reader, id RequestID) (RequestRecord, bool, error) {
	v, closer, err := r.Get(reqIDKey(id))
	if errors.Is(err, pebble.ErrNotFound) {
		return RequestRecord{}, false, nil
	}
	if err != nil {
		return RequestRecord{}, false, fmt.Errorf("store: request table: %w", err)
	}
	defer closer.Close()
	rec, err := decodeRecord(v)
	if err != nil {
		return RequestRecord{}, false, fmt.Errorf("request %v: %w", id, err)
	}
	return rec, true, nil
}

// RequestTableLen counts the records in the request table (a scan: for
// tests and tools, not hot paths).
func (s *Store) RequestTableLen() (int, error) {
	if !s.gate.enter() {
		return 0, ErrClosed
	}
	defer s.gate.leave()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: reqIDPrefix, UpperBound: reqIDEnd})
	if err != nil {
		return 0, fmt.Errorf("store: request table: %w", err)
	}
	n := 0
	for valid := it.First(); valid; valid = it.Next() {
		n++
	}
	return n, errors.Join(it.Error(), it.Close())
}

// hashRequests extends a state hash with the request table: when the table
// is not empty, an 8-byte 0xff… separator (a length no key has) followed by
// every record as length-prefixed key (without the internal prefix) and
// value, in key order. An empty table adds nothing, so stores that never saw
// a request id hash as before.
func hashRequests(r reader, w io.Writer) error {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: reqIDPrefix, UpperBound: reqIDEnd})
	if err != nil {
		return fmt.Errorf("store: request table: %w", err)
	}
	var lb [8]byte
	first := true
	for valid := it.First(); valid; valid = it.Next() {
		if first {
			binary.BigEndian.PutUint64(lb[:], math.MaxUint64)
			w.Write(lb[:])
			first = false
		}
		k := it.Key()[len(internalPrefix):]
		v, verr := it.ValueAndErr()
		if verr != nil {
			it.Close()
			return fmt.Errorf("store: request table: %w", verr)
		}
		binary.BigEndian.PutUint64(lb[:], uint64(len(k)))
		w.Write(lb[:])
		w.Write(k)
		binary.BigEndian.PutUint64(lb[:], uint64(len(v)))
		w.Write(lb[:])
		w.Write(v)
	}
	return errors.Join(it.Error(), it.Close())
}
