package zkr

import (
	"context"
	"errors"
	"fmt"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/zkx"
)

// ParseListing turns a listing of dir into the prefix-named sequential
// nodes it holds, sorted by sequence. A name that does not parse is
// recorded in foreign (full path → reason); skip (if not "") is ignored.
// Entries of cache whose name is no longer listed are deleted.
func ParseListing[T any](dir, prefix string, names []string, skip string, cache map[string]T, foreign map[string]string) []SeqNode {
	var nodes []SeqNode
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		if skip != "" && n == skip {
			continue
		}
		sn, err := ParseSeqNode(prefix, n)
		if err != nil {
			foreign[dir+"/"+n] = err.Error()
			continue
		}
		seen[n] = true
		nodes = append(nodes, sn)
	}
	for n := range cache {
		if !seen[n] {
			delete(cache, n)
		}
	}
	SortBySeq(nodes)
	return nodes
}

// ReadAccepted reads node sn of dir and checks it with accept. ok is false
// when the node is gone, or is foreign: refused by accept (the reason is
// recorded in foreign). what names the node in errors.
//
// A node whose ACL denies this client READ is not foreign for that: it is
// most likely a contender of a client with other credentials, and
// ignoring it would let two holders each believe they are first. Its Stat
// comes from Exists, which needs no permission on the node, and accept
// decides on it with readable false and data nil.
func ReadAccepted[T any](ctx context.Context, s *Session, dir string, sn SeqNode, what string, foreign map[string]string,
	accept func(sn SeqNode, data []byte, st *zk.Stat, readable bool) (T, string)) (v T, ok bool, err error) {
	p := dir + "/" + sn.Name
	readable := true
	b, st, err := zkx.Get(ctx, s, p)
	if errors.Is(err, zk.ErrNoAuth) {
		readable, b = false, nil
		var exists bool
		exists, st, err = zkx.Exists(ctx, s, p)
		if err == nil && !exists {
			return v, false, nil
		}
	}
	switch {
	case errors.Is(err, zk.ErrNoNode):
		return v, false, nil
	case err != nil:
		return v, false, fmt.Errorf("read %s %s: %w", what, sn.Name, err)
	}
	v, reason := accept(sn, b, st, readable)
	if reason != "" {
		foreign[p] = reason
		return v, false, nil
	}
	return v, true, nil
}
