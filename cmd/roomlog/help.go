package main

// Each command's own help ('roomlog COMMAND -h', 'roomlog help COMMAND'),
// printed to stdout; the flags common to every command are in
// 'roomlog --help'.

const roomsHelp = `usage: roomlog rooms [--json]

The rooms under --base: created, epoch, owner, channels, the first index still in
ZooKeeper, live members. A room this client may not read is listed as such; a room
a tombstone replaced (ZooKeeper lost it) is listed as LOST.
`

const channelsHelp = `usage: roomlog channels ROOM [--json]

Per channel of ROOM: number, first and last index, sealed or open, epoch, batches,
bytes, entries (the open channel's figures are read from its chain).
`

const membersHelp = `usage: roomlog members ROOM [--json]

The live members of ROOM: id, address, role, epoch, applied index, newest checkpoint,
place in the election line, session. A member whose data still says primary while
another live member leads a newer epoch is marked DEPOSED (a new primary took over;
its session has not expired yet, as for a while after a kill -9). Znodes under
members/ and election/ that replicas ignore are FOREIGN.
`

const dumpHelp = `usage: roomlog dump ROOM [--from INDEX] [--to INDEX] [--no-ops]

The entries of ROOM, one JSON object per line: index, epoch, channel, znode, size,
data (base64) and, for a store.OpsApplier entry, its ops.
`

const verifyHelp = `usage: roomlog verify ROOM [--json]

Walks every channel and batch znode of ROOM and compares the members' published
running hashes. Exit 1 on any fault (each one printed), 0 with a summary line.
`

const checkpointsHelp = `usage: roomlog checkpoints ROOM [--json]

The checkpoint record of ROOM, the sealed channels it covers, and each member's
newest checkpoint with the URL it is served at.
`

const roomVersionHelp = `usage: roomlog room-version ROOM [--json]
       roomlog room-version ROOM --set N [--wait DURATION]

The room version of ROOM, the index it applies since, the operator's target, whether
the change is complete and why not, and each live member's supported room versions.
WRITES with --set: records N as the room's target (the primary moves the room when
every live member supports it); --wait polls until the room is at N and complete
(exit 0) or DURATION passes (exit 1 with the reason).
`

const transferHelp = `usage: roomlog transfer ROOM [--to ID] [--wait DURATION] [--json]

WRITES: asks ROOM's primary to hand over to member ID (default: the live standby
that applied the most): a fenced, graceful failover (replica.TransferLeadership:
the primary stops accepting, drains, waits until ID applied everything, steps
down; ID takes over under a new epoch). The request travels through ZooKeeper
(the room's operator znode, with the room's ACL), so the tool needs write access to
the room (--zk-digest-file, or a --zk-tls-cert the room's ACL names) and no address
of the primary. Waits (at most --wait, default 1m, saying what it waits for every
few seconds) until the new primary's member data says it leads, and prints how
long the hand-over took. Exit 1 when the primary refused or failed (the reason is
printed), 4 when ROOM does not exist.
`

const checkpointHelp = `usage: roomlog checkpoint ROOM [--wait DURATION] [--json]

WRITES: asks ROOM's primary to checkpoint now (replica.Replica.Checkpoint: rotate
the log, checkpoint the state, record it, delete the channels it covers), like
'hdfs dfsadmin -saveNamespace'. The request travels through ZooKeeper as for
transfer. Waits at most --wait (default 1m) and prints the checkpoint's index.
`

const inspectHelp = `usage: roomlog inspect DATADIR [--json] [--export FILE]

A stopped member's data dir, opened read-only (needs no ZooKeeper): the room and
incarnation its marker names, the applied index and epoch, the running hash, the
identity of the last batch applied, the local checkpoints, and the re-seed history.
A data dir still locked by a running member is refused with "is a member still
running on it?". --export FILE also writes a summary of it (host, dir, room,
incarnation, applied position): gather the summaries of every host's data dir and
'roomlog reseed ROOM --from-summaries FILE,...' says which one to re-seed from.
`

const versionHelp = `usage: roomlog version [--json]
       roomlog --version

This binary's release, commit, Go version and the room versions it reads and
writes. Needs no ZooKeeper.
`
