// Command roomlog is an operator's tool for roomlog rooms in ZooKeeper,
// in the spirit of HDFS's offline edits viewer and haadmin/dfsadmin,
// etcdctl/etcdutl and DistributedLog's tool. It is read-only except for
// room-version --set (a room version target), acl --add/--remove (a live
// room's ACL), transfer and checkpoint (requests to the primary),
// delete-room and reseed (re-creates a room ZooKeeper lost); see "Writes". restore writes
// only a local directory; inspect and version need no ZooKeeper.
//
//	roomlog [--zk host:port,...] [--base /roomlog] [--zk-digest-file FILE]
//	        [--zk-tls-ca FILE [--zk-tls-cert FILE --zk-tls-key FILE]] [--json] COMMAND [ARGS]
//	roomlog COMMAND -h       a command's own help (stdout, exit 0)
//	roomlog --version        as the version command
//
//	rooms                  the rooms under --base: created, epoch, owner,
//	                       channels, first retained index, live members; a
//	                       room a tombstone replaced (ZooKeeper lost it) is
//	                       listed as LOST with the tombstone's text (JSON
//	                       lost, error), the others as usual. No room (the
//	                       base never created) is an empty table, exit 0
//	acl ROOM [--add IDENTITY]... [--remove IDENTITY]... [--force]
//	                       the room's ACL and each live member's identities
//	                       and whether the ACL grants them; WRITES with
//	                       --add/--remove (see "Writes"; 'roomlog acl -h'
//	                       gives the procedures)
//	transfer ROOM [--to ID] [--wait D]
//	                       WRITES: a fenced, graceful failover to member ID
//	                       (default: the standby that applied the most);
//	                       waits until the new primary leads and prints how
//	                       long it took
//	checkpoint ROOM [--wait D]
//	                       WRITES: the primary checkpoints now; prints the
//	                       checkpoint's index
//	delete-room ROOM [--yes] [--force] [--wait D]
//	                       WRITES: deletes ROOM and everything under it;
//	                       refused (exit 1) while members are live (ephemeral
//	                       znodes under members/ or election/) unless
//	                       --force; asks for the room's name on stdin unless
//	                       --yes; the deletion bounded by --wait (default
//	                       1m); exit 4 for a missing room
//	inspect DATADIR        a stopped member's data dir, opened read-only:
//	                       room and incarnation, applied index and epoch,
//	                       running hash, last batch, local checkpoints,
//	                       re-seed history; a data dir a member still holds
//	                       is refused ("is a member still running on it?").
//	                       --export FILE also writes a summary of it (host,
//	                       dir, room, incarnation, applied position) for
//	                       reseed --from-summaries
//	channels ROOM          per channel: num, first, last, sealed, epoch,
//	                       batches, bytes, entries (the open channel's last
//	                       index, batches and bytes are read from its chain)
//	members ROOM           live members: id, addr, role, epoch, applied,
//	                       checkpoint, place in the election line, session,
//	                       "observer" for an observer (no place in the line);
//	                       a member whose data says primary while another
//	                       leads a newer epoch (replica.RoomView.Primary) is
//	                       marked DEPOSED, naming the one that replaced it
//	                       (JSON deposed, deposed_by): a killed primary's
//	                       node stays until its session expires;
//	                       a leadership transfer record if one exists (or
//	                       why it is malformed);
//	                       znodes under members/ and election/ that
//	                       replicas ignore are shown as FOREIGN, with why
//	dump ROOM [--from N] [--to N] [--no-ops]
//	                       one JSON object per entry and line: index, epoch,
//	                       channel, znode, size, data (base64) and, when the
//	                       entry is a valid store.OpsApplier entry, ops
//	verify ROOM            walks every channel and batch znode (see below);
//	                       exit 1 on any fault, 0 with a summary line
//	checkpoints ROOM       the checkpoint record of the room, the channels
//	                       it covers, each member's newest checkpoint and
//	                       the URL it is served at
//	room-version ROOM      the room version (replica.ReadRoomVersion): the
//	                       version, the index it applies since, the
//	                       operator's target (or none), whether the change
//	                       is complete (and if not, why), why the room is
//	                       not at the target (blocked), the room version of
//	                       the oldest channel, and a table of the live
//	                       members: id, role, applied index, the room
//	                       versions each supports (min..max). --json prints
//	                       room, version, since, target, blocked, complete,
//	                       incomplete (reasons, when not complete),
//	                       oldest_channel_version and members (id, addr,
//	                       role, epoch, applied, room_version_min,
//	                       room_version_max)
//	room-version ROOM --set N [--wait DURATION]
//	                       WRITES the room's target version N (see
//	                       "Writes"); N outside this binary's room versions
//	                       (version.RoomMin..RoomMax) is a usage error.
//	                       With --wait, polls the status until the room is
//	                       at N and complete (exit 0) or DURATION passes
//	                       (exit 1, with the last reason); default 0: no
//	                       wait. --json prints set, previous_target, wait,
//	                       reached and the status as above
//	reseed ROOM --from DATADIR[,DATADIR...] [--trust DATADIR] [--force]
//	                       [--room-version N] [--session-timeout D] [--dry-run]
//	                       WRITES: re-creates ROOM from its stopped
//	                       members' data dirs (replica.Reseed; see "Writes");
//	                       --json prints room, index, from, epoch, czxid,
//	                       previous, took_ms and survivors (dir, index,
//	                       epoch, hash, hash_base, batch, marker_czxid,
//	                       role: seed, adopted, bootstrap or left out, and
//	                       why). --dry-run makes the same checks, prints what
//	                       it would do (JSON dry_run, no czxid) and writes
//	                       nothing (ReseedConfig.DryRun). Its own flags
//	                       ('roomlog reseed -h'); exit 1 with the reason when
//	                       refused (nothing changed)
//	reseed ROOM --from-summaries FILE[,FILE...]
//	                       data dirs on several hosts: plans the re-seed
//	                       from each host's 'inspect --export' summary (no
//	                       ZooKeeper, writes nothing): the seed's host and
//	                       dir, each other data dir's role (adopted,
//	                       bootstrap: move it away, or disagrees: exit 1),
//	                       and the command to run on the seed's host
//	restore --archive DIR --room ROOM (--to-index N | --to-time T) --out DATADIR
//	                       point-in-time restore from an archive into a new
//	                       local data dir (archive.Restore); no ZooKeeper.
//	                       Its own flags ('roomlog restore -h')
//	version                this binary's release, commit, Go version and the
//	                       room versions it reads and writes (package
//	                       version); --json prints release, commit, modified,
//	                       go, room_min and room_max. It checks no flag about
//	                       ZooKeeper and connects to none. A binary built
//	                       with 'make build' knows its commit even when VCS
//	                       stamping is off (package version)
//
// Flags may appear anywhere on the line ("--" ends them). --zk defaults to
// $ROOMLOG_ZK, else 127.0.0.1:2181. Credentials for rooms with a digest ACL:
// --zk-digest-file FILE (or $ROOMLOG_ZK_DIGEST_FILE), a file holding
// user:password on one line; or $ROOMLOG_ZK_DIGEST=user:password. No flag
// takes a password (a command line is visible to every local user through
// ps): --digest is refused, a usage error saying so. The environment
// names of earlier releases (ZK, ROOMLOG_DIGEST_FILE,
// DFSMASTER_ZK_DIGEST_FILE, ROOMLOG_DIGEST) are still read, with a
// deprecation warning on stderr naming the replacement. --timeout (default
// 10s) bounds the wait for a ZooKeeper session; a wait longer than 2 s
// says every few seconds what it waits for, and the session timeout
// ZooKeeper granted is reported when it differs from the one asked for.
// reseed and restore show their progress on stderr (internal/cli.Progress):
// on a terminal one line redrawn with a bar when the total is known
// (restore: entries applied of the target), otherwise from 2 s on a line
// every 3 s naming the step (reseed: opening, comparing, waiting for the
// old room's live nodes to go, deleting, creating, rewriting markers).
// Tables are aligned text; --json prints one JSON document (dump always
// prints JSON lines).
//
// TLS to ZooKeeper (its secureClientPort; give those ports in --zk):
// --zk-tls-ca FILE verifies the servers against that CA (PEM) and the host
// of each --zk address, or --zk-tls-server-name NAME; --zk-tls-cert FILE
// and --zk-tls-key FILE present a client certificate, whose subject is the
// tool's x509 identity for the room's ACL. The files are validated before
// anything is dialed: a missing, non-PEM, mismatched, expired or untrusted
// file is a usage error naming it. --zk-acl-x509 ID (repeatable; "self" is
// --zk-tls-cert's subject) puts an x509 ACL entry for ID on every znode the
// tool creates (room-version --set, reseed), beside the digest entry of
// --zk-digest-file if any; without --zk-acl-x509 and without a digest, a
// tool with --zk-tls-cert creates with its own identity only ("self"), and
// only one with neither a certificate nor a digest creates world-open
// znodes. A room's znodes must be created with the ACL its members use.
// reseed takes the same flags.
//
// # Read-only
//
// Every command but the writes below calls only ZooKeeper's read
// operations (Get, Children, Exists, Sync). It does not use logroom.OpenRoom, which creates a missing room
// and base path, and it decodes no znode format itself: each is decoded by
// the package that owns it, through its read-only views — the room, epoch
// and channel metas by logroom (ReadRoomInfo, ReadEpoch, ListChannels,
// ReadChannel), members, election candidates, the transfer and checkpoint
// records by replica (ReadRoomView) — and batches by logroom.DecodeBatch.
// So the tool accepts and refuses exactly what readers, writers and
// replicas do, with their hardening: znode data is checked (one msgpack
// value, bounded nesting, every length within the input) before it is
// decoded, so a hostile znode costs memory linear in its size and no deep
// recursion. Each view waits at most --timeout for a ZooKeeper session.
//
// # Writes
//
// room-version ROOM --set N reads the room
// first (a missing room or a permission error is reported before anything
// is written; a missing room is never created), then calls
// replica.SetRoomVersionTarget, which creates or overwrites the persistent
// znode ROOM/version ({v:1, target, set}; replica package doc, "Znodes")
// with the ACL of the tool's credentials: for a room with a digest ACL,
// pass --zk-digest-file with the room's credentials, for one with x509
// entries --zk-tls-* with a certificate it names and the room's
// identities in --zk-acl-x509 (without them the write is refused,
// "permission denied"). It never moves the room itself:
// the primary moves it, with a fenced checkpoint, once every live member
// supports N; until then blocked names the members that do not (replica
// package doc, "Room version", which also describes the downgrade
// procedure). "Complete" is ReadRoomVersion's: the room at the target,
// every live member past the change, no channel of another room version
// left; only then may a binary that supports only N join (after a
// downgrade, an older release).
//
// acl ROOM --add/--remove IDENTITY sets the new ACL on every znode of a
// live room and adds (removes) the entries on the base; members
// configured for the old set and the new one work side by side during the
// change (their ACLIdentities may name digest identities as well as x509
// ones). It refuses a change that would leave a live member, or the tool
// itself, without an entry (--force does it anyway).
//
// transfer and checkpoint write a request into the room's operator znode
// (with the room's ACL, so they need write access to the room); the
// primary of the named epoch claims it, carries it out
// (replica.TransferLeadership, Replica.Checkpoint) and records the answer,
// which the tool waits for (--wait).
//
// delete-room reads the room znode (a missing room is exit 4; a tombstone
// or an unreadable room znode is deleted all the same, and said so),
// lists the ephemeral znodes under members/ and election/ (a persistent
// one there is foreign, not a member), refuses while any is left unless
// --force (a running member then finds its room gone, ErrRoomLost, and
// stops), asks for the room's name on stdin unless --yes (a wrong answer
// or none deletes nothing), then deletes the subtree children first
// (logroom.DeleteRoom) within --wait, saying every few seconds from 2 s
// on what it waits for. An interrupted deletion leaves part of the room,
// which no member accepts; running it again finishes it. The members'
// data dirs are not touched: reseed can re-create the room from them.
//
// reseed ROOM --from DATADIR,... is for disaster
// recovery only (replica package doc, "Disaster recovery"): with every
// member of the room stopped (their stores are opened read-only; a store
// a member still runs on is refused), it picks the seed, checks the other
// survivors are prefixes of its history, waits for the old room's live
// nodes to expire (refusing, naming them, if they stay), deletes what
// ZooKeeper still holds under the name (a tombstone, a rolled-back room,
// after the checks there), creates the room anew with its log at the
// seed's index + 1, records <room>/reseed and rewrites the survivors'
// member markers. It refuses, changing nothing, when the survivors
// disagree (--trust names the seed), when ZooKeeper's room still holds the
// seed's position, or holds entries no survivor applied (--force). With
// --dry-run it stops after the checks and the wait, before deleting,
// creating or rewriting anything, and prints what it would have done.
//
// A re-seed reads every survivor's store, so --from needs the data dirs on
// the host running it. When they are on several hosts, 'inspect DATADIR
// --export FILE' on each (members stopped) writes a summary of a few
// hundred bytes; gathered on one host, 'reseed ROOM --from-summaries
// FILE,...' chooses the seed as a re-seed would (highest epoch, then
// index) and classifies every other data dir from what the summaries can
// tell: at the seed's position (same batch and running hash: it adopts
// the re-seeded room when started), behind it (its data dir must be moved
// away; the member bootstraps from a peer's checkpoint), or another
// history at the seed's index (refused, exit 1: --trust on the host of the
// one to keep). It prints the command to run on the seed's host, from the
// seed's data dir alone; that run checks the seed's store again.
// (Summaries compare positions only: a survivor behind the seed is not
// checked against the seed's history, which is why it is moved away and
// bootstraps rather than adopted.)
//
// # What verify checks
//
//  1. The epoch znode decodes. Channel znode names are contiguous numbers
//     (only the oldest channels are ever deleted); foreign names under
//     channels/ are warnings.
//  2. Each channel meta decodes (version, first >= 1, last >= first-1);
//     its epoch is <= the room's and >= the previous channel's; only the
//     newest channel is open; channel N+1 starts at N's last index + 1.
//  3. Each channel's batch chain, as a reader follows it from the
//     channel's first index: every batch decodes (format version, CRC32C),
//     its first index equals its name, it holds >= 1 entry, its epoch is
//     the channel's, epochs never decrease along the log and never exceed
//     the room's, and no batch crosses a sealed channel's last index.
//  4. A sealed channel's chain reaches exactly its last index and holds
//     the batches and bytes its meta records; a missing batch is a gap.
//  5. Every listed batch name off the chain is classified: below the chain
//     position or inside a sealed range (a stray, overlapping or duplicate
//     batch): fault; past a sealed channel's last index (an orphan of a
//     deposed writer, ignored by readers): warning; past the open channel's
//     first hole (in flight, or an orphan the next takeover seals out):
//     warning.
//  6. Every child of members/ and election/ meets the rules replicas apply
//     (replica.ReadRoomView classifies them as replicas do: ephemeral,
//     name matching the body's id, a non-negative 10-digit sequence, data
//     that decodes, an address that parses, readable). A foreign one is a
//     warning naming the znode and the rule it breaks: replicas ignore it
//     for every decision, so the log is unaffected, but it was put there
//     by a foreign client or an operator's mistake and should be deleted.
//  7. No channel that is not being deleted lost a batch (its znode's child
//     version counts deletes; only a channel marked for deletion loses
//     batches).
//  8. The live members' running state hashes (replica package doc,
//     "Integrity"): members that publish a hash at the same index, of
//     chains with the same base, must publish the same one; a difference
//     is a fault naming the members, the index and the hashes. Members at
//     other indexes cannot be compared (a quiet room's members all publish
//     its last index); the summary says how many were compared. Live
//     members whose chains have different bases (stores written by a
//     version without the running hash) never compare: a warning.
//  9. No live member published an applied index (or a hash at an index)
//     beyond the log's end, read again before it is called a fault: the
//     log lost entries that member applied (ZooKeeper restored from an
//     older copy, or the room rolled back), though what remains is
//     well-formed. A fault naming the member, its index and the log's end.
//
// The members, rooms and checkpoints commands apply the same rules: rooms
// counts only accepted members, checkpoints lists only them.
//
// Every finding names the room, the channel and the znode. Findings go to
// stdout, then one summary line ("OK room …" or "FAILED room …").
//
// # Exit codes
//
// By class, the same in dfsmaster-demo (package internal/cli; 'roomlog
// --help' lists them):
//
//	0  success
//	1  a fault found by verify, or a failure of no class below (corrupt
//	   data met by dump, room-version --set --wait out of time, a refused
//	   reseed or transfer)
//	2  usage: unknown command, bad flag, bad room name, a room version
//	   outside this binary's range, a password flag
//	3  ZooKeeper unreachable (no session within --timeout, or lost)
//	4  room not found, or lost (a member's tombstone replaced it)
//	5  access denied (the room's ACL grants this client nothing, or a
//	   foreign ACL)
package main
