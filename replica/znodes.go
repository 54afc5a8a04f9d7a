package replica

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/go-zookeeper/zk"
	"github.com/vmihailenco/msgpack/v5"
)

// Znode names under the room (see doc.go for the formats).
const (
	membersDir     = "members"
	electionDir    = "election"
	checkpointsZ   = "checkpoints"
	transferZ      = "transfer"
	candidatePfx   = "c-"
	guidHexLen     = 32
	formatVersion1 = 1
)

// Role strings stored in member data.
const (
	roleStrStandby  = "standby"
	roleStrTakeover = "takeover"
	roleStrPrimary  = "primary"
)

// memberData is the data of the ephemeral /<room>/members/<id>.
type memberData struct {
	V          int    `msgpack:"v"`
	ID         string `msgpack:"id"`
	Addr       string `msgpack:"addr"`
	Role       string `msgpack:"role"`
	Epoch      uint64 `msgpack:"epoch"`
	Applied    uint64 `msgpack:"applied"`
	Checkpoint uint64 `msgpack:"ckpt"`
}

// candidateData is the data of an election candidate node.
type candidateData struct {
	V    int    `msgpack:"v"`
	ID   string `msgpack:"id"`
	Addr string `msgpack:"addr"`
}

// checkpointRecord is the data of /<room>/checkpoints: the newest checkpoint
// the primary made after rotating (it covers every sealed channel up to
// Index).
type checkpointRecord struct {
	V       int    `msgpack:"v"`
	Index   uint64 `msgpack:"index"`
	Epoch   uint64 `msgpack:"epoch"`
	ID      string `msgpack:"id"`
	Addr    string `msgpack:"addr"`
	Created int64  `msgpack:"created"` // unix ms, informational
}

// transferRecord is the data of the ephemeral /<room>/transfer written by a
// primary that hands leadership to To.
type transferRecord struct {
	V        int    `msgpack:"v"`
	From     string `msgpack:"from"`
	To       string `msgpack:"to"`
	Epoch    uint64 `msgpack:"epoch"`    // the room epoch when written (the source's)
	Deadline int64  `msgpack:"deadline"` // unix ms; binding until then
}

var errBadZnodeData = errors.New("replica: malformed znode data")

func encode(v any) []byte {
	b, err := msgpack.Marshal(v)
	if err != nil {
		// Only fixed, encodable structs are marshalled here.
		panic(fmt.Sprintf("replica: msgpack encode %T: %v", v, err))
	}
	return b
}

func decode(b []byte, v any) error {
	if err := msgpack.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %v", errBadZnodeData, err)
	}
	return nil
}

// newGUID returns 32 hex characters of randomness.
func newGUID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("replica: crypto/rand: %v", err))
	}
	return hex.EncodeToString(b[:])
}

// candidate is one parsed election child "c-<guid>-<seq>".
type candidate struct {
	Name string
	GUID string
	Seq  int64
}

// parseCandidate parses an election child name; ok is false for anything
// else (foreign nodes are ignored, never trusted).
func parseCandidate(name string) (candidate, bool) {
	if !strings.HasPrefix(name, candidatePfx) {
		return candidate{}, false
	}
	rest := name[len(candidatePfx):]
	if len(rest) < guidHexLen+2 || rest[guidHexLen] != '-' {
		return candidate{}, false
	}
	guid := rest[:guidHexLen]
	if _, err := hex.DecodeString(guid); err != nil {
		return candidate{}, false
	}
	// ZooKeeper appends a %010d of a signed 32-bit counter: parse it as an
	// integer, never compare it as text.
	seq, err := strconv.ParseInt(rest[guidHexLen+1:], 10, 64)
	if err != nil {
		return candidate{}, false
	}
	return candidate{Name: name, GUID: guid, Seq: seq}, true
}

// sortCandidates parses names and returns the candidates by ascending
// sequence (ties, impossible in one parent, broken by name).
func sortCandidates(names []string) []candidate {
	out := make([]candidate, 0, len(names))
	for _, n := range names {
		if c, ok := parseCandidate(n); ok {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Seq != out[j].Seq {
			return out[i].Seq < out[j].Seq
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// isConnErr reports whether err means "the request may not have reached
// ZooKeeper or its answer was lost": retry after checking state.
func isConnErr(err error) bool {
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer) ||
		errors.Is(err, zk.ErrSessionExpired) || errors.Is(err, zk.ErrSessionMoved)
}

// createParents creates path's missing persistent ancestors and path itself
// (idempotent, race-safe).
func ensurePersistent(conn *zk.Conn, acl []zk.ACL, path string) error {
	_, err := conn.Create(path, nil, 0, acl)
	if err == nil || errors.Is(err, zk.ErrNodeExists) {
		return nil
	}
	return err
}
