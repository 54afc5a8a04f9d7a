package logroom

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/roomlog/roomlog/version"
	"github.com/roomlog/roomlog/zkx"
)

// DefaultBase is the parent znode of all rooms unless RoomOptions.Base says
// otherwise.
const DefaultBase = "/roomlog"

// MaxNameBytes bounds a room name.
const MaxNameBytes = 200

const (
	roomFormatVersion    = 1
	roomFormatVersion2   = 2
	channelFormatVersion = 1
	epochFormatVersion   = 1

	epochNode    = "epoch"
	channelsNode = "channels"
	// lostNode: the child of a room's epoch znode that marks the room
	// lost (MarkLost). Under the epoch znode, whose name is reserved and
	// whose other children are writer tokens (w-…), it cannot be a room
	// of a nested base, and it goes with the incarnation.
	lostNode = "lost"
)

// reservedNames may not be used as room names: "zookeeper" is reserved by
// ZooKeeper itself, the others are the children of a room, reserved so that
// a room can never be confused with a room's subtree when base paths nest.
var reservedNames = []string{"zookeeper", epochNode, channelsNode, "members", "election", "checkpoints", "transfer", "version", "reseed", "operator"}

// ValidateName checks a room name: non-empty, at most MaxNameBytes bytes,
// valid UTF-8, no '/', not "." or "..", not reserved, and no control or
// other characters ZooKeeper refuses in paths. The error wraps ErrBadName
// and says what is wrong. It is the one room-name check: OpenRoom, package
// replica (Config.Validate) and the commands all call it.
func ValidateName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty room name", ErrBadName)
	}
	if why := nameProblem(name, false); why != "" {
		return fmt.Errorf("%w: room name %q: %s", ErrBadName, name, why)
	}
	return nil
}

// ValidateBase checks a base path (RoomOptions.Base, the parent znode of
// rooms): absolute, at least one component, no trailing '/', and every
// component a valid room name (ValidateName) with one exception: below the
// first component, the names of a room's children (epoch, channels,
// members, election, checkpoints) are allowed; "zookeeper" never is. The
// error wraps ErrBadName and names the base and, where one is at fault,
// the component and what is wrong with it. It is the one base-path check:
// OpenRoom, package replica (Config.Validate) and the commands all call it.
func ValidateBase(base string) error {
	if !strings.HasPrefix(base, "/") || base == "/" || strings.HasSuffix(base, "/") {
		return fmt.Errorf("%w: base path %q must be absolute with at least one component and no trailing '/'", ErrBadName, base)
	}
	for i, p := range strings.Split(base[1:], "/") {
		if why := nameProblem(p, i > 0); why != "" {
			return fmt.Errorf("%w: base path %q: component %q: %s", ErrBadName, base, p, why)
		}
	}
	return nil
}

// nameProblem says what is wrong with name as a room name or a base path
// component, or "" when nothing is. childOK accepts the names of a room's
// children (every reserved name but "zookeeper").
func nameProblem(name string, childOK bool) string {
	switch {
	case name == "":
		return "empty"
	case len(name) > MaxNameBytes:
		return fmt.Sprintf("%d bytes, at most %d", len(name), MaxNameBytes)
	case !utf8.ValidString(name):
		return "not valid UTF-8"
	case strings.ContainsRune(name, '/'):
		return "contains '/'"
	case name == "." || name == "..":
		return "is a relative path element"
	case slices.Contains(reservedNames, name) && !(childOK && name != reservedNames[0]):
		return "reserved"
	}
	for _, r := range name {
		// The ranges ZooKeeper's PathUtils rejects, plus unicode controls.
		if unicode.IsControl(r) || (r >= 0xd800 && r <= 0xf8ff) || (r >= 0xfff0 && r <= 0xffff) {
			return fmt.Sprintf("contains character %U", r)
		}
	}
	return ""
}

// roomMeta is the data of the room znode. Record version 1 is a room at
// room version 1; record version 2 carries the room version and refuses
// binaries from before room versions (v0.1.0 refuses any record version
// but 1 when it opens the room). Record version 2 at room version 1 is a
// downgrade in progress: the room is at 1, but channels written under a
// higher version may remain, so v0.1.0 must still be kept out; the
// primary writes record version 1 once they are gone.
type roomMeta struct {
	Version int   `msgpack:"v"`
	Created int64 `msgpack:"created"` // unix milliseconds
	// Room is the room version (record version 2 only; 1 when omitted).
	Room int `msgpack:"room,omitempty"`
	// Since is the first index written under Room (0: since the room
	// began); Epoch the epoch of the writer that set it. Omitted until the
	// room version first changes.
	Since uint64 `msgpack:"since,omitempty"`
	Epoch uint64 `msgpack:"epoch,omitempty"`
	// Fence is the name of the room's epoch znode when it is not "epoch":
	// a re-seeded room (SeedRoom) names it "epoch-" and 16 random hex
	// digits, so a writer of an earlier incarnation, whose fence is a
	// version check on the old name, gets NoNode instead of meeting a
	// znode version the new incarnation reached again (versions restart at
	// 0 when a znode is created anew). Omitted for "epoch", so a room
	// created by OpenRoom is byte-identical to v0.1.0's.
	Fence string `msgpack:"fence,omitempty"`
}

// fenceName is the name of the room's epoch znode.
func (m roomMeta) fenceName() string {
	if m.Fence == "" {
		return epochNode
	}
	return m.Fence
}

// fencePrefix starts the name of a re-seeded room's epoch znode.
const fencePrefix = epochNode + "-"

// validFence reports whether name may be a room meta's Fence: "epoch-"
// and 16 lowercase hex digits.
func validFence(name string) bool {
	hex, ok := strings.CutPrefix(name, fencePrefix)
	if !ok || len(hex) != 16 {
		return false
	}
	for _, r := range hex {
		if !('0' <= r && r <= '9' || 'a' <= r && r <= 'f') {
			return false
		}
	}
	return true
}

// ValidEpochZnode reports whether name may be a room's epoch znode name
// (RoomInfo.EpochZnode): EpochZnode, or "epoch-" and 16 lowercase hex
// digits (a re-seeded room's).
func ValidEpochZnode(name string) bool { return name == epochNode || validFence(name) }

// newFenceName returns a fresh epoch znode name for a new incarnation.
func newFenceName() string { return fmt.Sprintf("%s%016x", fencePrefix, rand.Uint64()) }

// roomVersion is the room version the meta records.
func (m roomMeta) roomVersion() int {
	if m.Version == roomFormatVersion {
		return 1
	}
	return m.Room
}

// roomMetaFor returns the meta recording room version v from index since,
// set by a writer of epoch, keeping created and the fence name (fence: ""
// or "epoch" for the epoch znode "epoch"). record2 keeps record version 2
// at room version 1 (a downgrade whose earlier channels remain).
func roomMetaFor(created int64, v int, since, epoch uint64, record2 bool, fence string) roomMeta {
	if fence == epochNode {
		fence = ""
	}
	m := roomMeta{Version: roomFormatVersion, Created: created, Since: since, Epoch: epoch, Fence: fence}
	if v > 1 || record2 {
		m.Version, m.Room = roomFormatVersion2, v
	}
	return m
}

// epochMeta is the data of the epoch znode. Its znode version is the fence.
type epochMeta struct {
	Version int    `msgpack:"v"`
	Epoch   uint64 `msgpack:"epoch"`
	Owner   string `msgpack:"owner"`
	// Nonce identifies the writer that set it, so a writer can recognise its
	// own CAS after a connection loss.
	Nonce uint64 `msgpack:"nonce"`
}

// channelMeta is the data of a channel znode.
type channelMeta struct {
	Version int    `msgpack:"v"`
	First   uint64 `msgpack:"first"` // index of the channel's first entry
	Epoch   uint64 `msgpack:"epoch"` // epoch of the writer that opened (or reused) it
	Sealed  bool   `msgpack:"sealed"`
	Last    uint64 `msgpack:"last"`    // last index when sealed (First-1 if empty)
	Bytes   int64  `msgpack:"bytes"`   // batch znode data bytes when sealed
	Batches int    `msgpack:"batches"` // batch znodes in the chain when sealed
	// Deleting is set (on a sealed channel) before DeleteChannel removes its
	// batches, so a reader that finds a batch missing can tell compaction
	// from corruption.
	Deleting bool `msgpack:"deleting,omitempty"`
	// Room is the room version the channel was opened under (2 or more;
	// omitted for 1, so a channel of room version 1 is byte-identical to
	// v0.1.0's). It names the formats its batches may use.
	Room int `msgpack:"room,omitempty"`
}

// roomVersion is the room version the channel was opened under.
func (m channelMeta) roomVersion() int {
	if m.Room == 0 {
		return 1
	}
	return m.Room
}

// roomField is what a channel opened at room version v records.
func roomField(v int) int {
	if v <= 1 {
		return 0
	}
	return v
}

func encodeMeta(v any) []byte {
	b, err := msgpack.Marshal(v)
	if err != nil {
		// The meta structs hold only integers, booleans and strings.
		panic(fmt.Sprintf("logroom: encode meta %T: %v", v, err))
	}
	return b
}

func decodeChannelMeta(data []byte) (channelMeta, error) {
	var m channelMeta
	if err := checkMsgpack(data, metaMaxDepth); err != nil {
		return m, fmt.Errorf("%w: channel meta: %v", ErrCorrupt, err)
	}
	if err := msgpack.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("%w: channel meta: %v", ErrCorrupt, err)
	}
	if m.Version > channelFormatVersion {
		return m, fmt.Errorf("%w: channel meta record version %d; this binary (%s) reads %d",
			ErrUnsupportedVersion, m.Version, version.Release, channelFormatVersion)
	}
	if m.Version != channelFormatVersion {
		return m, fmt.Errorf("%w: channel meta: unknown format version %d", ErrCorrupt, m.Version)
	}
	if m.Room > version.RoomMax {
		return m, fmt.Errorf("%w: channel opened at room version %d; this binary (%s) reads room versions %d..%d",
			ErrUnsupportedVersion, m.Room, version.Release, version.RoomMin, version.RoomMax)
	}
	if m.Room == 1 {
		return m, fmt.Errorf("%w: channel meta: room version 1 written out (it is omitted)", ErrCorrupt)
	}
	if m.First == 0 || (m.Sealed && m.Last+1 < m.First) {
		return m, fmt.Errorf("%w: channel meta: first %d last %d sealed %v", ErrCorrupt, m.First, m.Last, m.Sealed)
	}
	return m, nil
}

func decodeEpochMeta(data []byte) (epochMeta, error) {
	var m epochMeta
	if err := checkMsgpack(data, metaMaxDepth); err != nil {
		return m, fmt.Errorf("%w: epoch znode: %v", ErrCorrupt, err)
	}
	if err := msgpack.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("%w: epoch znode: %v", ErrCorrupt, err)
	}
	if m.Version > epochFormatVersion {
		return m, fmt.Errorf("%w: epoch znode record version %d; this binary (%s) reads %d",
			ErrUnsupportedVersion, m.Version, version.Release, epochFormatVersion)
	}
	if m.Version != epochFormatVersion {
		return m, fmt.Errorf("%w: epoch znode: unknown format version %d", ErrCorrupt, m.Version)
	}
	return m, nil
}

func decodeRoomMeta(data []byte) (roomMeta, error) {
	var m roomMeta
	if text, ok := tombstoneText(data); ok {
		return m, fmt.Errorf("%w: %s", ErrRoomLost, text)
	}
	if err := checkMsgpack(data, metaMaxDepth); err != nil {
		return m, fmt.Errorf("%w: room meta: %v", ErrCorrupt, err)
	}
	if err := msgpack.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("%w: room meta: %v", ErrCorrupt, err)
	}
	if m.Fence != "" && !validFence(m.Fence) {
		return m, fmt.Errorf("%w: room meta: epoch znode name %q is not %q and 16 hex digits", ErrCorrupt, m.Fence, fencePrefix)
	}
	switch {
	case m.Version == roomFormatVersion:
		if m.Room != 0 {
			return m, fmt.Errorf("%w: room meta: record version 1 with room version %d", ErrCorrupt, m.Room)
		}
	case m.Version == roomFormatVersion2:
		if m.Room < 1 {
			return m, fmt.Errorf("%w: room meta: record version 2 with room version %d", ErrCorrupt, m.Room)
		}
		if m.Room > version.RoomMax {
			return m, fmt.Errorf("%w: the room is at room version %d; this binary (%s) reads room versions %d..%d",
				ErrUnsupportedVersion, m.Room, version.Release, version.RoomMin, version.RoomMax)
		}
	case m.Version > roomFormatVersion2:
		return m, fmt.Errorf("%w: room meta record version %d is newer than this binary (%s, room versions %d..%d) reads",
			ErrUnsupportedVersion, m.Version, version.Release, version.RoomMin, version.RoomMax)
	default:
		return m, fmt.Errorf("%w: room meta: unknown format version %d", ErrCorrupt, m.Version)
	}
	return m, nil
}

func (m channelMeta) info(num uint64) ChannelInfo {
	ci := ChannelInfo{Num: num, FirstIndex: m.First, LastIndex: m.First - 1, Epoch: m.Epoch, Sealed: m.Sealed,
		RoomVersion: m.roomVersion()}
	if m.Sealed {
		ci.LastIndex, ci.Bytes, ci.Batches = m.Last, m.Bytes, m.Batches
	}
	return ci
}

// RoomOptions configures OpenRoom.
type RoomOptions struct {
	Base   string       // parent znode of rooms, default DefaultBase
	Logger *slog.Logger // nil: discard
	// MaxRoomVersion caps the room versions readers of this Room read (0:
	// the binary's version.RoomMax): a channel opened above it is refused
	// with ErrUnsupportedVersion.
	MaxRoomVersion int
	// Metrics receives the room's metrics (channel counts and bytes,
	// deletions), its Readers' (Tail), and its Writers' unless
	// WriterConfig.Metrics says otherwise. nil: none. See NewMetrics.
	Metrics *Metrics
	// NoCreate: OpenRoom does not create a missing room (it answers
	// ErrNoRoom) and writes nothing. A member holding state uses it: a
	// room that vanished must be reported, not created anew under it.
	NoCreate bool
	// Inspect: OpenRoom opens a room marked lost (MarkLost) instead of
	// refusing it with ErrRoomLost, to read what it holds (re-seed,
	// verify). Its writers are refused all the same.
	Inspect bool
}

// Room is one replicated log: a znode subtree under base. It is safe for
// concurrent use; it holds no state but paths, metrics, a deletion
// counter, measured sizes and what its Readers verified (readPrefix: a
// hint for a takeover's scan, checked against the channel znode's czxid
// and children, never trusted across incarnations).
type Room struct {
	c              *Client
	name           string
	root           string
	log            *slog.Logger
	metrics        *Metrics
	maxRoomVersion int // RoomOptions.MaxRoomVersion
	// fence is the epoch znode's name, read from the room meta when the
	// room was opened ("epoch", or "epoch-<hex>" in a re-seeded room). A
	// Room outliving its incarnation keeps the old name, so its writers'
	// fence checks and epoch reads find no znode.
	fence string
	// deletions counts DeleteChannel calls through this Room, so a Writer on
	// it refreshes its byte accounting promptly after space was freed.
	deletions atomic.Uint64
	// sizes: the open channels' batch sizes UsageOf has measured.
	sizes openSizes
	// read: the longest verified prefix of a channel that a Reader of this
	// Room delivered (readPrefix); a Writer taking over does not read it
	// again when it seals that channel (scanChain).
	read readPrefixes
}

// OpenRoom opens the room name under opts.Base, creating it when absent. The
// room znode, its epoch znode and its channels znode are created in one
// Multi, so concurrent openers agree and a room is never half-created. A
// room whose znodes carry another ACL than the client's is refused with
// ErrForeignACL (see Client.ACL).
func OpenRoom(ctx context.Context, c *Client, name string, opts RoomOptions) (*Room, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	if opts.Base == "" {
		opts.Base = DefaultBase
	}
	if err := ValidateBase(opts.Base); err != nil {
		return nil, err
	}
	r := &Room{c: c, name: name, root: opts.Base + "/" + name, metrics: opts.Metrics, maxRoomVersion: opts.MaxRoomVersion}
	r.log = discardLogger(opts.Logger).With("room", name)
	if opts.NoCreate {
		// nothing is created, the base included
	} else if err := zkx.EnsurePath(ctx, c, opts.Base); err != nil {
		return nil, zkError("logroom: base "+opts.Base, err)
	}
	meta := encodeMeta(roomMeta{Version: roomFormatVersion, Created: time.Now().UnixMilli()})
	epoch := encodeMeta(epochMeta{Version: epochFormatVersion})
	err := c.Retry(ctx, func() error {
		if opts.NoCreate {
			return zk.ErrNodeExists // not created: whether it exists is read below
		}
		_, e := multiErr(c.Conn().Multi(
			&zk.CreateRequest{Path: r.root, Data: meta, Acl: c.ACL()},
			&zk.CreateRequest{Path: r.Path(epochNode), Data: epoch, Acl: c.ACL()},
			&zk.CreateRequest{Path: r.Path(channelsNode), Acl: c.ACL()},
		))
		return e
	})
	switch {
	case err == nil:
		r.log.Info("room created", "path", r.root)
	case errors.Is(err, zk.ErrNodeExists):
	default:
		return nil, zkError("logroom: create room "+r.root, err)
	}
	data, _, err := zkx.Get(ctx, c, r.root)
	if opts.NoCreate && errors.Is(err, zk.ErrNoNode) {
		return nil, fmt.Errorf("%w: room %q (znode %s) does not exist", ErrNoRoom, name, r.root)
	}
	if err != nil {
		return nil, zkError("logroom: open room "+r.root, err)
	}
	m, err := decodeRoomMeta(data)
	if err != nil {
		if errors.Is(err, ErrRoomLost) {
			return nil, fmt.Errorf("%w (room %q, znode %s)", err, name, r.root)
		}
		if errors.Is(err, ErrUnsupportedVersion) {
			return nil, fmt.Errorf("%w: room %q (znode %s)", err, name, r.root)
		}
		return nil, fmt.Errorf("%w: room %q: znode %s is not a room", err, name, r.root)
	}
	r.fence = m.fenceName()
	if !opts.Inspect {
		if err := r.checkLost(ctx); err != nil {
			return nil, err
		}
	}
	if err := r.checkACL(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// checkLost refuses, with ErrRoomLost and the marker's text, a room
// marked lost (MarkLost). It syncs first: a session that expired resets
// go-zookeeper's last zxid, and a follower behind the mark must not make
// it look absent.
func (r *Room) checkLost(ctx context.Context) error {
	if err := r.syncEpoch(ctx); err != nil {
		return err
	}
	return r.refuseLost(ctx)
}

// syncEpoch syncs the client's server with the leader at the epoch znode
// (checkLost's sync; a room deleted meanwhile is found by what follows).
func (r *Room) syncEpoch(ctx context.Context) error {
	if err := zkx.Sync(ctx, r.c, r.epochPath()); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return zkError("logroom: sync "+r.epochPath(), err)
	}
	return nil
}

// refuseLost is checkLost after its sync.
func (r *Room) refuseLost(ctx context.Context) error {
	text, lost, err := readLost(ctx, r.c, r.epochPath())
	if err != nil {
		return err
	}
	if lost {
		return fmt.Errorf("%w: room %q (znode %s) is marked lost: %s", ErrRoomLost, r.name, r.epochPath()+"/"+lostNode, text)
	}
	return nil
}

// readLost reads the lost marker under the epoch znode epochPath.
func readLost(ctx context.Context, c *Client, epochPath string) (string, bool, error) {
	p := epochPath + "/" + lostNode
	data, _, err := zkx.Get(ctx, c, p)
	switch {
	case errors.Is(err, zk.ErrNoNode):
		return "", false, nil
	case err != nil:
		return "", false, zkError("logroom: read "+p, err)
	}
	if len(data) > MaxTombstoneBytes+len(tombstoneMagic) {
		data = data[:MaxTombstoneBytes+len(tombstoneMagic)]
	}
	if text, ok := tombstoneText(data); ok {
		return text, true, nil
	}
	return fmt.Sprintf("(the marker's data is not a roomlog marker: %q)", clip(string(data), 200)), true, nil
}

// clip returns s cut to at most n bytes.
func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// checkCap refuses a channel opened at a room version above
// RoomOptions.MaxRoomVersion (a member capped below its binary's range
// must not read what it does not advertise).
func (r *Room) checkCap(num uint64, m channelMeta) error {
	if r.maxRoomVersion == 0 || m.roomVersion() <= r.maxRoomVersion {
		return nil
	}
	return fmt.Errorf("%w: room %q channel %d (%s) was opened at room version %d; this member is capped at %d (RoomOptions.MaxRoomVersion)",
		ErrUnsupportedVersion, r.name, num, r.channelPath(num), m.roomVersion(), r.maxRoomVersion)
}

// RoomVersion is what the room meta records of the room's version
// (package doc, "Room version").
type RoomVersion struct {
	Version int    // the room version (1 for a room meta of record version 1)
	Since   uint64 // first index written under it (0: since the room began)
	Epoch   uint64 // epoch of the writer that set it (0: never changed)
	// Lowering: the room is at Version 1 but its meta is still record
	// version 2 (which v0.1.0 refuses) because channels written under a
	// higher version may remain; Writer.RotateToVersion(1) ends it once
	// they are gone.
	Lowering bool
}

// RoomVersion reads the room's version from its meta (synced first, so a
// member that just saw a rotation reads at least what it recorded).
func (r *Room) RoomVersion(ctx context.Context) (RoomVersion, error) {
	m, _, err := r.readRoomMeta(ctx)
	if err != nil {
		return RoomVersion{}, err
	}
	return m.info(), nil
}

func (m roomMeta) info() RoomVersion {
	return RoomVersion{Version: m.roomVersion(), Since: m.Since, Epoch: m.Epoch,
		Lowering: m.Version == roomFormatVersion2 && m.Room == 1}
}

// readRoomMeta reads and decodes the room meta with its znode version.
func (r *Room) readRoomMeta(ctx context.Context) (roomMeta, int32, error) {
	if err := zkx.Sync(ctx, r.c, r.root); err != nil {
		return roomMeta{}, 0, zkError("logroom: sync "+r.root, err)
	}
	data, st, err := zkx.Get(ctx, r.c, r.root)
	if err != nil {
		return roomMeta{}, 0, zkError("logroom: read room "+r.root, err)
	}
	m, err := decodeRoomMeta(data)
	if err != nil {
		return roomMeta{}, 0, corruptZnode(r.name, 0, r.root, err)
	}
	return m, st.Version, nil
}

// checkACL refuses a room whose own znodes (room, epoch, channels) carry
// another ACL than the client creates with: a room created without
// credentials is world-writable, and a digest client must not adopt it
// silently (anyone could set its epoch and fence the writer).
func (r *Room) checkACL(ctx context.Context) error {
	want := slices.Clone(r.c.ACL())
	slices.SortFunc(want, compareACL)
	for _, p := range []string{r.root, r.epochPath(), r.Path(channelsNode)} {
		var acl []zk.ACL
		err := r.c.Retry(ctx, func() error {
			var e error
			acl, _, e = r.c.Conn().GetACL(p)
			return e
		})
		if err != nil {
			return zkError("logroom: read ACL of "+p, err)
		}
		acl = slices.Clone(acl)
		slices.SortFunc(acl, compareACL)
		if err := zkx.CheckACL(acl, want, r.c.Self()); err != nil { // a configuration in rotation: zkx/aclcheck.go
			return fmt.Errorf("%w: room %q: znode %s has ACL %v, the client creates with %v: %w",
				ErrForeignACL, r.name, p, acl, want, err)
		}
	}
	return nil
}

func compareACL(a, b zk.ACL) int {
	if c := strings.Compare(a.Scheme, b.Scheme); c != 0 {
		return c
	}
	if c := strings.Compare(a.ID, b.ID); c != 0 {
		return c
	}
	return int(a.Perms) - int(b.Perms)
}

// Name returns the room name.
func (r *Room) Name() string { return r.name }

// Path joins sub to the room's znode path: r.Path("members").
func (r *Room) Path(sub ...string) string {
	if len(sub) == 0 {
		return r.root
	}
	return r.root + "/" + strings.Join(sub, "/")
}

// Client returns the room's client.
func (r *Room) Client() *Client { return r.c }

func (r *Room) channelPath(num uint64) string { return r.Path(channelsNode, channelName(num)) }

// EpochZnode is the name of the room's epoch znode, read from the room
// meta when the room was opened (RoomInfo.EpochZnode): with the room
// znode's czxid, the incarnation's identity, which no other incarnation
// can reproduce (czxids restart from zero in a wiped ensemble; a re-seed
// draws a fresh name).
func (r *Room) EpochZnode() string { return r.fence }

// epochPath is the path of the room's epoch znode (the fence).
func (r *Room) epochPath() string { return r.Path(r.fence) }
func (r *Room) batchPath(num, first uint64) string {
	return r.Path(channelsNode, channelName(num), batchName(first))
}

// corrupt builds an ErrCorrupt naming room, channel and znode.
func (r *Room) corrupt(num uint64, path string, err error) error {
	if errors.Is(err, ErrUnsupportedVersion) {
		return unsupportedZnode(r.name, num, path, err)
	}
	msg := strings.TrimPrefix(err.Error(), ErrCorrupt.Error()+": ")
	return fmt.Errorf("%w: room %q channel %d znode %s: %s", ErrCorrupt, r.name, num, path, msg)
}

// Epoch returns the current epoch (0 before the first writer).
func (r *Room) Epoch(ctx context.Context) (uint64, error) {
	m, _, err := r.readEpoch(ctx)
	return m.Epoch, err
}

func (r *Room) readEpoch(ctx context.Context) (epochMeta, int32, error) {
	data, stat, err := zkx.Get(ctx, r.c, r.epochPath())
	if errors.Is(err, zk.ErrNoNode) {
		return epochMeta{}, 0, fmt.Errorf("%w: %s", ErrNoRoom, r.root)
	}
	if err != nil {
		return epochMeta{}, 0, zkError("logroom: read epoch", err)
	}
	m, err := decodeEpochMeta(data)
	if err != nil {
		return m, 0, fmt.Errorf("%w: room %q znode %s", err, r.name, r.epochPath())
	}
	return m, stat.Version, nil
}

// ChannelInfo describes one channel. LastIndex, Bytes and Batches are
// meaningful once Sealed; for the open channel LastIndex is FirstIndex-1.
type ChannelInfo struct {
	Num, FirstIndex, LastIndex uint64
	Epoch                      uint64
	Sealed                     bool
	Bytes                      int64
	Batches                    int
	// Deleting: DeleteChannel marked the channel and is removing it.
	Deleting bool
	// Removed counts the children of the channel znode ever deleted
	// (ZooKeeper's child version minus the children present, per delete).
	// Only DeleteChannel deletes batches, after marking the channel, so a
	// channel that is not Deleting has Removed == 0 unless another client
	// deleted a batch: CheckChain refuses it.
	Removed int
	// RoomVersion is the room version the channel was opened under (the
	// formats its batches may use).
	RoomVersion int
}

// Tampered reports a channel that lost a batch although it is not being
// deleted (Removed > 0 and not Deleting), or an open channel that carries
// a deletion mark (DeleteChannel never marks the open channel, and the
// mark would exempt its deletions): either is another client's doing.
func (ci ChannelInfo) Tampered() bool {
	return (ci.Removed > 0 && !ci.Deleting) || (ci.Deleting && !ci.Sealed)
}

// Charged is what the channel counts against WriterConfig.MaxRoomBytes:
// Bytes plus ZnodeHeapBytes for each batch znode and the channel znode
// (an open channel's Bytes and Batches are 0 until it is sealed).
func (ci ChannelInfo) Charged() int64 { return chargedBytes(ci.Bytes, ci.Batches+1) }

// channelNums lists the channel numbers, ascending.
func (r *Room) channelNums(ctx context.Context) ([]uint64, error) {
	names, err := zkx.Children(ctx, r.c, r.Path(channelsNode))
	if errors.Is(err, zk.ErrNoNode) {
		return nil, fmt.Errorf("%w: %s", ErrNoRoom, r.root)
	}
	if err != nil {
		return nil, zkError("logroom: list channels", err)
	}
	nums := make([]uint64, 0, len(names))
	for _, n := range names {
		if num, ok := parseNum(n, channelPrefix); ok {
			nums = append(nums, num)
		}
	}
	slices.Sort(nums)
	return nums, nil
}

// readChannel reads a channel's meta and znode version. A missing channel
// yields zk.ErrNoNode (wrapped).
func (r *Room) readChannel(ctx context.Context, num uint64) (channelMeta, int32, error) {
	m, stat, err := r.readChannelStat(ctx, num)
	if err != nil {
		return m, 0, err
	}
	return m, stat.Version, nil
}

// readChannelStat reads a channel's meta and its znode's Stat (one atomic
// read: the meta and the child counts are of the same moment).
func (r *Room) readChannelStat(ctx context.Context, num uint64) (channelMeta, *zk.Stat, error) {
	path := r.channelPath(num)
	data, stat, err := zkx.Get(ctx, r.c, path)
	if err != nil {
		return channelMeta{}, nil, zkError("logroom: read channel "+path, err)
	}
	m, err := decodeChannelMeta(data)
	if err != nil {
		return m, nil, r.corrupt(num, path, err)
	}
	return m, stat, nil
}

// childDeletes is how many children of a znode were deleted, from its
// Stat: ZooKeeper raises cversion by one for every create and every delete
// of a child, so cversion - numChildren counts two per delete.
func childDeletes(st *zk.Stat) int {
	d := int(st.Cversion - st.NumChildren)
	if d <= 0 {
		return 0
	}
	return (d + 1) / 2
}

// Channels lists the room's channels in ascending order.
func (r *Room) Channels(ctx context.Context) ([]ChannelInfo, error) {
	nums, err := r.channelNums(ctx)
	if err != nil {
		return nil, err
	}
	infos, err := r.channelInfos(ctx, nums)
	if err == nil {
		r.metrics.channelsListed(len(infos))
	}
	return infos, err
}

// channelInfos reads the metas of the listed channels (skipping channels
// deleted since the listing).
func (r *Room) channelInfos(ctx context.Context, nums []uint64) ([]ChannelInfo, error) {
	infos := make([]ChannelInfo, len(nums))
	found := make([]bool, len(nums))
	err := parallel(len(nums), 16, func(i int) error {
		m, st, err := r.readChannelStat(ctx, nums[i])
		if errors.Is(err, zk.ErrNoNode) {
			return nil // deleted since the listing
		}
		if err != nil {
			return err
		}
		infos[i], found[i] = m.info(nums[i]), true
		infos[i].Deleting, infos[i].Removed = m.Deleting, childDeletes(st)
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := infos[:0]
	for i := range infos {
		if found[i] {
			out = append(out, infos[i])
		}
	}
	return out, nil
}

// deleteChunk bounds the deletes of one Multi.
const deleteChunk = 200

// DeleteChannel deletes a sealed channel: it marks the channel meta
// "deleting", deletes the batch znodes (in Multis of up to 200 deletes),
// then the channel znode. The open channel is refused with ErrChannelOpen.
// Deleting a channel that does not exist is not an error (the call is
// idempotent). Readers positioned inside the channel get ErrCompacted.
//
// Only the room's oldest channel is deleted, and the deletion is fenced
// (ErrDeleteFenced): it first reads the channels znode (data and version)
// and refuses while channel num-1 exists; then every write of the deletion
// is a Multi whose first op sets the channels znode's data back to what it
// was at the version the previous write left, so each write lands only on
// the room this deletion has seen, step by step. Another deleter's writes
// bump that version too. A connection loss ends the call (ErrDeleteFenced
// wrapping it) instead of retrying: a deletion decided before ZooKeeper
// was restored from an older copy could otherwise land in the restored
// tree and delete a channel whose predecessor is back, leaving a hole
// every reader reports as corruption.
func (r *Room) DeleteChannel(ctx context.Context, num uint64) error {
	return r.deleteChannel(ctx, num, nil)
}

// DeleteChannel is Room.DeleteChannel behind the writer's fence as well:
// every write of the deletion begins with the writer's epoch and token
// checks (FenceOps), so a deposed primary, or one whose room was deleted
// and re-seeded under it, deletes nothing (ErrDeleteFenced wrapping
// ErrFenced).
func (w *Writer) DeleteChannel(ctx context.Context, num uint64) error {
	return w.room.deleteChannel(ctx, num, w.fenceOps())
}

func (r *Room) deleteChannel(ctx context.Context, num uint64, epochFence []any) error {
	f, err := r.deletionFence(ctx)
	if err != nil {
		return err
	}
	f.epoch = epochFence
	if testHookDeleteFence != nil {
		testHookDeleteFence()
	}
	if num > 1 {
		prev := r.channelPath(num - 1)
		ok, _, err := zkx.Exists(ctx, r.c, prev)
		if err != nil {
			return zkError("logroom: stat channel "+prev, err)
		}
		if ok {
			return fmt.Errorf("%w: room %q channel %d: channel %d (%s) still exists; only the oldest channel is deleted",
				ErrDeleteFenced, r.name, num, num-1, prev)
		}
	}
	m, version, err := r.readChannel(ctx, num)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		return err
	}
	if !m.Sealed {
		return fmt.Errorf("%w: room %q channel %d", ErrChannelOpen, r.name, num)
	}
	path := r.channelPath(num)
	if !m.Deleting {
		m.Deleting = true
		i, err := r.fencedDelete(f, &zk.SetDataRequest{Path: path, Data: encodeMeta(m), Version: version})
		switch {
		case err == nil:
			version++
		case i == 1 && errors.Is(err, zk.ErrNoNode):
			return nil
		case i == 1 && errors.Is(err, zk.ErrBadVersion):
			// A v0.1.0 deleter marked it meanwhile: take its version.
			m2, v2, rerr := r.readChannel(ctx, num)
			if errors.Is(rerr, zk.ErrNoNode) {
				return nil
			}
			if rerr != nil {
				return rerr
			}
			if !m2.Deleting {
				return fmt.Errorf("%w: room %q channel %d: its meta changed concurrently", ErrDeleteFenced, r.name, num)
			}
			version = v2
		default:
			return r.deleteErr("mark channel deleting "+path, err)
		}
	}
	for attempt := 0; ; attempt++ {
		names, err := zkx.Children(ctx, r.c, path)
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return zkError("logroom: list channel "+path, err)
		}
		for len(names) > 0 {
			n := min(len(names), deleteChunk)
			ops := make([]any, n)
			for i, b := range names[:n] {
				ops[i] = &zk.DeleteRequest{Path: path + "/" + b, Version: -1}
			}
			if i, err := r.fencedDelete(f, ops...); err != nil {
				if i > 0 && errors.Is(err, zk.ErrNoNode) {
					break // a v0.1.0 deleter's: list again
				}
				return r.deleteErr("delete batches of "+path, err)
			}
			names = names[n:]
		}
		if len(names) > 0 {
			if attempt > 3 {
				return fmt.Errorf("%w: room %q channel %d: batches deleted concurrently", ErrDeleteFenced, r.name, num)
			}
			continue
		}
		i, err := r.fencedDelete(f, &zk.DeleteRequest{Path: path, Version: version})
		if err == nil || i == 1 && errors.Is(err, zk.ErrNoNode) {
			r.deletions.Add(1)
			r.metrics.channelDeleted(m.Bytes, m.Batches)
			r.log.Info("channel deleted", "channel", num, "first", m.First, "last", m.Last)
			return nil
		}
		switch {
		case i == 1 && errors.Is(err, zk.ErrBadVersion):
			// A v0.1.0 deleter marked it meanwhile; take its version.
			_, v2, rerr := r.readChannel(ctx, num)
			if errors.Is(rerr, zk.ErrNoNode) {
				return nil
			}
			if rerr != nil {
				return rerr
			}
			version = v2
		case i == 1 && errors.Is(err, zk.ErrNotEmpty):
			// A batch appeared (a deposed writer's orphan): list again.
		default:
			return r.deleteErr("delete channel "+path, err)
		}
		if attempt > 3 {
			return r.deleteErr("delete channel "+path, err)
		}
	}
}

// testHookDeleteFence, set by a test, runs right after DeleteChannel read
// its fence.
var testHookDeleteFence func()

// deleteFence is the channels znode as a deletion last left it.
type deleteFence struct {
	path    string
	data    []byte
	version int32
	// epoch: a writer's fence ops, checked first by every write (nil:
	// none).
	epoch []any
}

// deletionFence reads the channels znode's data and version.
func (r *Room) deletionFence(ctx context.Context) (*deleteFence, error) {
	p := r.Path(channelsNode)
	data, st, err := zkx.Get(ctx, r.c, p)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, fmt.Errorf("%w: %s", ErrNoRoom, r.root)
	}
	if err != nil {
		return nil, zkError("logroom: read "+p, err)
	}
	return &deleteFence{path: p, data: data, version: st.Version}, nil
}

// fencedDelete runs ops in one Multi behind the fence (once: never across
// a connection loss) and returns the index of the failed op (0: the fence;
// ops are numbered from 1) with its error.
func (r *Room) fencedDelete(f *deleteFence, ops ...any) (int, error) {
	all := make([]any, 0, len(f.epoch)+len(ops)+1)
	all = append(all, f.epoch...)
	all = append(all, &zk.SetDataRequest{Path: f.path, Data: f.data, Version: f.version})
	all = append(all, ops...)
	i, err := multiErr(r.c.Conn().Multi(all...))
	if err == nil {
		f.version++
		return -1, nil
	}
	if i >= 0 && i < len(f.epoch) && (errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNoNode)) {
		return -1, fmt.Errorf("%w: %w: room %q: the deleting writer's epoch no longer holds", ErrDeleteFenced, ErrFenced, r.name)
	}
	return i - len(f.epoch), err
}

// deleteErr names a failed fenced deletion write: the fence (the channels
// znode's version moved), a lost connection, or another error.
func (r *Room) deleteErr(what string, err error) error {
	switch {
	case errors.Is(err, ErrDeleteFenced):
		return err
	case errors.Is(err, zk.ErrBadVersion):
		return fmt.Errorf("%w: room %q: %s: the channels znode changed since the deletion began (another deleter, or ZooKeeper restored from an older copy)",
			ErrDeleteFenced, r.name, what)
	case zkx.IsConnLoss(err):
		return fmt.Errorf("%w: room %q: %s: the connection was lost; not retried (decide again on a fresh listing): %w",
			ErrDeleteFenced, r.name, what, err)
	}
	return zkError("logroom: "+what, err)
}

// ZnodeHeapBytes is what the room's byte bound charges for each znode it
// holds (batch and channel znodes) on top of the znode's data: the
// ZooKeeper server heap a znode costs beyond its data bytes, measured on
// ZooKeeper 3.8 with jcmd after a full GC: 469 to 513 bytes for a batch
// znode of 29 (the path strings, the DataNode and its Stat, the entries in
// the data tree's map and in the parent's children set). A bound that
// counted data alone let a room of one-entry batches cost 16 times its
// bound in heap; TestRoomByteBoundHeap fills a room of one-entry batches
// to its bound and holds the live heap to at most 1.5 times MaxRoomBytes.
const ZnodeHeapBytes = 480

// Usage is what a room holds in ZooKeeper.
type Usage struct {
	Bytes    int64 // data bytes of its batch znodes
	Znodes   int   // batch znodes plus channel znodes
	Channels int
}

// Charged is the quantity WriterConfig.MaxRoomBytes bounds: Bytes plus
// ZnodeHeapBytes per znode.
func (u Usage) Charged() int64 { return chargedBytes(u.Bytes, u.Znodes) }

func chargedBytes(data int64, znodes int) int64 { return data + int64(znodes)*ZnodeHeapBytes }

// Bytes returns the data bytes the room's batch znodes hold in ZooKeeper:
// sealed channels' recorded bytes plus the open channels' batch znode sizes
// (Usage().Bytes).
func (r *Room) Bytes(ctx context.Context) (int64, error) {
	u, err := r.Usage(ctx)
	return u.Bytes, err
}

// Usage measures what the room holds: sealed channels' recorded bytes and
// batches, the open channels' batch znodes (listed and stat'ed), and the
// channel znodes.
func (r *Room) Usage(ctx context.Context) (Usage, error) {
	infos, err := r.Channels(ctx)
	if err != nil {
		return Usage{}, err
	}
	return r.UsageOf(ctx, infos)
}

// UsageOf is Usage for a channel listing the caller already holds (from
// Channels): sealed channels count their recorded bytes and batches; each
// open channel is listed and its batch znodes not seen by an earlier
// measurement are stat'ed (a batch znode's data never changes, so the Room
// remembers the sizes of the open channels' batches it has measured). It
// sets the room gauges (roomlog_room_bytes, _znodes, _channels).
func (r *Room) UsageOf(ctx context.Context, infos []ChannelInfo) (Usage, error) {
	u := Usage{Znodes: len(infos), Channels: len(infos)}
	open := map[uint64]bool{}
	for _, ci := range infos {
		if ci.Sealed {
			u.Bytes += ci.Bytes
			u.Znodes += ci.Batches
			continue
		}
		open[ci.Num] = true
		n, children, err := r.openChannelBytes(ctx, ci.Num)
		if err != nil {
			return Usage{}, err
		}
		u.Bytes += n
		u.Znodes += children
	}
	r.sizes.forget(open)
	r.metrics.roomMeasured(u.Bytes, u.Znodes, len(infos))
	return u, nil
}

// openSizes remembers the data lengths of the open channels' batch znodes
// that UsageOf has stat'ed, so a measurement once a second costs one
// listing per open channel plus one stat per batch written since.
type openSizes struct {
	mu    sync.Mutex
	chans map[uint64]*channelSizes // guarded by mu; open channels only
}

// channelSizes is one channel znode's measured children. czxid identifies
// the channel znode: a channel of the same number created again (a
// re-seeded room) starts over.
type channelSizes struct {
	czxid int64
	sizes map[string]int64
}

// known returns the sizes already measured for the channel whose znode
// has czxid, keeping only names (the children listed now).
func (o *openSizes) known(num uint64, czxid int64, names []string) map[string]int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	cs := o.chans[num]
	out := make(map[string]int64, len(names))
	if cs == nil || cs.czxid != czxid {
		return out
	}
	for _, n := range names {
		if s, ok := cs.sizes[n]; ok {
			out[n] = s
		}
	}
	return out
}

// store records the sizes measured for the channel whose znode has czxid.
func (o *openSizes) store(num uint64, czxid int64, sizes map[string]int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.chans == nil {
		o.chans = map[uint64]*channelSizes{}
	}
	o.chans[num] = &channelSizes{czxid: czxid, sizes: sizes}
}

// forget drops the channels that are not open any more.
func (o *openSizes) forget(open map[uint64]bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for num := range o.chans {
		if !open[num] {
			delete(o.chans, num)
		}
	}
}

// openChannelBytes sums the data lengths of a channel's children and
// returns them with the number of children. Children measured by an
// earlier call are not stat'ed again.
func (r *Room) openChannelBytes(ctx context.Context, num uint64) (int64, int, error) {
	path := r.channelPath(num)
	var names []string
	var pst *zk.Stat
	err := r.c.Retry(ctx, func() error {
		var e error
		names, pst, e = r.c.Conn().Children(path)
		return e
	})
	if errors.Is(err, zk.ErrNoNode) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, zkError("logroom: list channel "+path, err)
	}
	known := r.sizes.known(num, pst.Czxid, names)
	var todo []string
	for _, n := range names {
		if _, ok := known[n]; !ok {
			todo = append(todo, n)
		}
	}
	sizes := make([]int64, len(todo))
	found := make([]bool, len(todo))
	err = parallel(len(todo), 32, func(i int) error {
		var st *zk.Stat
		var ok bool
		e := r.c.Retry(ctx, func() error {
			var e error
			ok, st, e = r.c.Conn().Exists(path + "/" + todo[i])
			return e
		})
		if e != nil {
			return zkError("logroom: stat batch", e)
		}
		if ok {
			sizes[i], found[i] = int64(st.DataLength), true
		}
		return nil
	})
	for i, n := range todo {
		if found[i] {
			known[n] = sizes[i]
		}
	}
	if err == nil {
		r.sizes.store(num, pst.Czxid, known)
	}
	var total int64
	for _, s := range known {
		total += s
	}
	return total, len(names), err
}

// CommittedIndex returns the last index of the contiguous committed log,
// after a ZooKeeper sync: every entry acknowledged before the call is <= the
// result. hint must be an index known to be committed (for example the
// caller's applied index) or 0; the walk of the open channel starts there,
// so the cost is about one read per batch written since hint.
func (r *Room) CommittedIndex(ctx context.Context, hint uint64) (uint64, error) {
	if err := zkx.Sync(ctx, r.c, r.Path(channelsNode)); err != nil {
		return 0, zkError("logroom: sync", err)
	}
	for {
		nums, err := r.channelNums(ctx)
		if err != nil {
			return 0, err
		}
		if len(nums) == 0 {
			return 0, nil
		}
		num := nums[len(nums)-1]
		m, _, err := r.readChannel(ctx, num)
		if errors.Is(err, zk.ErrNoNode) {
			continue // deleted or replaced since the listing
		}
		if err != nil {
			return 0, err
		}
		if m.Sealed {
			return m.Last, nil
		}
		start := m.First
		if hint >= m.First {
			start, err = r.batchAtOrBefore(ctx, num, m.First, hint+1)
			if errors.Is(err, zk.ErrNoNode) {
				continue // deleted since the meta was read
			}
			if err != nil {
				return 0, err
			}
		}
		if committedWalkHook != nil {
			committedWalkHook(num)
		}
		end, _, _, err := r.walkChain(ctx, num, start, 0)
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return 0, err
		}
		// The walk ends at the first missing batch. The channel was open
		// when its meta was read, but a checkpoint may have sealed it and
		// deleted it (a batch at a time) since: then the missing batch is
		// the deletion, not the log's end, and the end is in the sealed
		// meta or a later channel. Read the meta again: still open, the
		// walk's end stands.
		m2, _, err := r.readChannel(ctx, num)
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return 0, err
		}
		if m2.Sealed {
			continue
		}
		return end, nil
	}
}

// committedWalkHook, when set (tests only), runs in CommittedIndex after
// it read the last channel's meta as open, just before it walks the
// channel's batches.
var committedWalkHook func(num uint64)

// batchAtOrBefore returns a batch boundary p with first <= p <= pos such
// that every index in [p, pos) belongs to a committed batch, given that
// pos-1 is committed: pos itself when b-pos exists, else the first of the
// batch holding pos-1 (found by listing the channel once).
func (r *Room) batchAtOrBefore(ctx context.Context, num, first, pos uint64) (uint64, error) {
	path := r.batchPath(num, pos)
	var ok bool
	err := r.c.Retry(ctx, func() error {
		var e error
		ok, _, e = r.c.Conn().Exists(path)
		return e
	})
	if err != nil {
		return 0, zkError("logroom: exists "+path, err)
	}
	if ok {
		return pos, nil
	}
	names, err := zkx.Children(ctx, r.c, r.channelPath(num))
	if err != nil {
		return 0, zkError("logroom: list channel", err)
	}
	best := first
	for _, n := range names {
		if f, ok := parseNum(n, batchPrefix); ok && f < pos && f > best {
			best = f
		}
	}
	return best, nil
}

// walkListAfter is how many batches walkChain reads one by one before it
// lists the channel and reads the rest walkWindow at a time.
const (
	walkListAfter = 64
	walkWindow    = 32
)

// walkChain follows the batch chain of channel num from pos (a batch
// boundary) until a name is missing or, when stop > 0, the chain passes
// stop. The first walkListAfter batches are read one Get at a time; a
// longer walk lists the channel once and reads the listed batches
// walkWindow at a time, ending at the last one listed: a channel that grows
// as fast as the walk reads cannot keep it going, and what was committed
// before the walk began is listed. It returns the last contiguous index
// and the bytes and batches walked; ctx ends it.
func (r *Room) walkChain(ctx context.Context, num, pos, stop uint64) (end uint64, bytes int64, batches int, err error) {
	check := func(path string, data []byte, pos uint64) (Batch, error) {
		b, err := DecodeBatch(data)
		if err == nil && b.First != pos {
			err = fmt.Errorf("%w: batch first index %d, expected %d", ErrCorrupt, b.First, pos)
		}
		if err == nil && b.Count == 0 {
			err = fmt.Errorf("%w: empty batch", ErrCorrupt)
		}
		if err != nil {
			return b, r.corrupt(num, path, err)
		}
		return b, nil
	}
	for (stop == 0 || pos <= stop) && batches < walkListAfter {
		if err := ctx.Err(); err != nil {
			return 0, 0, 0, err
		}
		path := r.batchPath(num, pos)
		data, _, err := zkx.Get(ctx, r.c, path)
		if errors.Is(err, zk.ErrNoNode) {
			return pos - 1, bytes, batches, nil
		}
		if err != nil {
			return 0, 0, 0, zkError("logroom: read "+path, err)
		}
		b, err := check(path, data, pos)
		if err != nil {
			return 0, 0, 0, err
		}
		pos += uint64(b.Count)
		bytes += int64(len(data))
		batches++
	}
	if stop > 0 && pos > stop {
		return pos - 1, bytes, batches, nil
	}
	names, err := zkx.Children(ctx, r.c, r.channelPath(num))
	if err != nil {
		return 0, 0, 0, zkError("logroom: list channel", err)
	}
	var firsts []uint64
	for _, n := range names {
		if f, ok := parseNum(n, batchPrefix); ok && f >= pos && (stop == 0 || f <= stop) {
			firsts = append(firsts, f)
		}
	}
	slices.Sort(firsts)
	for len(firsts) > 0 && firsts[0] == pos {
		if err := ctx.Err(); err != nil {
			return 0, 0, 0, err
		}
		n := min(len(firsts), walkWindow)
		datas := make([][]byte, n)
		found := make([]bool, n) // a znode with null data is found (and corrupt), not a hole
		err := parallel(n, n, func(i int) error {
			d, _, e := zkx.Get(ctx, r.c, r.batchPath(num, firsts[i]))
			if errors.Is(e, zk.ErrNoNode) {
				return nil
			}
			if e != nil {
				return zkError("logroom: read batch", e)
			}
			datas[i], found[i] = d, true
			return nil
		})
		if err != nil {
			return 0, 0, 0, err
		}
		for i := range n {
			if firsts[i] != pos || !found[i] {
				return pos - 1, bytes, batches, nil // a hole
			}
			b, err := check(r.batchPath(num, pos), datas[i], pos)
			if err != nil {
				return 0, 0, 0, err
			}
			pos += uint64(b.Count)
			bytes += int64(len(datas[i]))
			batches++
		}
		firsts = firsts[n:]
	}
	return pos - 1, bytes, batches, nil
}

// readPrefix is what a Reader verified of one channel, from the channel's
// first batch on, as it delivered: the batches [first, next) of channel
// num (its znode created at czxid: nothing numeric survives a room
// deleted and created again, the czxid does), each carrying epoch (the
// channel's), bytes of batch data in batches znodes. Batch znodes are
// immutable and every one of these was validated in order
// (Reader.deliver), so a Writer taking over starts its scan of that
// channel at next instead of first, provided the channel znode is the
// same (czxid), never lost a child (its Cversion) and its listing names
// exactly batches znodes below next (scanChain).
type readPrefix struct {
	num, first, next, epoch uint64
	czxid                   int64
	bytes                   int64
	batches                 int
}

// readPrefixes holds the newest readPrefix of a Room's readers.
type readPrefixes struct {
	mu  sync.Mutex
	cur readPrefix // guarded by mu
}

// advance records p when it is of another channel znode than the prefix
// held (the reader moved on) or extends it.
func (rp *readPrefixes) advance(p readPrefix) {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	c := rp.cur
	if p.czxid != c.czxid || p.num != c.num || p.first != c.first || p.epoch != c.epoch || p.next > c.next {
		rp.cur = p
	}
}

// of returns the prefix held for channel num, whose znode was created at
// czxid, opened at first by epoch (ok false: none).
func (rp *readPrefixes) of(num uint64, czxid int64, first, epoch uint64) (readPrefix, bool) {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	c := rp.cur
	return c, c.num == num && c.czxid == czxid && c.first == first && c.epoch == epoch && c.next > first
}
