package replica

import (
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/roomlog/roomlog/zkx"
)

// Znode names under the room (see doc.go for the formats).
const (
	membersDir     = "members"
	electionDir    = "election"
	checkpointsZ   = "checkpoints"
	transferZ      = "transfer"
	versionZ       = "version"
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
	// CatchUp (primary only, during TransferLeadership): members publish
	// their applied index as soon as it reaches it. Omitted when 0, so
	// member data without it is byte-identical to before.
	CatchUp uint64 `msgpack:"catch_up,omitempty"`
	// Hash is the member's running state hash (store.RunHash.String) at
	// index HashAt of a chain that started at HashBase (package doc,
	// "Integrity"). Omitted by members without it.
	Hash     string `msgpack:"hash,omitempty"`
	HashAt   uint64 `msgpack:"hash_at,omitempty"`
	HashBase uint64 `msgpack:"hash_base,omitempty"`
	// HashAgree: the peers whose latest comparable hash the member found
	// equal to its own, with the index and the hash of that comparison
	// (so that a member outvoted by peers that agree among themselves, on
	// a history that is not its own, can check it).
	HashAgree map[string]hashAgreement `msgpack:"hash_agree,omitempty"`
	// RVMin..RVMax: the room versions the member's binary reads and writes
	// (capped by its Config.MaxRoomVersion). Omitted by members from
	// before room versions, which count as 1..1.
	RVMin int `msgpack:"rv_min,omitempty"`
	RVMax int `msgpack:"rv_max,omitempty"`
	// Observer: the member is an observer (Config.Observer) and never a
	// candidate; its Role stays "standby", which members that predate
	// observers read. Omitted when false, so a standby's data is
	// byte-identical to before.
	Observer bool `msgpack:"observer,omitempty"`
	// Hold: while the member bootstraps from a checkpoint at index C, and
	// then until it has applied up to where the primary was when the
	// checkpoint was installed, the first log index it still needs (C+1,
	// then its applied index + 1); HoldProgress counts what the bootstrap
	// did (bytes received, a heartbeat while it verifies local files or
	// installs, then entries applied). The primary keeps every channel from
	// Hold on while Hold or HoldProgress grows (decideHold, within
	// BootstrapHoldStall and BootstrapHoldMax).
	// Omitted when 0 (members that predate holds never hold).
	Hold         uint64 `msgpack:"hold,omitempty"`
	HoldProgress uint64 `msgpack:"hold_prog,omitempty"`
	// Identities: the ZooKeeper identities the member's session is
	// authenticated as ("digest:USER:HASH", "x509:SUBJECT"), so that an
	// operator changing the room's ACL sees who needs which entry
	// (informational: nothing is decided on it). Omitted when none.
	Identities []string `msgpack:"ids,omitempty"`
}

// roomVersions is the range of room versions the member advertises.
func (d memberData) roomVersions() (lo, hi int) {
	if d.RVMin == 0 && d.RVMax == 0 {
		return 1, 1
	}
	return d.RVMin, d.RVMax
}

// memberStatus is what Status and the views show of a member's data.
func (d memberData) memberStatus() MemberStatus {
	lo, hi := d.roomVersions()
	return MemberStatus{ID: d.ID, Addr: d.Addr, Role: parseRole(d.Role), Observer: d.Observer, Epoch: d.Epoch, Applied: d.Applied,
		Checkpoint: d.Checkpoint, Hash: d.Hash, HashAt: d.HashAt, HashBase: d.HashBase,
		RoomVersionMin: lo, RoomVersionMax: hi, Identities: d.Identities}
}

// roomVersionTarget is the data of the persistent /<room>/version: the
// room version an operator asked for (SetRoomVersionTarget).
type roomVersionTarget struct {
	V      int   `msgpack:"v"`
	Target int   `msgpack:"target"`
	Set    int64 `msgpack:"set"` // unix ms, informational
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

// znodeMaxDepth bounds the msgpack nesting of the znode data this package
// decodes: every format is a flat map, so anything deeper is foreign.
const znodeMaxDepth = 4

func encode(v any) []byte {
	b, err := msgpack.Marshal(v)
	if err != nil {
		// Only fixed, encodable structs are marshalled here.
		panic(fmt.Sprintf("replica: msgpack encode %T: %v", v, err))
	}
	return b
}

// decode unmarshals znode data (peers' or a foreign client's: input, not
// truth) with zkx.Decode: the bytes are first checked to hold exactly one
// msgpack value, nested at most znodeMaxDepth deep, whose every declared
// length fits in the input, so decoding allocates O(len(b)) and cannot
// recurse deeply.
func decode(b []byte, v any) error {
	if err := zkx.Decode(b, v, znodeMaxDepth); err != nil {
		return fmt.Errorf("%w: %v", errBadZnodeData, err)
	}
	return nil
}

// Acceptance of members/ and election/ children (see doc.go, "Znodes").
// Only what passes counts for any decision; everything else is foreign:
// ignored, and reported (Status().Foreign, one Warn log line).

// acceptMember checks a members/<name> znode: ephemeral, data that decodes
// (format version 1) naming member name (a valid id), and an advertised
// address, when set, that parses as Config.AdvertiseAddr does. The error
// says why it is foreign.
func acceptMember(name string, data []byte, ephemeralOwner int64) (memberData, error) {
	if ephemeralOwner == 0 {
		return memberData{}, errors.New("not ephemeral (a persistent znode is never a live member)")
	}
	var d memberData
	if err := decode(data, &d); err != nil {
		return memberData{}, fmt.Errorf("data does not decode: %v", err)
	}
	if d.V != formatVersion1 {
		return memberData{}, fmt.Errorf("unknown format version %d", d.V)
	}
	if d.ID == "" {
		return memberData{}, errors.New("no member id in its data")
	}
	if lo, hi := d.roomVersions(); lo < 1 || hi < lo {
		return memberData{}, fmt.Errorf("bad room versions %d..%d", d.RVMin, d.RVMax)
	}
	if d.ID != name {
		return memberData{}, fmt.Errorf("node name %q but its data names member %q", name, d.ID)
	}
	if err := checkPeerIdentity(d.ID, d.Addr); err != nil {
		return memberData{}, err
	}
	return d, nil
}

// checkPeerIdentity applies Config.Validate's rules for ID and
// AdvertiseAddr to a peer's published id and address, so that every
// address a replica redirects to or fetches from is one a Config accepts.
func checkPeerIdentity(id, addr string) error {
	if err := validateID(id); err != nil {
		return fmt.Errorf("bad member id: %v", err)
	}
	if addr != "" {
		if _, err := checkpointBaseURL(addr); err != nil {
			return fmt.Errorf("bad advertised addr: %v", err)
		}
	}
	return nil
}

// checkMemberZnode reports whether a znode under a room's members/ (its
// name, data and Stat.EphemeralOwner) counts as a live member: nil if it
// does, else an error saying why replicas ignore it as foreign. Tools use
// it to show what replicas see.
func checkMemberZnode(name string, data []byte, ephemeralOwner int64) error {
	_, err := acceptMember(name, data, ephemeralOwner)
	return err
}
