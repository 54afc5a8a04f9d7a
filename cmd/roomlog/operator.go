package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/roomlog/roomlog/replica"
	"github.com/roomlog/roomlog/zkx"
)

// ---- transfer, checkpoint ----
//
// Both reach the room's primary through ZooKeeper (replica package doc,
// "Operator requests"): the tool writes the room's operator znode, the
// primary of the epoch it names answers in the same znode. The tool needs
// no address of the primary (the demo's HTTP API is the demo's; a room's
// members need not serve one), the room's ACL decides who may ask, and a
// deposed primary cannot act on a request meant for its successor.

// defaultRequestWait bounds transfer's and checkpoint's wait for the answer.
const defaultRequestWait = time.Minute

// progressEvery: a wait says what it waits for this often (after the
// first progressAfter).
const (
	progressAfter = 2 * time.Second
	progressEvery = 3 * time.Second
)

// requestOut is what transfer and checkpoint print with --json.
type requestOut struct {
	Room       string `json:"room"`
	Kind       string `json:"kind"`
	ID         string `json:"id"`
	Epoch      uint64 `json:"epoch"`
	By         string `json:"by"`
	To         string `json:"to,omitempty"`
	NewPrimary string `json:"new_primary,omitempty"`
	NewEpoch   uint64 `json:"new_epoch,omitempty"`
	Index      uint64 `json:"index"`
	// TookMS: from the submission until the answer (checkpoint) or until
	// the new primary said it leads (transfer).
	TookMS int64 `json:"took_ms"`
}

func cmdTransfer(ctx context.Context, in *inspector, o options, args []string, stdout, stderr io.Writer) error {
	return runRequest(ctx, in, o, args[0], replica.OperatorRequest{Kind: replica.RequestTransfer, To: o.toMember}, stdout, stderr)
}

func cmdCheckpoint(ctx context.Context, in *inspector, o options, args []string, stdout, stderr io.Writer) error {
	return runRequest(ctx, in, o, args[0], replica.OperatorRequest{Kind: replica.RequestCheckpoint}, stdout, stderr)
}

func runRequest(ctx context.Context, in *inspector, o options, room string, req replica.OperatorRequest, stdout, stderr io.Writer) error {
	rv, _, err := in.room(ctx, room)
	if err != nil {
		return err
	}
	wait := o.wait
	if wait == 0 {
		wait = defaultRequestWait
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	v, err := rv.replicaView(ctx)
	if err != nil {
		return err
	}
	em, err := rv.epoch(ctx)
	if err != nil {
		return err
	}
	primary := ""
	for _, m := range v.Live() {
		if m.Role == replica.RolePrimary && m.Epoch == em.Epoch {
			primary = m.ID
		}
		if req.To != "" && m.ID == req.To && m.Observer {
			return fmt.Errorf("%w: member %q is an observer: it never leads", errRefused, req.To)
		}
	}
	if req.To != "" && !memberLive(v.Live(), req.To) {
		return fmt.Errorf("%w: %q is not a live member of room %q (see 'roomlog members %s')", errRefused, req.To, room, room)
	}
	if primary == "" {
		return fmt.Errorf("%w: room %q has no primary at epoch %d to ask (see 'roomlog members %s')", errRefused, room, em.Epoch, room)
	}
	if req.To == primary {
		return fmt.Errorf("%w: %q is already the primary", errRefused, req.To)
	}
	req.Epoch = em.Epoch
	start := time.Now()
	sent, err := replica.SubmitRequest(ctx, in.c, in.base, room, req)
	if err != nil {
		return zkErr("", err)
	}
	// Whatever happens next, the request does not outlive the tool's wait.
	defer func() {
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), in.timeout)
		_ = replica.ClearRequest(cctx, in.c, in.base, room, sent.ID)
		ccancel()
	}()
	what := fmt.Sprintf("primary %s (epoch %d) to answer the %s request", primary, em.Epoch, req.Kind)
	var ans replica.OperatorRequest
	err = poll(ctx, stderr, &what, func() (bool, error) {
		a, ok, err := replica.ReadRequest(ctx, in.c, in.base, room)
		if err != nil || !ok || a.ID != sent.ID {
			if err == nil && (!ok || a.ID != sent.ID) {
				err = fmt.Errorf("the request znode was deleted or replaced by another client")
			}
			return false, err
		}
		ans = a
		if a.State == replica.RequestRunning {
			what = fmt.Sprintf("primary %s to finish the %s", a.By, req.Kind)
		}
		return a.State == replica.RequestDone || a.State == replica.RequestFailed, nil
	})
	if err != nil {
		if ans.State == replica.RequestRunning {
			// Claimed: the primary carries it out within its own bounds
			// (longer than this wait); deleting the request does not stop it.
			return fmt.Errorf("room %q: waiting for %s: %w (the outcome is unknown: the %s may still complete; see 'roomlog members %s')", room, what, err, req.Kind, room)
		}
		return fmt.Errorf("room %q: waiting for %s: %w", room, what, err)
	}
	if ans.State == replica.RequestFailed {
		return fmt.Errorf("room %q: %s refused or failed the %s: %s", room, ans.By, req.Kind, ans.Error)
	}
	out := requestOut{Room: room, Kind: req.Kind, ID: sent.ID, Epoch: em.Epoch, By: ans.By, To: req.To, Index: ans.Index}
	if req.Kind == replica.RequestTransfer {
		out.NewPrimary = ans.NewPrimary
		what = fmt.Sprintf("%s to lead at an epoch above %d", ans.NewPrimary, em.Epoch)
		err = poll(ctx, stderr, &what, func() (bool, error) {
			v, err := rv.replicaView(ctx)
			if err != nil {
				return false, err
			}
			for _, m := range v.Live() {
				if m.ID == ans.NewPrimary && m.Role == replica.RolePrimary && m.Epoch > em.Epoch {
					out.NewEpoch = m.Epoch
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("room %q: waiting for %s: %w", room, what, err)
		}
	}
	out.TookMS = time.Since(start).Milliseconds()
	if o.json {
		return writeJSON(stdout, out)
	}
	switch req.Kind {
	case replica.RequestTransfer:
		fmt.Fprintf(stdout, "room %s: leadership transferred from %s (epoch %d) to %s (epoch %d) in %v; last index of the old epoch %d\n",
			room, out.By, out.Epoch, out.NewPrimary, out.NewEpoch, time.Duration(out.TookMS)*time.Millisecond, out.Index)
	default:
		fmt.Fprintf(stdout, "room %s: %s checkpointed at index %d in %v\n", room, out.By, out.Index, time.Duration(out.TookMS)*time.Millisecond)
	}
	return nil
}

// progress says on stderr what the caller waits for (*what, read when
// printed), from progressAfter on and every progressEvery, until the
// returned func is called or ctx ends.
func progress(ctx context.Context, stderr io.Writer, what *string) func() {
	return zkx.Periodic(ctx, progressAfter, progressEvery, func(waited time.Duration) {
		fmt.Fprintf(stderr, "roomlog: waiting %v for %s\n", waited.Round(time.Second), *what)
	})
}

func memberLive(ms []replica.MemberStatus, id string) bool {
	for _, m := range ms {
		if m.ID == id {
			return true
		}
	}
	return false
}

// poll calls done every 100 ms until it says so, fails, or ctx ends; from
// progressAfter on, it says on stderr every progressEvery what it waits
// for (*what, which done may change).
func poll(ctx context.Context, stderr io.Writer, what *string, done func() (bool, error)) error {
	start := time.Now()
	next := start.Add(progressAfter)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := done()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		if ok {
			return nil
		}
		if now := time.Now(); now.After(next) {
			fmt.Fprintf(stderr, "roomlog: waiting %v for %s\n", now.Sub(start).Round(time.Second), *what)
			next = now.Add(progressEvery)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no answer within --wait (%v): %w", time.Since(start).Round(time.Millisecond), ctx.Err())
		case <-tick.C:
		}
	}
}
