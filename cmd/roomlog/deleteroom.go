package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/roomlog/roomlog/zkx"
)

// stdin is where delete-room reads its confirmation (tests replace it).
var stdin io.Reader = os.Stdin

// defaultDeleteWait bounds delete-room's deletion when --wait is not given.
const defaultDeleteWait = time.Minute

const deleteRoomHelp = `usage: roomlog delete-room ROOM [--yes] [--force] [--wait DURATION] [--json]

WRITES: deletes ROOM and everything under it from ZooKeeper: its log, checkpoint
record, members and history. The members' data dirs are not touched (a member
started on one afterwards refuses: its room is gone; 'roomlog reseed' can
re-create the room from them).

Refused (exit 1) while the room has live members (ephemeral znodes under
members/ or election/: a running member would find its room deleted and stop)
unless --force. Asks for the room's name on stdin before deleting unless --yes;
anything else, or no answer, deletes nothing (exit 1). The deletion is bounded
by --wait (default 1m); an interrupted or timed-out deletion leaves part of the
room, which no member accepts: run it again. Exit 4 when ROOM does not exist.
`

// deleteRoomOut is what delete-room --json prints.
type deleteRoomOut struct {
	Room    string   `json:"room"`
	Deleted bool     `json:"deleted"`
	Was     string   `json:"was"`            // what the room znode held
	Live    []string `json:"live,omitempty"` // live member znodes (deleted with --force)
	TookMS  int64    `json:"took_ms"`
}

// cmdDeleteRoom is 'roomlog delete-room ROOM'.
func cmdDeleteRoom(ctx context.Context, in *inspector, o options, args []string, stdout, stderr io.Writer) error {
	room := args[0]
	root := logroom.RoomPath(in.base, room)
	out := deleteRoomOut{Room: room}
	rctx, cancel := in.bounded(ctx)
	info, err := logroom.ReadRoomInfo(rctx, in.c, in.base, room)
	cancel()
	switch {
	case errors.Is(err, logroom.ErrNoRoom):
		return fmt.Errorf("room %q: %w", room, err)
	case errors.Is(err, logroom.ErrRoomLost) && info.Lost != "":
		out.Was = fmt.Sprintf("room created at zxid 0x%x, marked lost: %s", info.Czxid, info.Lost)
	case errors.Is(err, logroom.ErrRoomLost):
		out.Was = "a tombstone (the room was lost): " + err.Error()
	case err != nil:
		if _, ok := malformed(err); !ok && !errors.Is(err, logroom.ErrCorrupt) {
			return zkErr("room "+room, err)
		}
		out.Was = "not a readable roomlog room: " + err.Error()
	default:
		out.Was = fmt.Sprintf("room created at zxid 0x%x", info.Czxid)
	}
	live, err := liveNodes(ctx, in, root)
	if err != nil {
		return err
	}
	out.Live = live
	if len(live) > 0 && !o.force {
		return fmt.Errorf("%w: room %q has live members (%s): stop them first, or pass --force (they then find their room deleted and stop)",
			errRefused, room, strings.Join(live, ", "))
	}
	if !o.yes {
		fmt.Fprintf(stderr, "roomlog delete-room: this deletes room %q (%s) and everything under %s", room, out.Was, root)
		if len(live) > 0 {
			fmt.Fprintf(stderr, ", with %d live member node(s)", len(live))
		}
		fmt.Fprintf(stderr, ".\nType the room's name to confirm: ")
		line, rerr := bufio.NewReader(stdin).ReadString('\n')
		if strings.TrimSpace(line) != room {
			fmt.Fprintln(stderr)
			if rerr != nil && strings.TrimSpace(line) == "" {
				return fmt.Errorf("%w: no confirmation on stdin (pass --yes to delete without asking); nothing deleted", errRefused)
			}
			return fmt.Errorf("%w: %q is not the room's name; nothing deleted", errRefused, strings.TrimSpace(line))
		}
	}
	wait := o.wait
	if wait == 0 {
		wait = defaultDeleteWait
	}
	dctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	what := fmt.Sprintf("the deletion of room %q (--wait %v)", room, wait)
	stop := progress(dctx, stderr, &what)
	start := time.Now()
	err = logroom.DeleteRoom(dctx, in.c, in.base, room)
	stop()
	out.TookMS = time.Since(start).Milliseconds()
	if err != nil {
		if dctx.Err() != nil && ctx.Err() == nil {
			return fmt.Errorf("room %q: not deleted within --wait %v, part of it may be left (no member accepts it; run delete-room again): %w", room, wait, err)
		}
		return fmt.Errorf("room %q: delete (part of it may be left; run delete-room again): %w", room, err)
	}
	out.Deleted = true
	if o.json {
		return writeJSON(stdout, out)
	}
	fmt.Fprintf(stdout, "room %s deleted (%s) in %v\n", room, out.Was, time.Duration(out.TookMS)*time.Millisecond)
	return nil
}

// liveNodes lists the ephemeral znodes under root's members/ and
// election/: the live members (a persistent znode there is foreign, not a
// member).
func liveNodes(ctx context.Context, in *inspector, root string) ([]string, error) {
	ctx, cancel := in.bounded(ctx)
	defer cancel()
	var live []string
	for _, dir := range []string{"members", "election"} {
		p := root + "/" + dir
		kids, err := zkx.Children(ctx, in.c, p)
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, zkErr("list "+p, err)
		}
		for _, k := range kids {
			_, st, err := zkx.Get(ctx, in.c, p+"/"+k)
			if errors.Is(err, zk.ErrNoNode) {
				continue
			}
			if err != nil {
				return nil, zkErr("read "+p+"/"+k, err)
			}
			if st.EphemeralOwner != 0 {
				live = append(live, fmt.Sprintf("%s/%s (session 0x%x)", dir, k, st.EphemeralOwner))
			}
		}
	}
	return live, nil
}
