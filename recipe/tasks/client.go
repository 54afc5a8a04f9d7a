package tasks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/recipe/internal/zkr"
	"github.com/roomlog/roomlog/zkx"
)

// checkArgs validates the arguments every call takes.
func checkArgs(c *zkx.Client, dir, id string) error {
	if c == nil {
		return fmt.Errorf("%w: nil client", ErrBadConfig)
	}
	if err := zkr.ValidDir(dir); err != nil {
		return fmt.Errorf("%w: dir %q: %v", ErrBadConfig, dir, err)
	}
	if err := validID(id); err != nil {
		return fmt.Errorf("%w: task id %q: %v", ErrBadConfig, id, err)
	}
	return nil
}

// Submit submits task id with data to the recipe in dir (creating the
// directories it needs). It is idempotent: if id was already submitted
// with the same data — waiting, assigned or finished with its result not
// yet deleted — it returns nil and writes nothing; with other data it
// returns ErrConflict. A create whose answer was lost is retried and
// resolved by reading back. Once id's result was deleted (DeleteResult,
// or the assigner's ResultTTL), the id is free: submitting it again runs
// the task again.
//
// Bounded: when DefaultMaxOpen tasks are waiting, or DefaultMaxOpen
// results are not yet deleted, Submit returns ErrTooMany; when the task
// would pass the byte bound of <dir>/tasks, or one more result that of
// <dir>/results, as the assigner published them (AssignerConfig
// MaxWaitingBytes, MaxFinishedBytes; package doc, "Bounds"), ErrFull.
// Both caps are soft by the number of concurrent submitters: each checks
// before it creates.
//
// Cost: a getData of the task node, a getChildren of <dir>/assign plus
// one getData per worker directory, a getData of the result node, a
// getData of <dir>/tasks and of <dir>/results for the caps, and one
// create.
func Submit(ctx context.Context, c *zkx.Client, dir, id string, data []byte) error {
	if err := checkArgs(c, dir, id); err != nil {
		return err
	}
	if len(data) > MaxDataBytes {
		return fmt.Errorf("%w: task %s: data of %d bytes, at most %d", ErrBadConfig, id, len(data), MaxDataBytes)
	}
	s := zkr.NewSession(c)
	defer s.Close()
	if err := submit(ctx, s, dir, id, data); err != nil {
		return fmt.Errorf("tasks: submit %s in %s: %w", id, dir, err)
	}
	return nil
}

func submit(ctx context.Context, s *zkr.Session, dir, id string, data []byte) error {
	for _, d := range []string{tasksDir, assignDir, resultsDir} {
		if err := zkx.EnsurePath(ctx, s, dir+"/"+d); err != nil {
			return err
		}
	}
	found, err := lookup(ctx, s, dir, id, data)
	if found || err != nil {
		return err
	}
	rec := zkr.Encode(taskRecord{V: formatVersion, ID: id, Data: data, Submitted: time.Now().UnixMilli()})
	p := dir + "/" + tasksDir + "/" + nodeName(id)
	if err := checkRoom(ctx, s, dir, tasksDir, maxTaskCost, nodeCost(nodeName(id), int32(len(rec)))); err != nil {
		return err
	}
	// Room for its result once it runs.
	if err := checkRoom(ctx, s, dir, resultsDir, maxResultCost, maxResultCost); err != nil {
		return err
	}
	// A create retried after a connection loss answers NodeExists if the
	// first one landed: read it back and compare.
	err = zkr.Retry0(ctx, s, func() error {
		_, err := s.Conn().Create(p, rec, 0, s.ACL())
		return err
	})
	if errors.Is(err, zk.ErrNodeExists) {
		found, err := lookup(ctx, s, dir, id, data)
		if err == nil && !found {
			return fmt.Errorf("%s exists but vanished: retry", p)
		}
		return err
	}
	return err
}

// lookup looks for id along the way a task moves (waiting, assigned,
// finished), in that order: a task moving meanwhile is found further on.
// found with a nil error means it is there with the same data.
func lookup(ctx context.Context, s *zkr.Session, dir, id string, data []byte) (found bool, err error) {
	name := nodeName(id)
	p := dir + "/" + tasksDir + "/" + name
	b, st, err := zkx.Get(ctx, s, p)
	switch {
	case err == nil:
		r, why := decodeTask(name, b, st)
		if why != "" {
			return true, fmt.Errorf("%w: %s: %s", ErrMalformed, p, why)
		}
		if !bytes.Equal(r.Data, data) {
			return true, fmt.Errorf("%w: %s is waiting with other data", ErrConflict, p)
		}
		return true, nil
	case !errors.Is(err, zk.ErrNoNode):
		return false, err
	}
	workers, err := zkx.Children(ctx, s, dir+"/"+assignDir)
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return false, err
	}
	for _, w := range workers {
		if zkx.ValidName(w) != nil {
			continue
		}
		ap := dir + "/" + assignDir + "/" + w + "/" + name
		b, st, err := zkx.Get(ctx, s, ap)
		switch {
		case errors.Is(err, zk.ErrNoNode):
			continue
		case err != nil:
			return false, err
		}
		r, why := decodeAssign(w, name, b, st)
		if why != "" {
			// Not an assignment: the assigner reports it and assigns
			// no task of this id to that worker.
			return true, fmt.Errorf("%w: %s: %s", ErrMalformed, ap, why)
		}
		if !bytes.Equal(r.Data, data) {
			return true, fmt.Errorf("%w: %s is assigned with other data", ErrConflict, ap)
		}
		return true, nil
	}
	rp := dir + "/" + resultsDir + "/" + name
	b, st, err = zkx.Get(ctx, s, rp)
	switch {
	case errors.Is(err, zk.ErrNoNode):
		return false, nil
	case err != nil:
		return false, err
	}
	r, why := decodeResult(name, b, st)
	if why != "" {
		return true, fmt.Errorf("%w: %s: %s", ErrMalformed, rp, why)
	}
	if !r.sameSum(data) {
		return true, fmt.Errorf("%w: %s holds the result of other data", ErrConflict, rp)
	}
	return true, nil
}

// ReadResult reads task id's result: ok is false when there is none (not
// finished, or deleted). A result node that breaks the format is
// ErrMalformed.
func ReadResult(ctx context.Context, c *zkx.Client, dir, id string) (Result, bool, error) {
	if err := checkArgs(c, dir, id); err != nil {
		return Result{}, false, err
	}
	s := zkr.NewSession(c)
	defer s.Close()
	r, ok, err := readResult(ctx, s, dir, id)
	if err != nil {
		return Result{}, false, fmt.Errorf("tasks: read result %s in %s: %w", id, dir, err)
	}
	return r, ok, nil
}

func readResult(ctx context.Context, s *zkr.Session, dir, id string) (Result, bool, error) {
	r, ok, err := readResultRecord(ctx, s, dir, id)
	return r.result(), ok, err
}

func readResultRecord(ctx context.Context, s *zkr.Session, dir, id string) (resultRecord, bool, error) {
	name := nodeName(id)
	p := dir + "/" + resultsDir + "/" + name
	b, st, err := zkx.Get(ctx, s, p)
	switch {
	case errors.Is(err, zk.ErrNoNode):
		return resultRecord{}, false, nil
	case err != nil:
		return resultRecord{}, false, err
	}
	r, why := decodeResult(name, b, st)
	if why != "" {
		return resultRecord{}, false, fmt.Errorf("%w: %s: %s", ErrMalformed, p, why)
	}
	return r, true, nil
}

// WaitResult waits until task id has a result and returns it, or until
// ctx ends. It arms an exists watch on the result node (the seed's
// watchStatus), re-armed after every event, connection loss and session
// expiry: a result created between a read and the re-arm is found by the
// exists that re-arms.
func WaitResult(ctx context.Context, c *zkx.Client, dir, id string) (Result, error) {
	if err := checkArgs(c, dir, id); err != nil {
		return Result{}, err
	}
	s := zkr.NewSession(c)
	defer s.Close()
	p := dir + "/" + resultsDir + "/" + nodeName(id)
	for {
		ok, _, ch, err := zkx.ExistsW(ctx, s, p)
		if err != nil {
			return Result{}, fmt.Errorf("tasks: wait result %s in %s: %w", id, dir, err)
		}
		if ok {
			r, found, err := readResult(ctx, s, dir, id)
			if err != nil {
				return Result{}, fmt.Errorf("tasks: wait result %s in %s: %w", id, dir, err)
			}
			if found {
				return r, nil
			}
			continue // deleted between the exists and the read
		}
		select {
		case <-ctx.Done():
			return Result{}, fmt.Errorf("tasks: wait result %s in %s: %w", id, dir, ctx.Err())
		case <-ch:
		}
	}
}

// DeleteResult deletes task id's result (read it first: it is gone for
// good). Deleting a result that is not there is nil.
func DeleteResult(ctx context.Context, c *zkx.Client, dir, id string) error {
	if err := checkArgs(c, dir, id); err != nil {
		return err
	}
	s := zkr.NewSession(c)
	defer s.Close()
	p := dir + "/" + resultsDir + "/" + nodeName(id)
	err := zkr.Retry0(ctx, s, func() error { return s.Conn().Delete(p, -1) })
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return fmt.Errorf("tasks: delete result %s in %s: %w", id, dir, err)
	}
	return nil
}
