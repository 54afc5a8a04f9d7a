package zkx

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/roomlog/roomlog/third_party/zk"
)

// ACLs of an existing tree against a client's configuration.
//
// A client creates every znode with its configured ACL (Client.ACL: the
// digest entry of Auth, an x509 entry per ACLIdentities, ...). A tree
// created earlier may carry another one while the configuration moves:
// identities are added to every member's configuration before the tree's
// ACL is changed to include them (SetACLTree), and removed from the
// tree's ACL before they are removed from the configurations. CheckACL
// accepts exactly those transitions:
//
//  1. every entry of the tree's ACL names an identity the configuration
//     names (same scheme and id) and grants it no permission the
//     configuration does not: nobody outside the configured identities
//     has any access (a world-open or foreign-granted tree is refused);
//  2. the ACL grants this client all permissions through one of the
//     entries that name it (Client.Self): a member left out of the tree's
//     ACL is refused by name instead of failing later with NoAuth.
//
// So the ACL may be any part of the configured one that still includes
// this client: the configurations list the union of the identities in
// use during a rotation, and the tree's ACL follows one SetACLTree at a
// time.

// CheckACL checks have, a znode's ACL, against want, the ACL the client
// creates with, and self, the entries that name the client (Client.Self):
// see the rules above. The error says which entry breaks which rule.
func CheckACL(have, want, self []zk.ACL) error {
	var errs []error
	for _, e := range have {
		i := slices.IndexFunc(want, func(w zk.ACL) bool { return w.Scheme == e.Scheme && w.ID == e.ID })
		switch {
		case i < 0:
			errs = append(errs, fmt.Errorf("%s:%s (perms %d) is not a configured identity", e.Scheme, e.ID, e.Perms))
		case e.Perms&^want[i].Perms != 0:
			errs = append(errs, fmt.Errorf("%s:%s has perms %d, more than the configured %d", e.Scheme, e.ID, e.Perms, want[i].Perms))
		}
	}
	grants := slices.ContainsFunc(have, func(e zk.ACL) bool {
		return e.Perms&zk.PermAll == zk.PermAll && slices.ContainsFunc(self, func(s zk.ACL) bool { return s.Scheme == e.Scheme && s.ID == e.ID })
	})
	if !grants {
		errs = append(errs, fmt.Errorf("no entry grants this client (%s) all permissions", aclNames(self)))
	}
	return errors.Join(errs...)
}

// aclNames writes entries as scheme:id, comma-separated.
func aclNames(acl []zk.ACL) string {
	s := ""
	for i, e := range acl {
		if i > 0 {
			s += ", "
		}
		s += e.Scheme + ":" + e.ID
	}
	return s
}

// Self returns the ACL entries that name this client's session with all
// permissions: world:anyone (everyone), the digest entry of
// DialConfig.Auth, and the x509 entry of the identity of the certificate
// its TLS presents now (an Identified TLSConfig; after a rotation, the
// new one, which the next connection presents).
func (c *Client) Self() []zk.ACL {
	self := zk.WorldACL(zk.PermAll)
	if c.auth != nil {
		self = append(self, zk.DigestACL(zk.PermAll, c.auth.User, c.auth.Password)...)
	}
	if src, ok := c.tls.(Identified); ok && src.Certificate() != nil {
		if id, err := src.Identity(); err == nil {
			self = append(self, X509ACL(zk.PermAll, id)...)
		}
	}
	return self
}

// SetACL sets acl on the znode p alone (version -1), retried on
// connection loss. An operator sets a room's base (e.g. /roomlog) this
// way beside SetACLTree on the room: a client opening a room needs the
// CREATE permission on the base even when the room exists (ZooKeeper
// checks the parent's ACL before it finds the node exists).
func SetACL(ctx context.Context, r Requester, p string, acl []zk.ACL) error {
	if len(acl) == 0 {
		return fmt.Errorf("%w: SetACL of %s with an empty ACL", ErrBadConfig, p)
	}
	_, err := run(ctx, r, func() (*zk.Stat, error) { return r.Conn().SetACL(p, acl, -1) })
	if err != nil {
		return Translate("zkx: set ACL of "+p, err)
	}
	return nil
}

// SetACLTree sets acl on root and every znode below it (parents before
// their children, each with version -1: whatever its version) and returns
// how many it set. An operator calls it with the members' configured ACL
// (Client.ACL of a client dialled with their configuration) to bring a
// room's tree in line after identities were added to every member's
// configuration, or before they are removed from them. Znodes created
// while it runs get their creator's ACL; a znode deleted meanwhile is
// skipped. The client needs the ADMIN permission on every znode (an x509
// or digest entry with all permissions has it).
func SetACLTree(ctx context.Context, r Requester, root string, acl []zk.ACL) (int, error) {
	if len(acl) == 0 {
		return 0, fmt.Errorf("%w: SetACLTree of %s with an empty ACL", ErrBadConfig, root)
	}
	n := 0
	stack := []string{root}
	for len(stack) > 0 {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		_, err := run(ctx, r, func() (*zk.Stat, error) { return r.Conn().SetACL(p, acl, -1) })
		if errors.Is(err, zk.ErrNoNode) && p != root {
			continue // deleted meanwhile
		}
		if err != nil {
			return n, Translate("zkx: set ACL of "+p, err)
		}
		n++
		kids, err := Children(ctx, r, p)
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return n, Translate("zkx: list "+p, err)
		}
		for _, k := range kids {
			stack = append(stack, path.Join(p, k))
		}
	}
	return n, nil
}

// PublicIdentity is how an ACL identity may be shown to others (member
// data, tool output): "scheme:id", except that a digest identity's
// password hash (unsalted SHA-1, which ZooKeeper itself shows only to
// ADMIN) is replaced by a fingerprint, "digest:USER:fp-<12 hex of
// SHA-256(USER:HASH)>", which tells identities apart without revealing
// the hash.
func PublicIdentity(e zk.ACL) string {
	if e.Scheme != "digest" {
		return e.Scheme + ":" + e.ID
	}
	user, _, _ := strings.Cut(e.ID, ":")
	sum := sha256.Sum256([]byte(e.ID))
	return "digest:" + user + ":fp-" + hex.EncodeToString(sum[:6])
}
