package zkr

import (
	"context"

	"github.com/go-zookeeper/zk"
)

// Reads and watches, retried on connection loss until ctx ends (each is
// idempotent). A watch armed by one of them fires once: a zk.Event of the
// node, or EventNotWatching when the session expires.

// Get reads path's data and Stat.
func Get(ctx context.Context, s *Session, path string) ([]byte, *zk.Stat, error) {
	type r struct {
		b  []byte
		st *zk.Stat
	}
	v, err := Retry(ctx, s, func() (r, error) {
		b, st, err := s.Conn().Get(path)
		return r{b, st}, err
	})
	return v.b, v.st, err
}

// Exists reports whether path exists, with its Stat.
func Exists(ctx context.Context, s *Session, path string) (bool, *zk.Stat, error) {
	type r struct {
		ok bool
		st *zk.Stat
	}
	v, err := Retry(ctx, s, func() (r, error) {
		ok, st, err := s.Conn().Exists(path)
		return r{ok, st}, err
	})
	return v.ok, v.st, err
}

// ExistsW is Exists that also arms a watch on path (creation, deletion,
// data change).
func ExistsW(ctx context.Context, s *Session, path string) (bool, *zk.Stat, <-chan zk.Event, error) {
	type r struct {
		ok bool
		st *zk.Stat
		ch <-chan zk.Event
	}
	v, err := Retry(ctx, s, func() (r, error) {
		ok, st, ch, err := s.Conn().ExistsW(path)
		return r{ok, st, ch}, err
	})
	return v.ok, v.st, v.ch, err
}

// Children lists path's children.
func Children(ctx context.Context, s *Session, path string) ([]string, error) {
	return Retry(ctx, s, func() ([]string, error) {
		names, _, err := s.Conn().Children(path)
		return names, err
	})
}

// ChildrenW lists path's children and arms a child watch in the same
// request: a change after this listing fires it, so a caller that diffs
// each listing against the previous one misses nothing.
func ChildrenW(ctx context.Context, s *Session, path string) ([]string, <-chan zk.Event, error) {
	type r struct {
		names []string
		ch    <-chan zk.Event
	}
	v, err := Retry(ctx, s, func() (r, error) {
		names, _, ch, err := s.Conn().ChildrenW(path)
		return r{names, ch}, err
	})
	return v.names, v.ch, err
}
