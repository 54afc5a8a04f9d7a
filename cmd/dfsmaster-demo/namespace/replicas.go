package namespace

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
)

// Block placement: which chunk servers hold each block (the master's
// re-replication keeps every block at its file's replication factor).
//
//	ns/r/<8-byte block id>   version byte (1), msgpack {rf, servers, gen}:
//	                         the file's replication factor when the block
//	                         was placed, the chunk servers holding the
//	                         block (sorted, no duplicates), and how many
//	                         times the list changed since it was placed
//
// Only blocks added with servers (addblock with Servers, which the demo's
// master proposes when chunk servers are registered) have one; blocks of
// a namespace without chunk servers have none and are never reported
// under-replicated.

var prefixReplicas = []byte("ns/r/")

const replicasVersion byte = 1

// MaxServerName bounds a chunk server's name in a command.
const MaxServerName = 128

// Placement is one block's record.
type Placement struct {
	Block   uint64   `msgpack:"-" json:"block"`
	RF      int      `msgpack:"rf" json:"rf"`
	Servers []string `msgpack:"servers" json:"servers"`
	// Gen counts the changes of Servers since the block was placed: a
	// re-replication task named after it is new for each change.
	Gen uint64 `msgpack:"gen,omitempty" json:"gen"`
}

// UnderReplicated: fewer servers than the replication factor.
func (p Placement) UnderReplicated() bool { return len(p.Servers) < p.RF }

func replicasKey(block uint64) []byte {
	return binary.BigEndian.AppendUint64(append([]byte(nil), prefixReplicas...), block)
}

func encodePlacement(p Placement) ([]byte, error) {
	b, err := marshal(p)
	if err != nil {
		return nil, fmt.Errorf("namespace: encode placement: %w", err)
	}
	return append([]byte{replicasVersion}, b...), nil
}

func decodePlacement(key, val []byte) (Placement, error) {
	if len(key) != len(prefixReplicas)+8 {
		return Placement{}, fmt.Errorf("%w: placement key %q", ErrCorrupt, key)
	}
	if len(val) == 0 || val[0] != replicasVersion {
		return Placement{}, fmt.Errorf("%w: placement key %q: value of %d bytes without version %d", ErrCorrupt, key, len(val), replicasVersion)
	}
	var p Placement
	if err := decodeStrict(val[1:], &p); err != nil {
		return Placement{}, fmt.Errorf("%w: placement key %q: %v", ErrCorrupt, key, err)
	}
	p.Block = binary.BigEndian.Uint64(key[len(prefixReplicas):])
	return p, nil
}

// validServers checks a list of chunk server names: non-empty, bounded,
// no duplicates.
func validServers(op string, servers []string) error {
	if len(servers) > MaxReplication {
		return reject(ErrBadRequest, "%s: %d servers (max %d)", op, len(servers), MaxReplication)
	}
	seen := map[string]bool{}
	for _, s := range servers {
		if err := validServer(op, s); err != nil {
			return err
		}
		if seen[s] {
			return reject(ErrBadRequest, "%s: server %q listed twice", op, s)
		}
		seen[s] = true
	}
	return nil
}

func validServer(op, s string) error {
	if s == "" || len(s) > MaxServerName {
		return reject(ErrBadRequest, "%s: server name of %d bytes (1..%d)", op, len(s), MaxServerName)
	}
	if s == "." || s == ".." {
		return reject(ErrBadRequest, "%s: server name %q", op, s)
	}
	for _, r := range s {
		// A chunk server's name is its znode name: letters, digits and
		// "-_.:" only.
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.:", r)) {
			return reject(ErrBadRequest, "%s: server name %q: only letters, digits and -_.: are allowed", op, s)
		}
	}
	return nil
}

// setPlacement writes p (servers sorted).
func setPlacement(b Batch, p Placement) error {
	p.Servers = slices.Clone(p.Servers)
	slices.Sort(p.Servers)
	v, err := encodePlacement(p)
	if err != nil {
		return err
	}
	key := replicasKey(p.Block)
	if err := b.Set(key, v); err != nil {
		return fmt.Errorf("namespace: set %q: %w", key, err)
	}
	return nil
}

// getPlacement reads block's placement (ok false: none).
func getPlacement(r Reader, block uint64) (Placement, bool, error) {
	key := replicasKey(block)
	v, err := r.Get(key)
	if IsNotFound(err) {
		return Placement{}, false, nil
	}
	if err != nil {
		return Placement{}, false, fmt.Errorf("namespace: get %q: %w", key, err)
	}
	p, err := decodePlacement(key, v)
	return p, err == nil, err
}

// addReplica records that c.Server now holds block c.Block too (a
// finished re-replication). Idempotent: a server already listed changes
// nothing.
func addReplica(b Batch, c Command) error {
	p, ok, err := getPlacement(b, c.Block)
	if err != nil {
		return err
	}
	if !ok {
		return reject(ErrNotFound, "addreplica: block %d has no placement (deleted, or added without chunk servers)", c.Block)
	}
	if c.Expect != 0 && c.Expect != p.Gen+1 {
		return reject(ErrAlreadyExists, "addreplica: block %d: the copy was made for placement generation %d, now %d (superseded)", c.Block, c.Expect-1, p.Gen)
	}
	if slices.Contains(p.Servers, c.Server) {
		return nil
	}
	if len(p.Servers) >= MaxReplication {
		return reject(ErrBadRequest, "addreplica: block %d already has %d servers", c.Block, len(p.Servers))
	}
	p.Servers = append(p.Servers, c.Server)
	p.Gen++
	return setPlacement(b, p)
}

// loseServer removes c.Server from every block's placement (a chunk
// server that left). Idempotent.
func loseServer(b Batch, c Command) error {
	var changed []Placement
	lo, hi := prefixReplicas, prefixEnd(prefixReplicas)
	err := b.Scan(lo, hi, func(k, v []byte) error {
		p, err := decodePlacement(k, v)
		if err != nil {
			return err
		}
		// The last holder stays listed: the block has no other copy to
		// re-replicate from (a real DFS would report it missing), and
		// the server may come back with it.
		if i := slices.Index(p.Servers, c.Server); i >= 0 && len(p.Servers) > 1 {
			p.Servers = slices.Delete(p.Servers, i, i+1)
			p.Gen++
			changed = append(changed, p)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("namespace: scan placements: %w", err)
	}
	for _, p := range changed {
		if err := setPlacement(b, p); err != nil {
			return err
		}
	}
	return nil
}

// deletePlacements deletes the placements of the blocks in [lo, hi) (a
// file's blocks being deleted). Only existing placements are deleted, so
// a namespace without placements writes exactly what v0.1.0 writes (one
// with placements does not: see doc.go, "Versions").
func deletePlacements(b Batch, lo, hi []byte) error {
	var keys [][]byte
	err := b.Scan(lo, hi, func(k, v []byte) error {
		blk, err := decodeBlock(k, v)
		if err != nil {
			return err
		}
		key := replicasKey(blk.ID)
		_, err = b.Get(key)
		if IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		keys = append(keys, key)
		return nil
	})
	if err != nil {
		return fmt.Errorf("namespace: scan blocks: %w", err)
	}
	for _, k := range keys {
		if err := b.Delete(k); err != nil {
			return fmt.Errorf("namespace: delete %q: %w", k, err)
		}
	}
	return nil
}

func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// Placements returns every block placement (ascending block id).
func Placements(r Reader) ([]Placement, error) {
	var out []Placement
	err := r.Scan(prefixReplicas, prefixEnd(prefixReplicas), func(k, v []byte) error {
		p, err := decodePlacement(k, v)
		if err != nil {
			return err
		}
		out = append(out, p)
		return nil
	})
	return out, err
}
