package replica

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/logroom"
)

// TestCoreScenarios runs the scripts in testdata/core: each command feeds
// one event to a core (or asks a pure decision) and the expected output is
// the actions the core returned, one per line. Run with -rewrite to
// regenerate the expected outputs after a deliberate change, then read the
// diff.
//
// Commands (times are offsets from the scenario's start; errors by name:
// fenced, corrupt, diverged, canceled, fatal, other):
//
//	new id=a [session-timeout=4s] [sid=1] [link-bound=D] [room=NAME] [rv=LO-HI]
//	session state=connected|disconnected|expired|connecting [sid=N] t=D
//	tick t=D
//	watch [gen=N | stale]
//	election [lowest] [not-ready] t=D [err=E]
//	         [transfer-to=ID transfer-in=D transfer-epoch=N [transfer-live] room-epoch=N]
//	         [oldest-first=N applied=N others=N,N] [lag-bound=N]
//	takeover-done t=D [err=E]
//	tail-stopped applied=N start=N epoch=N [err=E]
//	writer-failed epoch=N [fenced]
//	request step-down|transfer epoch=N [to=ID]
//	transfer-written to=ID [epoch=N] [err=E]   (epoch: the current term's when absent)
//	applier-exit [err=E]
//	fail err=E
//	held t=D [persistent] [err=E]
//	resigned [err=E]
//	link-probed t=D [gen=N] [err=E]   (gen: the current connection's when absent)
//	probed t=D [reached] [lost]
//	room-version meta=N [lowering] [since=N] [target=N] [max-channel=N]
//	             [members=id:lo-hi:applied,...] [meta-err=unsupported|corrupt] [target-err]
//	moved to=N [err=E]
//	state
//	deletions ckpt=N served=N min-applied=N [retain=N] channels=num:first-last:sealed:bytes,...
func TestCoreScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata/core", func(t *testing.T, path string) {
		var c *core
		base := time.Unix(1_000_000, 0)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd != "new" && d.Cmd != "deletions" && c == nil {
				d.Fatalf(t, "%s before new", d.Cmd)
			}
			var acts []action
			switch d.Cmd {
			case "new":
				id, st, sid := "a", 4*time.Second, int64(1)
				scanArg(t, d, "id", &id)
				scanDur(t, d, "session-timeout", &st)
				scanInt(t, d, "sid", &sid)
				c = newCore(id, st, sid)
				scanDur(t, d, "link-bound", &c.linkBound)
				c.room = "r"
				scanArg(t, d, "room", &c.room)
				c.rv = rvIdentity{Lo: 1, Hi: 2, Release: "v9.9.9", RoomPath: "/roomlog/r"}
				if d.HasArg("rv") {
					var rv string
					d.ScanArgs(t, "rv", &rv)
					c.rv.Lo, c.rv.Hi = parseRange(t, d, rv)
				}
				return coreState(c)
			case "session":
				var state string
				sid := c.sessionID
				d.ScanArgs(t, "state", &state)
				scanInt(t, d, "sid", &sid)
				states := map[string]zk.State{"connected": zk.StateHasSession, "disconnected": zk.StateDisconnected,
					"expired": zk.StateExpired, "connecting": zk.StateConnecting}
				s, ok := states[state]
				if !ok {
					d.Fatalf(t, "unknown state %q", state)
				}
				acts = c.Step(evSession{Now: at(t, d, base), State: s, SessionID: sid})
			case "tick":
				acts = c.Step(evTick{Now: at(t, d, base)})
			case "watch":
				gen := c.watchGen
				if d.HasArg("stale") {
					gen--
				}
				scanUint(t, d, "gen", &gen)
				acts = c.Step(evWatch{Gen: gen})
			case "election":
				now := at(t, d, base)
				f := electionFacts{Leader: d.HasArg("lowest"), ApplierReady: !d.HasArg("not-ready"), Now: now}
				if d.HasArg("transfer-to") {
					rec := transferRecord{}
					d.ScanArgs(t, "transfer-to", &rec.To)
					in := time.Second
					scanDur(t, d, "transfer-in", &in)
					rec.Deadline = now.Add(in).UnixMilli()
					scanUint(t, d, "transfer-epoch", &rec.Epoch)
					f.Transfer, f.TransferToLive = &rec, d.HasArg("transfer-live")
					scanUint(t, d, "room-epoch", &f.RoomEpoch)
				}
				scanUint(t, d, "oldest-first", &f.OldestFirst)
				scanUint(t, d, "applied", &f.Applied)
				scanUint(t, d, "lag-bound", &f.LagBound)
				if d.HasArg("others") {
					var others string
					d.ScanArgs(t, "others", &others)
					for _, o := range strings.Split(others, ",") {
						f.OthersApplied = append(f.OthersApplied, parseUint(t, d, o))
					}
				}
				acts = c.Step(evElection{Facts: f, Err: namedErr(t, d)})
			case "takeover-done":
				acts = c.Step(evTakeoverDone{Now: at(t, d, base), Err: namedErr(t, d)})
			case "tail-stopped":
				var ev evTailStopped
				d.ScanArgs(t, "applied", &ev.Applied)
				d.ScanArgs(t, "start", &ev.Start)
				d.ScanArgs(t, "epoch", &ev.Epoch)
				ev.Err = namedErr(t, d)
				acts = c.Step(ev)
			case "writer-failed":
				ev := evWriterFailed{Fenced: d.HasArg("fenced")}
				d.ScanArgs(t, "epoch", &ev.Epoch)
				if ev.Fenced {
					ev.Err = logroom.ErrFenced
				} else {
					ev.Err = logroom.ErrOutcomeUnknown
				}
				acts = c.Step(ev)
			case "deposed":
				ev := evDeposed{}
				d.ScanArgs(t, "epoch", &ev.Epoch)
				d.ScanArgs(t, "reason", &ev.Reason)
				acts = c.Step(ev)
			case "request":
				ev := evRequest{}
				switch {
				case d.HasArg("step-down"):
					ev.Kind = reqStepDown
				case d.HasArg("transfer"):
					ev.Kind = reqTransfer
				default:
					d.Fatalf(t, "request: step-down or transfer")
				}
				d.ScanArgs(t, "epoch", &ev.Epoch)
				scanArg(t, d, "to", &ev.To)
				acts = c.Step(ev)
			case "transfer-written":
				ev := evTransferWritten{Err: namedErr(t, d), Epoch: c.epoch}
				d.ScanArgs(t, "to", &ev.To)
				scanUint(t, d, "epoch", &ev.Epoch)
				acts = c.Step(ev)
			case "applier-exit":
				acts = c.Step(evApplierExit{Err: namedErr(t, d)})
			case "fail":
				acts = c.Step(evFail{Err: namedErr(t, d)})
			case "held":
				acts = c.Step(evHeld{Now: at(t, d, base), Persistent: d.HasArg("persistent"), Err: namedErr(t, d)})
			case "resigned":
				acts = c.Step(evResigned{Err: namedErr(t, d)})
				acts = append(acts, c.resignDue(at(t, d, base))...)
			case "marked":
				acts = c.Step(evMarked{Now: at(t, d, base), Err: namedErr(t, d)})
			case "link-probed":
				gen := c.watchGen
				scanUint(t, d, "gen", &gen)
				acts = c.Step(evLinkProbed{Now: at(t, d, base), Gen: gen, Err: namedErr(t, d)})
			case "probed":
				ev := evProbed{Now: at(t, d, base), Reached: d.HasArg("reached")}
				if d.HasArg("lost") {
					ev.Reached, ev.Verdict = true, fmt.Errorf("%w: ZooKeeper has no room", ErrRoomLost)
				}
				acts = c.Step(ev)
			case "room-version":
				ev := evRoomVersion{Members: map[string]memberVersions{}}
				var v, target, maxCh uint64
				scanUint(t, d, "meta", &v)
				scanUint(t, d, "target", &target)
				scanUint(t, d, "max-channel", &maxCh)
				scanUint(t, d, "since", &ev.Meta.Since)
				ev.Meta.Version, ev.Target, ev.MaxChannel = int(v), int(target), int(maxCh)
				ev.Meta.Lowering = d.HasArg("lowering")
				if d.HasArg("meta-err") {
					var name string
					d.ScanArgs(t, "meta-err", &name)
					if name == "unsupported" {
						ev.MetaErr = fmt.Errorf("logroom: %w: room meta record 9", ErrUnsupportedVersion)
					} else {
						ev.MetaErr = fmt.Errorf("logroom: %w: room meta does not decode", logroom.ErrCorrupt)
					}
				}
				if d.HasArg("target-err") {
					ev.TargetErr = errors.New("replica: room version target /roomlog/r/version: format 7, target 0: malformed")
				}
				if d.HasArg("members") {
					var ms string
					d.ScanArgs(t, "members", &ms)
					for _, m := range strings.Split(ms, ",") {
						f := strings.Split(m, ":")
						if len(f) != 3 {
							d.Fatalf(t, "member %q: want id:lo-hi:applied", m)
						}
						lo, hi := parseRange(t, d, f[1])
						ev.Members[f[0]] = memberVersions{Lo: lo, Hi: hi, Applied: parseUint(t, d, f[2])}
					}
				}
				acts = c.Step(ev)
			case "moved":
				ev := evRoomVersionMoved{Err: namedErr(t, d)}
				var to uint64
				scanUint(t, d, "to", &to)
				ev.To = int(to)
				acts = c.Step(ev)
			case "state":
				return coreState(c)
			case "deletions":
				return runDeletions(t, d)
			default:
				d.Fatalf(t, "unknown command %q", d.Cmd)
			}
			var b strings.Builder
			for _, a := range acts {
				b.WriteString(a.String())
				b.WriteByte('\n')
			}
			if b.Len() == 0 {
				return "(no actions)\n"
			}
			return b.String()
		})
	})
}

// coreState prints the core's state in one line.
func coreState(c *core) string {
	flags := []string{}
	for _, f := range []struct {
		on   bool
		name string
	}{{c.connected, "connected"}, {c.electionDirty, "election-due"}, {c.failed, "failed"}, {c.resigned, "resigned"},
		{c.linkCut, "reads-refused"}, {!c.linkSent.IsZero(), "link-probe-out"}, {c.probeOut, "probe-out"}, {c.versionMoving, "moving-room-version"}} {
		if f.on {
			flags = append(flags, f.name)
		}
	}
	return fmt.Sprintf("role=%s epoch=%d session=0x%x gen=%d %s\n", c.role, c.epoch, c.sessionID, c.watchGen, strings.Join(flags, " "))
}

func runDeletions(t *testing.T, d *datadriven.TestData) string {
	var ckpt, served, minApplied, hold uint64
	var retain int64
	if d.HasArg("hold") {
		d.ScanArgs(t, "hold", &hold)
	}
	d.ScanArgs(t, "ckpt", &ckpt)
	d.ScanArgs(t, "served", &served)
	d.ScanArgs(t, "min-applied", &minApplied)
	scanInt(t, d, "retain", &retain)
	var spec string
	d.ScanArgs(t, "channels", &spec)
	var chans []logroom.ChannelInfo
	for _, cs := range strings.Split(spec, ",") {
		f := strings.Split(cs, ":")
		if len(f) != 4 {
			d.Fatalf(t, "channel %q: want num:first-last:sealed|open:bytes", cs)
		}
		r := strings.Split(f[1], "-")
		if len(r) != 2 {
			d.Fatalf(t, "channel %q: range %q", cs, f[1])
		}
		bytes, err := strconv.ParseInt(f[3], 10, 64)
		if err != nil {
			d.Fatalf(t, "channel %q: %v", cs, err)
		}
		chans = append(chans, logroom.ChannelInfo{Num: parseUint(t, d, f[0]), FirstIndex: parseUint(t, d, r[0]),
			LastIndex: parseUint(t, d, r[1]), Sealed: f[2] == "sealed", Bytes: bytes, Batches: 1})
	}
	out := decideDeletions(chans, ckpt, served, minApplied, hold, retain)
	if len(out) == 0 {
		return "keep all\n"
	}
	var b strings.Builder
	for _, del := range out {
		fmt.Fprintf(&b, "delete %d", del.Num)
		if del.Forced {
			b.WriteString(" (forced: a live member has not applied it)")
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// namedErr is the err=NAME argument (nil when absent).
func namedErr(t *testing.T, d *datadriven.TestData) error {
	if !d.HasArg("err") {
		return nil
	}
	var name string
	d.ScanArgs(t, "err", &name)
	switch name {
	case "fenced":
		return fmt.Errorf("takeover: %w", logroom.ErrFenced)
	case "corrupt":
		return fmt.Errorf("chain: %w", logroom.ErrCorrupt)
	case "diverged":
		return fmt.Errorf("log: %w", logroom.ErrDiverged)
	case "canceled":
		return context.Canceled
	case "fatal":
		return fatal(errors.New("apply failed"))
	case "stalled":
		return errors.New("disk stalled")
	case "duplicate":
		return errors.New("held by session 0x99")
	default:
		return errors.New(name)
	}
}

func at(t *testing.T, d *datadriven.TestData, base time.Time) time.Time {
	var dur time.Duration
	scanDur(t, d, "t", &dur)
	return base.Add(dur)
}

func scanArg(t *testing.T, d *datadriven.TestData, key string, dst *string) {
	if d.HasArg(key) {
		d.ScanArgs(t, key, dst)
	}
}

// scanParsed sets *dst to key's value parsed by parse, when key is given.
func scanParsed[T any](t *testing.T, d *datadriven.TestData, key string, dst *T, parse func(string) (T, error)) {
	if !d.HasArg(key) {
		return
	}
	var s string
	d.ScanArgs(t, key, &s)
	v, err := parse(s)
	if err != nil {
		d.Fatalf(t, "%s: %v", key, err)
	}
	*dst = v
}

func scanDur(t *testing.T, d *datadriven.TestData, key string, dst *time.Duration) {
	scanParsed(t, d, key, dst, time.ParseDuration)
}

func scanInt(t *testing.T, d *datadriven.TestData, key string, dst *int64) {
	scanParsed(t, d, key, dst, func(s string) (int64, error) { return strconv.ParseInt(s, 0, 64) })
}

func scanUint(t *testing.T, d *datadriven.TestData, key string, dst *uint64) {
	scanParsed(t, d, key, dst, func(s string) (uint64, error) { return strconv.ParseUint(s, 0, 64) })
}

// parseRange parses "LO-HI".
func parseRange(t *testing.T, d *datadriven.TestData, s string) (lo, hi int) {
	f := strings.Split(s, "-")
	if len(f) != 2 {
		d.Fatalf(t, "range %q: want LO-HI", s)
	}
	return int(parseUint(t, d, f[0])), int(parseUint(t, d, f[1]))
}

func parseUint(t *testing.T, d *datadriven.TestData, s string) uint64 {
	v, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		d.Fatalf(t, "%q: %v", s, err)
	}
	return v
}
