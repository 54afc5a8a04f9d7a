package replica

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/roomlog/roomlog/archive"
	"github.com/roomlog/roomlog/checkpoint"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/store"
	"github.com/roomlog/roomlog/tlsfiles"
	"github.com/roomlog/roomlog/version"

	"github.com/roomlog/roomlog/zkx"
)

// Defaults for zero Config fields. The ZooKeeper session timeout, the base
// path and the room byte bound are logroom's (one owner for each).
const (
	DefaultSessionTimeout         = logroom.DefaultSessionTimeout
	DefaultBase                   = logroom.DefaultBase
	DefaultCheckpointEveryEntries = 100_000
	DefaultCheckpointEveryBytes   = 64 << 20
	DefaultKeepCheckpoints        = 2
	DefaultMaxPendingProposals    = 4096
	DefaultTransferTimeout        = 5 * time.Second
	DefaultMemberUpdateInterval   = time.Second
	DefaultLinkProbeBound         = 400 * time.Millisecond
	DefaultBootstrapHoldStall     = 30 * time.Second
	DefaultBootstrapHoldMax       = 30 * time.Minute
	DefaultMaxRoomBytes           = logroom.DefaultMaxRoomBytes // Writer.MaxRoomBytes' default
	DefaultRequestTTL             = 10 * time.Minute
	DefaultRequestWindow          = 1 << 20
	// DefaultTakeoverLagBound is TakeoverLagBound's default: a few
	// milliseconds of catch-up on this machine's apply rate.
	DefaultTakeoverLagBound = 1000

	// MaxIDLen bounds Config.ID (it is a znode name under /members).
	MaxIDLen = zkx.MaxNameLen
)

// Config configures a Replica. Zero values take the documented defaults;
// Validate names every bad field at once. A member joins as a standby that
// may lead; with Observer set it joins as an observer, which never leads.
type Config struct {
	// Servers are the ZooKeeper client addresses ("host:port"). Required.
	Servers []string
	// SessionTimeout is the ZooKeeper session timeout asked for. It bounds
	// failover: a killed primary's candidate node disappears when its session
	// expires. Default DefaultSessionTimeout (4s); 0 or between 100ms and
	// 60s (the server clamps it to its own min/max, by default 2 to 20
	// ticks).
	SessionTimeout time.Duration
	// AnyServer connects to the ZooKeeper servers in go-zookeeper's
	// shuffled order instead of preferring the ensemble's leader
	// (logroom.DialConfig.AnyServer): by default every member connects to
	// the leader when it can, so that the primary's writes skip a
	// follower's forwarding hop.
	AnyServer bool
	// Base is the room parent path (logroom.ValidateBase). Default
	// DefaultBase ("/roomlog").
	Base string
	// Room is the room's name (logroom.ValidateName). Required.
	Room string
	// ID names this member in the room: unique among live members, stable
	// across restarts of the same master (it names /<room>/members/<id>).
	// Required; at most MaxIDLen bytes of printable UTF-8 without '/',
	// not "." or "..".
	ID string
	// DataDir holds this member's state: DataDir/store (Pebble) and
	// DataDir/checkpoints. Required; created if missing.
	DataDir string
	// AdvertiseAddr is where other members reach this member's checkpoint
	// handler: "host:port" or an http(s) URL ("http://host:port"). The
	// checkpoint URL is AdvertiseAddr + CheckpointPath(Room). It is also the
	// address NotPrimaryError reports. Optional: a member without one never
	// serves bootstrap checkpoints.
	AdvertiseAddr string
	// ListenAddr, when set, makes the replica serve CheckpointHandler itself
	// on this address ("host:port"; ":0" picks a port, see
	// Replica.ListenAddr). Leave empty when the embedder mounts the handler.
	ListenAddr string
	// Observer makes this member an observer (package doc, "Roles:
	// observers"): it tails and applies the log, serves reads
	// (WaitApplied, Barrier, Store), makes and serves checkpoints and
	// counts for channel deletion like any member, and appears in Status
	// and metrics, but it never becomes a candidate: it creates no
	// election node, so it never takes over, not even as the last member
	// left, and TransferLeadership refuses it as a target. Its member data
	// says so (observer: true) beside role "standby". Default false: a
	// standby, which may lead.
	Observer bool

	// Applier turns entries into state. Default store.OpsApplier{} (or
	// StoreOptions.Applier when that is set). Must be deterministic.
	Applier store.Applier
	// StoreOptions tunes the local Pebble store (sync policy, cache).
	// Optional; its Logger is replaced by Logger.
	StoreOptions *store.Options

	// CheckpointEveryEntries: every member checkpoints its store after this
	// many entries applied since its last checkpoint. Default 100000; <0
	// disables this trigger.
	CheckpointEveryEntries int
	// CheckpointEveryBytes: ... or after this many entry bytes. Default
	// 64 MiB; <0 disables this trigger. Together with the retention below it
	// bounds the room's ZooKeeper bytes to roughly twice this value plus the
	// lag of the slowest live member.
	CheckpointEveryBytes int64
	// KeepCheckpoints is how many local checkpoints to keep. Default 2.
	KeepCheckpoints int
	// CheckpointFetch bounds every checkpoint download (bootstrap) and
	// manifest probe (the primary's check that a member really serves the
	// checkpoint deletion relies on). Zero fields take package checkpoint's
	// defaults: ConnectTimeout 5s, ResponseHeaderTimeout 10s, IdleTimeout
	// 30s, MaxBytes 64 GiB, MaxManifestBytes 8 MiB. Origin is always set by
	// the replica (the room's incarnation); Client (not with PeerTLS) and
	// Progress may be set.
	CheckpointFetch checkpoint.FetchOptions
	// RetainRoomBytes is the retention limit: when the room's sealed
	// channels hold more than this many bytes, counted as MaxRoomBytes
	// counts them (logroom.ChannelInfo.Charged: data plus
	// logroom.ZnodeHeapBytes per znode), the primary deletes sealed channels its durable
	// checkpoint covers even if a live member has not applied them yet (that
	// member then bootstraps from a checkpoint). Default half of
	// Writer.MaxRoomBytes; <0 disables (lagging members then hold channels
	// until Writer.MaxRoomBytes pushes back on Propose).
	RetainRoomBytes int64
	// BootstrapHoldStall: a member bootstrapping from a checkpoint at index
	// C publishes a hold (C+1, then its applied index + 1 while it catches
	// up to where the primary was when it installed the checkpoint), and
	// the primary deletes no channel from the hold on, not even over
	// RetainRoomBytes (the room then grows until appends get ErrRoomFull),
	// as long as the hold's progress (bytes received, entries applied)
	// moved within BootstrapHoldStall (while it verifies local files or
	// installs the checkpoint, a heartbeat counts as progress; while it
	// transfers, only bytes received do), and for at most
	// BootstrapHoldMax in all. A bootstrap stuck for longer no longer
	// holds the log; if the log it needs is then deleted it fails with
	// ErrBootstrapOutrun. BootstrapHoldStall: default 30s (package
	// checkpoint's fetch IdleTimeout), <0: never. BootstrapHoldMax:
	// default 30m, <0: no bound.
	BootstrapHoldStall time.Duration
	BootstrapHoldMax   time.Duration

	// MaxPendingProposals bounds the proposals in flight on the primary;
	// beyond it Propose returns ErrQueueFull. Default 4096.
	MaxPendingProposals int
	// RequestTTL and RequestWindow are the deduplication policy this
	// replica writes into the request envelopes it proposes as primary
	// (ProposeRequest): a request id is remembered for RequestTTL of log
	// time (proposers' clocks) and at most RequestWindow log entries,
	// whichever ends first. The policy travels in the log, so replicas
	// with different settings still agree. Defaults 10m and 2^20 entries
	// (about 100 MB of table at 10-byte responses); TTL 1ms..30 days,
	// window 1..2^26.
	//
	// Log time is the proposing primary's clock: a new primary whose clock
	// runs more than RequestTTL ahead of the previous one's expires every
	// record with its first request, and a retry arriving then is applied
	// again. Keep RequestTTL well above the members' worst clock skew (NTP
	// keeps it to milliseconds; 10 minutes is the default for that
	// reason). The window bound does not depend on clocks.
	RequestTTL    time.Duration
	RequestWindow int
	// TransferTimeout bounds a leadership transfer's wait for its target to
	// catch up (the primary accepts no proposal meanwhile) and is how long
	// the transfer record stays binding for other candidates. Default 5s.
	TransferTimeout time.Duration
	// MemberUpdateInterval is the minimum interval between membership-data
	// updates caused by an applied index that keeps moving (role and
	// checkpoint changes publish at once, and so does an applied index
	// that has stopped moving for 20ms, if a tenth of the interval passed:
	// a drained transfer's target, the end of a burst). Each update is a ZooKeeper quorum write competing
	// with the log's appends. It bounds how stale other members' view of
	// this member's applied index is under load (per-member lag, channel
	// deletion). Default 1s.
	MemberUpdateInterval time.Duration
	// LinkProbeBound: while its session is connected, the member reads a
	// znode on its own session every linkProbeEvery (100 ms); a read
	// unanswered for LinkProbeBound means the link is silently cut (a
	// partition that holds bytes, which go-zookeeper notices only when its
	// read timeout, two thirds of the session, fires): reads that need
	// ZooKeeper (WaitApplied for an index not applied here, Barrier) are
	// refused with ErrUnavailable at once until a read answers again. The
	// session and the role are not touched: a blip that recovers lets reads
	// through again. Default 400 ms; negative: off.
	LinkProbeBound time.Duration

	// Auth, when set, authenticates with ZooKeeper digest credentials and
	// creates every znode with a digest ACL.
	Auth *logroom.Digest
	// ZooKeeperTLS, when set, connects to ZooKeeper over TLS (the servers'
	// secureClientPort; Servers must name those ports): the member presents
	// its certificate, which ZooKeeper's x509 provider authenticates, and
	// verifies the servers against the CA file and ZooKeeperTLSServerName
	// (default: each server's host). Rotated files are used by the next
	// connection; the session survives (logroom.DialConfig.TLS).
	ZooKeeperTLS *tlsfiles.Source
	// ZooKeeperTLSServerName: see ZooKeeperTLS.
	ZooKeeperTLSServerName string
	// ACLIdentities are certificate identities (x509 scheme, as
	// tlsfiles.Source.Identity gives them) granted all permissions on every
	// znode this member creates, beside Auth's digest entry or instead of
	// it. Every member of a room lists the same ones (each member's own
	// included). Needs ZooKeeperTLS or Auth. Left empty with ZooKeeperTLS
	// and no Auth, the member creates for its own certificate's identity
	// only (logroom.DialConfig.ACLIdentities), never world:anyone.
	ACLIdentities []string
	// CheckpointToken, when set, is a shared secret: CheckpointHandler
	// serves only requests bearing it ("Authorization: Bearer <token>",
	// else 401 and nothing served), and this replica sends it when it
	// fetches a peer's checkpoint or manifest. Every member of a room must
	// use the same token. Load it from a file, not a command line.
	CheckpointToken string
	// PeerTLS, when set, is mutual TLS between members (replica/peertls.go):
	// the checkpoint endpoint on ListenAddr is served over HTTPS and
	// requires a client certificate signed by the CA file; this member
	// advertises "https://" + AdvertiseAddr (a plain http AdvertiseAddr is
	// refused) and fetches, probes and follows peers over HTTPS only,
	// presenting its certificate and verifying theirs against the CA file
	// and the address they advertise. The CheckpointToken then travels
	// only inside TLS. Rotated files are used by new connections without
	// a restart. It must hold a certificate. nil: plain HTTP.
	PeerTLS *tlsfiles.Source
	// PeerConnMaxAge bounds the age of a connection to the checkpoint
	// server on ListenAddr (tlsfiles.LimitConnAge), so that a peer whose
	// certificate expired or whose CA was removed from the CA file loses
	// access however busy it keeps its connection: after PeerConnMaxAge
	// a connection takes no new request (idle ones close at once), and at
	// twice it it is closed whatever it is doing (a liveness stream is
	// reopened by its follower, a fetch resumes). 0:
	// DefaultPeerConnMaxAge (1m); negative: no bound.
	PeerConnMaxAge time.Duration
	// PeerIdentities, when set, are the certificate identities (as
	// tlsfiles.Source.Identity gives them) accepted as members over
	// PeerTLS: the checkpoint endpoint (checkpoints, manifests, the
	// liveness stream) answers 403 to a client whose certificate is not on
	// the list, and this member fetches from and probes only servers whose
	// certificate is. Without it any certificate the CA file signed is a
	// member (a chunk server's or a client's too, when one CA signs every
	// role). Needs PeerTLS.
	PeerIdentities []string
	// Registerer, when set, receives the replica's Prometheus metrics and
	// its logroom writer's and reader's (package doc, "Metrics"), labelled
	// room=<Room> and member=<ID>. They are unregistered by Close. nil: no
	// metrics (never the global registry unless passed explicitly).
	Registerer prometheus.Registerer
	// Logger receives structured logs. nil discards.
	Logger *slog.Logger
	// TakeoverLagBound: when the primary goes, the lowest candidate takes
	// over only if no other live candidate has applied more than this many
	// entries more (by the applied index it publishes); otherwise it
	// requeues behind it, so failover does not include a long catch-up
	// (package doc, "Roles"). 0: DefaultTakeoverLagBound; negative: no
	// bound (the lowest candidate always takes over).
	TakeoverLagBound int
	// MaxRoomVersion caps the room versions this member supports (0: its
	// binary's version.RoomMax). It advertises the capped range, so the
	// room is never moved past it while the member is live (an operator
	// keeps a room downgradable by capping), and it refuses a room above
	// it with ErrUnsupportedVersion.
	MaxRoomVersion int
	// Writer tunes the primary's logroom writer (batching, channel rotation,
	// MaxRoomBytes backpressure). Owner and OnCommit are set by the replica
	// and must be left zero.
	Writer logroom.WriterConfig

	// --- archive (issue 27; replica/archive.go) ---

	// Archive, when set, is the room's continuous archive (package
	// archive): as primary, this member copies every sealed channel and
	// every checkpoint it makes there, and deletes a channel only once it
	// is archived (a failing archive holds deletion until the writer's
	// MaxRoomBytes answers ErrRoomFull; ArchiveStatus and the
	// roomlog_replica_archive_* metrics say so). Give every member of a
	// room the same archive, so a new primary continues where the last
	// one stopped. nil: no archive.
	Archive archive.Archive

	// bugs plants wrong decisions for the whole-replica simulation
	// (simreplica_test.go), which must catch each; always zero outside
	// that test.
	bugs plantedBugs
}

// plantedBugs are wrong decisions the whole-replica simulation must catch:
// the core's, and the replica's own.
type plantedBugs struct {
	core coreBugs
	// unknownNotSent: an append whose writer died with its outcome
	// unknown is reported as never sent (ErrNotPrimary).
	unknownNotSent bool
}

// takeoverLagBound is the bound decideElection applies (0: none).
func (c Config) takeoverLagBound() uint64 {
	switch {
	case c.TakeoverLagBound < 0:
		return 0
	case c.TakeoverLagBound == 0:
		return DefaultTakeoverLagBound
	}
	return uint64(c.TakeoverLagBound)
}

// Validate reports every bad field at once (joined errors, each wrapping
// ErrInvalidConfig and naming its field), or nil.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s: %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...)))
	}
	if len(c.Servers) == 0 {
		bad("Servers", "at least one ZooKeeper address is required")
	}
	for i, s := range c.Servers {
		if _, _, err := net.SplitHostPort(s); err != nil {
			bad(fmt.Sprintf("Servers[%d]", i), "%q is not host:port: %v", s, err)
		}
	}
	if c.SessionTimeout != 0 && (c.SessionTimeout < 100*time.Millisecond || c.SessionTimeout > 60*time.Second) {
		bad("SessionTimeout", "%v is outside [100ms, 60s]", c.SessionTimeout)
	}
	if c.Base != "" {
		if err := logroom.ValidateBase(c.Base); err != nil {
			bad("Base", "%v", err)
		}
	}
	if c.Room == "" {
		bad("Room", "required")
	} else if err := logroom.ValidateName(c.Room); err != nil {
		bad("Room", "%v", err)
	}
	if err := validateID(c.ID); err != nil {
		bad("ID", "%v", err)
	}
	if c.DataDir == "" {
		bad("DataDir", "required")
	}
	if c.AdvertiseAddr != "" {
		if _, err := checkpointBaseURL(c.AdvertiseAddr); err != nil {
			bad("AdvertiseAddr", "%v", err)
		}
	}
	if c.ListenAddr != "" {
		if _, _, err := net.SplitHostPort(c.ListenAddr); err != nil {
			bad("ListenAddr", "%q is not host:port: %v", c.ListenAddr, err)
		}
	}
	c.validatePeerTLS(bad)
	if c.PeerTLS != nil && c.CheckpointFetch.Client != nil {
		bad("CheckpointFetch.Client", "set with PeerTLS: the fetch would use this client, without the PeerTLS certificate and CA check (FetchOptions.TLS is ignored with Client); leave it nil")
	}
	if c.StoreOptions != nil {
		if err := c.StoreOptions.Validate(); err != nil {
			bad("StoreOptions", "%v", err)
		}
	}
	if c.KeepCheckpoints < 0 {
		bad("KeepCheckpoints", "%d is negative", c.KeepCheckpoints)
	}
	if c.MaxPendingProposals < 0 {
		bad("MaxPendingProposals", "%d is negative", c.MaxPendingProposals)
	}
	if c.TransferTimeout < 0 {
		bad("TransferTimeout", "%v is negative", c.TransferTimeout)
	}
	if c.RequestTTL != 0 && (c.RequestTTL < time.Millisecond || c.RequestTTL > store.MaxRequestTTL) {
		bad("RequestTTL", "%v is outside [1ms, %v]", c.RequestTTL, store.MaxRequestTTL)
	}
	if c.RequestWindow < 0 || c.RequestWindow > store.MaxRequestWindow {
		bad("RequestWindow", "%d is outside [0, %d]", c.RequestWindow, store.MaxRequestWindow)
	}
	if iv := cmp.Or(c.MemberUpdateInterval, DefaultMemberUpdateInterval); c.BootstrapHoldStall > 0 && c.BootstrapHoldStall < 2*iv {
		bad("BootstrapHoldStall", "%v is shorter than two MemberUpdateIntervals (a hold's progress is published at most once per interval)", c.BootstrapHoldStall)
	}
	if c.BootstrapHoldMax > 0 && c.BootstrapHoldMax < c.BootstrapHoldStall {
		bad("BootstrapHoldMax", "%v is shorter than BootstrapHoldStall %v", c.BootstrapHoldMax, c.BootstrapHoldStall)
	}
	if c.MemberUpdateInterval < 0 || c.MemberUpdateInterval > time.Minute {
		bad("MemberUpdateInterval", "%v is outside [0, 1m]", c.MemberUpdateInterval)
	}
	if c.MaxRoomVersion != 0 && (c.MaxRoomVersion < version.RoomMin || c.MaxRoomVersion > version.RoomMax) {
		bad("MaxRoomVersion", "%d is outside this binary's room versions %d..%d", c.MaxRoomVersion, version.RoomMin, version.RoomMax)
	}
	if c.Writer.Owner != "" {
		bad("Writer.Owner", "set by the replica (its ID); leave empty")
	}
	if c.Writer.OnCommit != nil {
		bad("Writer.OnCommit", "set by the replica; leave nil")
	}
	if err := c.Writer.Validate(); err != nil {
		bad("Writer", "%v", err)
	}
	return errors.Join(errs...)
}

// validateID checks a member id: it becomes a znode name.
func validateID(id string) error {
	if id == "" {
		return errors.New("required")
	}
	if err := zkx.ValidName(id); err != nil {
		return fmt.Errorf("%q: %w", id, err)
	}
	return nil
}

// checkpointBaseURL turns an advertised address into the base URL
// ("http://host:port", no trailing slash).
func checkpointBaseURL(addr string) (string, error) {
	if strings.Contains(addr, "://") {
		u, err := url.Parse(addr)
		if err != nil {
			return "", fmt.Errorf("%q: %v", addr, err)
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return "", fmt.Errorf("%q: scheme must be http or https", addr)
		}
		if u.Host == "" {
			return "", fmt.Errorf("%q: no host", addr)
		}
		return strings.TrimSuffix(u.Scheme+"://"+u.Host+u.Path, "/"), nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return "", fmt.Errorf("%q is neither host:port nor an http(s) URL: %v", addr, err)
	}
	return "http://" + addr, nil
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.SessionTimeout == 0 {
		c.SessionTimeout = DefaultSessionTimeout
	}
	if c.Base == "" {
		c.Base = DefaultBase
	}
	if c.CheckpointEveryEntries == 0 {
		c.CheckpointEveryEntries = DefaultCheckpointEveryEntries
	}
	if c.CheckpointEveryBytes == 0 {
		c.CheckpointEveryBytes = DefaultCheckpointEveryBytes
	}
	if c.KeepCheckpoints == 0 {
		c.KeepCheckpoints = DefaultKeepCheckpoints
	}
	if c.RetainRoomBytes == 0 {
		max := c.Writer.MaxRoomBytes
		if max <= 0 {
			max = DefaultMaxRoomBytes
		}
		c.RetainRoomBytes = max / 2
	}
	if c.MaxPendingProposals == 0 {
		c.MaxPendingProposals = DefaultMaxPendingProposals
	}
	if c.TransferTimeout == 0 {
		c.TransferTimeout = DefaultTransferTimeout
	}
	if c.RequestTTL == 0 {
		c.RequestTTL = DefaultRequestTTL
	}
	if c.RequestWindow == 0 {
		c.RequestWindow = DefaultRequestWindow
	}
	if c.MemberUpdateInterval == 0 {
		c.MemberUpdateInterval = DefaultMemberUpdateInterval
	}
	if c.LinkProbeBound == 0 {
		c.LinkProbeBound = DefaultLinkProbeBound
	}
	if c.BootstrapHoldStall == 0 {
		c.BootstrapHoldStall = DefaultBootstrapHoldStall
	}
	if c.BootstrapHoldMax == 0 {
		c.BootstrapHoldMax = DefaultBootstrapHoldMax
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.AdvertiseAddr = peerAdvertise(c.AdvertiseAddr, c.PeerTLS)
	return c
}

// CheckpointPath is the URL path under which a replica of room serves its
// newest checkpoint: GET CheckpointPath(room) streams it, GET
// CheckpointPath(room)+"manifest" returns its JSON manifest. Mount
// Replica.CheckpointHandler() at this path.
func CheckpointPath(room string) string {
	return "/roomlog/checkpoint/" + url.PathEscape(room) + "/"
}
