package zkr

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"

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
// when the node is gone, or is foreign: unreadable, or refused by accept
// (the reason is recorded in foreign). what names the node in errors.
func ReadAccepted[T any](ctx context.Context, s *Session, dir string, sn SeqNode, what string, foreign map[string]string,
	accept func(SeqNode, []byte, *zk.Stat) (T, string)) (v T, ok bool, err error) {
	p := dir + "/" + sn.Name
	b, st, err := zkx.Get(ctx, s, p)
	switch {
	case errors.Is(err, zk.ErrNoNode):
		return v, false, nil
	case errors.Is(err, zk.ErrNoAuth):
		foreign[p] = "unreadable: its ACL denies this client READ"
		return v, false, nil
	case err != nil:
		return v, false, fmt.Errorf("read %s %s: %w", what, sn.Name, err)
	}
	v, reason := accept(sn, b, st)
	if reason != "" {
		foreign[p] = reason
		return v, false, nil
	}
	return v, true, nil
}
