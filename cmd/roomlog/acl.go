package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/zkx"
)

// ---- acl ----
//
// Shows a room's ACL and the identities its live members' sessions are
// authenticated as; with --add/--remove, changes the ACL of the base and
// of every znode of the room while its members run (zkx/aclcheck.go:
// members accept an ACL that is any part of their configured identities
// that still grants them).

const aclHelp = `usage: roomlog acl ROOM [--add IDENTITY]... [--remove IDENTITY]... [--force] [--json]

Shows room ROOM's ACL (the room znode's; a top-level znode that differs is
listed: a change that did not finish) and each live member with the identities
its ZooKeeper session is authenticated as, and whether the ACL grants it.

WRITES with --add/--remove: sets the new ACL on every znode of the room and adds
(removes) the entries on the base. IDENTITY is one of
  x509:SUBJECT or SUBJECT     a certificate identity (RFC 2253, e.g. CN=master-2,O=dfs)
  digest:USER:HASH            a digest identity, HASH = base64(sha1(USER:PASSWORD))
  digest-file:PATH            the digest identity of the credentials in PATH (user:password)
A change that would leave a live member, or this tool itself, without an entry
is refused (--force: do it anyway). A removed identity is kept on the base while
another room under it still lists it.

Procedure (members keep running; each step is a rolling restart or one command):
  add an identity      1. add it to every member's configured identities
                          (--zk-acl-x509 / ACLIdentities; a digest as digest:USER:HASH)
                       2. roomlog acl ROOM --add IDENTITY
                       3. start the members that use it
  remove an identity   1. stop the members that use it (roomlog transfer first if
                          one of them is primary)
                       2. roomlog acl ROOM --remove IDENTITY
                       3. drop it from the members' configured identities
                       4. roomlog acl ROOM --remove IDENTITY again: znodes the
                          members created between 2 and 3 (channels, batches,
                          checkpoints) carry their configured ACL, which still
                          granted it; the second run sweeps them
  rotate a password    add digest-file:NEW (as above: members list both), restart
                       the members with the new password, remove digest-file:OLD
`

// aclEntry is one ACL entry as acl prints it.
type aclEntry struct {
	Scheme string `json:"scheme"`
	ID     string `json:"id"`
	Perms  string `json:"perms"`
	// UsedBy lists the live members whose session has this identity.
	UsedBy []string `json:"used_by"`
}

type aclMember struct {
	ID         string   `json:"id"`
	Role       string   `json:"role"`
	Identities []string `json:"identities"`
	// Granted: an entry of the room's ACL names one of its identities
	// with all permissions (false for a member that publishes none).
	Granted bool `json:"granted"`
}

type aclOut struct {
	Room    string      `json:"room"`
	Path    string      `json:"path"`
	ACL     []aclEntry  `json:"acl"`
	Base    []aclEntry  `json:"base_acl"`
	Members []aclMember `json:"members"`
	// Differ lists the room's top-level znodes whose ACL is not the room
	// znode's (a change that did not finish: run it again).
	Differ []string `json:"differ"`
	// Changed: --add/--remove set this many znodes (0: a show).
	Changed int `json:"changed,omitempty"`
}

// parseIdentity turns an --add/--remove value into an ACL entry with all
// permissions.
func parseIdentity(s string) (zk.ACL, error) {
	scheme, rest, ok := strings.Cut(s, ":")
	if !ok || strings.Contains(scheme, "=") { // a bare certificate subject
		return zkx.IdentityACL(zk.PermAll, s)
	}
	switch scheme {
	case zkx.SchemeX509, zkx.SchemeDigest:
		return zkx.IdentityACL(zk.PermAll, s)
	case "digest-file":
		d, err := logroom.LoadDigestFile(rest)
		if err != nil {
			return zk.ACL{}, err
		}
		return zk.ACL{Perms: zk.PermAll, Scheme: zkx.SchemeDigest, ID: zkx.DigestID(d.User, d.Password)}, nil
	case "world":
		return zk.ACL{Perms: zk.PermAll, Scheme: "world", ID: rest}, nil
	}
	return zk.ACL{}, fmt.Errorf("identity %q: unknown scheme %q (want x509:, digest:, digest-file:)", s, scheme)
}

// checkIdentities checks acl's --add and --remove values before anything
// is dialled.
func checkIdentities(o options) error {
	for _, s := range o.add {
		e, err := parseIdentity(s)
		if err != nil {
			return fmt.Errorf("--add: %w", err)
		}
		if e.Scheme == "world" {
			return fmt.Errorf("--add %s: a room is never opened to everyone", s)
		}
	}
	for _, s := range o.remove {
		if _, err := parseIdentity(s); err != nil {
			return fmt.Errorf("--remove: %w", err)
		}
	}
	return nil
}

func permString(p int32) string {
	if p&zk.PermAll == zk.PermAll {
		return "all"
	}
	var s []string
	for _, f := range []struct {
		bit  int32
		name string
	}{{zk.PermRead, "r"}, {zk.PermWrite, "w"}, {zk.PermCreate, "c"}, {zk.PermDelete, "d"}, {zk.PermAdmin, "a"}} {
		if p&f.bit != 0 {
			s = append(s, f.name)
		}
	}
	return strings.Join(s, "")
}

func sameEntry(a, b zk.ACL) bool { return a.Scheme == b.Scheme && a.ID == b.ID }

// getACL reads p's ACL, retried across a lost connection.
func (in *inspector) getACL(ctx context.Context, p string) ([]zk.ACL, error) {
	ctx, cancel := in.bounded(ctx)
	defer cancel()
	var acl []zk.ACL
	err := in.c.Retry(ctx, func() (err error) { acl, _, err = in.c.Conn().GetACL(p); return err })
	if err != nil {
		return nil, zkErr("read the ACL of "+p, err)
	}
	return acl, nil
}

func cmdACL(ctx context.Context, in *inspector, o options, args []string, stdout, stderr io.Writer) error {
	var add, remove []zk.ACL
	for _, s := range o.add {
		e, err := parseIdentity(s)
		if err != nil {
			return usageError{Err: fmt.Errorf("--add: %w", err)}
		}
		if e.Scheme == "world" {
			return usageError{Err: fmt.Errorf("--add %s: a room is never opened to everyone", s)}
		}
		add = append(add, e)
	}
	for _, s := range o.remove {
		e, err := parseIdentity(s)
		if err != nil {
			return usageError{Err: fmt.Errorf("--remove: %w", err)}
		}
		if slices.ContainsFunc(add, func(a zk.ACL) bool { return sameEntry(a, e) }) {
			return usageError{Err: fmt.Errorf("%s is both added and removed", s)}
		}
		remove = append(remove, e)
	}
	rv, _, err := in.room(ctx, args[0])
	if err != nil {
		return err
	}
	have, err := in.getACL(ctx, rv.root)
	if err != nil {
		return err
	}
	changing := len(add)+len(remove) > 0
	out := aclOut{Room: rv.name, Path: rv.root, Differ: []string{}}
	next := slices.Clone(have)
	if changing {
		for _, e := range add {
			if !slices.ContainsFunc(next, func(h zk.ACL) bool { return sameEntry(h, e) }) {
				next = append(next, e)
			}
		}
		for _, e := range remove {
			i := slices.IndexFunc(next, func(h zk.ACL) bool { return sameEntry(h, e) })
			if i < 0 {
				// Removed from the room znode already: znodes members
				// created since (with their configured ACL, until the
				// identity left their configuration too) may still grant
				// it; the sweep below brings the whole tree in line.
				fmt.Fprintf(stderr, "roomlog acl: %s is not in room %q's ACL; sweeping the room's znodes that still grant it\n", zkx.PublicIdentity(e), rv.name)
				continue
			}
			next = slices.Delete(next, i, i+1)
		}
		if len(next) == 0 {
			return fmt.Errorf("room %q: the change leaves an empty ACL", rv.name)
		}
	}
	v, err := rv.replicaView(ctx)
	if err != nil {
		return err
	}
	var locked []string
	for _, m := range v.Live() {
		row := aclMember{ID: m.ID, Role: m.Role.String(), Identities: slices.Clone(m.Identities)}
		if row.Identities == nil {
			row.Identities = []string{}
		}
		row.Granted = grants(have, m.Identities)
		if changing && len(m.Identities) > 0 && !grants(next, m.Identities) {
			locked = append(locked, fmt.Sprintf("member %s (%s)", m.ID, strings.Join(m.Identities, ", ")))
		}
		out.Members = append(out.Members, row)
	}
	if changing {
		var self []string
		for _, e := range in.c.Self() {
			if e.Scheme != "world" {
				self = append(self, zkx.PublicIdentity(e))
			}
		}
		if !grants(next, self) && !slices.ContainsFunc(next, func(e zk.ACL) bool { return e.Scheme == "world" }) {
			locked = append(locked, fmt.Sprintf("this tool (%s)", strings.Join(self, ", ")))
		}
		if len(locked) > 0 && !o.force {
			return fmt.Errorf("%w: the new ACL of room %q (%s) would grant no entry to %s: stop them first, or --force",
				errRefused, rv.name, aclList(next), strings.Join(locked, "; "))
		}
		n, err := in.applyACL(ctx, rv, next, add, remove, stderr)
		out.Changed = n
		if err != nil {
			return err
		}
		if have, err = in.getACL(ctx, rv.root); err != nil {
			return err
		}
		for i := range out.Members {
			out.Members[i].Granted = grants(have, out.Members[i].Identities)
		}
	}
	for _, e := range have {
		out.ACL = append(out.ACL, entryOut(e, v.Live()))
	}
	if baseACL, err := in.getACL(ctx, in.base); err == nil {
		for _, e := range baseACL {
			out.Base = append(out.Base, entryOut(e, nil))
		}
	}
	for _, sub := range []string{"", logroom.EpochZnode, logroom.ChannelsZnode, "members", "election", "checkpoints", "version"} {
		p := rv.root
		if sub != "" {
			p = rv.path(sub)
		}
		acl, err := in.getACL(ctx, p)
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return err
		}
		if !sameACL(acl, have) {
			out.Differ = append(out.Differ, fmt.Sprintf("%s: %s", p, aclList(acl)))
		}
	}
	if o.json {
		return writeJSON(stdout, out)
	}
	if out.Changed > 0 {
		fmt.Fprintf(stdout, "room %s: ACL set on %d znodes\n", rv.name, out.Changed)
	}
	fmt.Fprintf(stdout, "room %s (%s) ACL:\n", rv.name, rv.root)
	t := newTable(stdout, "SCHEME", "ID", "PERMS", "USED BY")
	for _, e := range out.ACL {
		t.row(e.Scheme, e.ID, e.Perms, strings.Join(e.UsedBy, ","))
	}
	if err := t.flush(); err != nil {
		return err
	}
	var base []string
	for _, e := range out.Base {
		base = append(base, e.Scheme+":"+e.ID+" ("+e.Perms+")")
	}
	fmt.Fprintf(stdout, "base %s ACL: %s\n", in.base, strings.Join(base, ", "))
	t = newTable(stdout, "MEMBER", "ROLE", "GRANTED", "IDENTITIES")
	for _, m := range out.Members {
		g := "yes"
		switch {
		case len(m.Identities) == 0:
			g = "? (publishes no identity)"
		case !m.Granted:
			g = "NO"
		}
		t.row(m.ID, m.Role, g, strings.Join(m.Identities, ", "))
	}
	if err := t.flush(); err != nil {
		return err
	}
	for _, d := range out.Differ {
		fmt.Fprintf(stdout, "DIFFERS from the room znode (an unfinished change? run --add/--remove again): %s\n", d)
	}
	return nil
}

// applyACL sets next on the room's tree and adds (removes) the changed
// entries on the base. It logs its progress on stderr.
func (in *inspector) applyACL(ctx context.Context, rv *roomView, next, add, remove []zk.ACL, stderr io.Writer) (int, error) {
	baseACL, err := in.getACL(ctx, in.base)
	if err != nil {
		return 0, err
	}
	newBase := slices.Clone(baseACL)
	worldBase := slices.ContainsFunc(baseACL, func(e zk.ACL) bool { return e.Scheme == "world" && e.Perms&zk.PermAll == zk.PermAll })
	if !worldBase {
		for _, e := range add {
			if !slices.ContainsFunc(newBase, func(h zk.ACL) bool { return sameEntry(h, e) }) {
				newBase = append(newBase, e)
			}
		}
		for _, e := range remove {
			used, err := in.otherRoomUses(ctx, rv.name, e)
			if err != nil {
				return 0, err
			}
			if used != "" {
				fmt.Fprintf(stderr, "roomlog acl: %s:%s stays on the base %s: room %q still lists it\n", e.Scheme, e.ID, in.base, used)
				continue
			}
			newBase = slices.DeleteFunc(newBase, func(h zk.ACL) bool { return sameEntry(h, e) })
		}
	}
	// Added entries reach the base first (a new member needs CREATE on it
	// to open the room); removed ones leave it last.
	if len(add) > 0 && !sameACL(newBase, baseACL) {
		if err := zkx.SetACL(ctx, in.c, in.base, addOnly(baseACL, newBase)); err != nil {
			return 0, zkErr("", err)
		}
	}
	fmt.Fprintf(stderr, "roomlog acl: setting %s on every znode of %s\n", aclList(next), rv.root)
	n, err := zkx.SetACLTree(ctx, in.c, rv.root, next)
	if err != nil {
		return n, zkErr(fmt.Sprintf("after %d znodes", n), err)
	}
	if len(newBase) > 0 && !sameACL(newBase, baseACL) {
		if err := zkx.SetACL(ctx, in.c, in.base, newBase); err != nil {
			return n, zkErr("", err)
		}
	}
	return n, nil
}

// addOnly is have plus the entries of want it lacks.
func addOnly(have, want []zk.ACL) []zk.ACL {
	out := slices.Clone(have)
	for _, e := range want {
		if !slices.ContainsFunc(out, func(h zk.ACL) bool { return sameEntry(h, e) }) {
			out = append(out, e)
		}
	}
	return out
}

// otherRoomUses returns the name of another room under the base whose
// room znode's ACL lists e ("" when none does).
func (in *inspector) otherRoomUses(ctx context.Context, room string, e zk.ACL) (string, error) {
	names, _, err := in.c.Conn().Children(in.base)
	if err != nil {
		return "", zkErr("list "+in.base, err)
	}
	slices.Sort(names)
	for _, n := range names {
		if n == room {
			continue
		}
		acl, err := in.getACL(ctx, path.Join(in.base, n))
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return "", err
		}
		if slices.ContainsFunc(acl, func(h zk.ACL) bool { return sameEntry(h, e) }) {
			return n, nil
		}
	}
	return "", nil
}

// grants reports whether acl gives one of ids ("scheme:id") all
// permissions.
func grants(acl []zk.ACL, ids []string) bool {
	return slices.ContainsFunc(acl, func(e zk.ACL) bool {
		return e.Perms&zk.PermAll == zk.PermAll && slices.Contains(ids, zkx.PublicIdentity(e))
	})
}

func sameACL(a, b []zk.ACL) bool {
	if len(a) != len(b) {
		return false
	}
	for _, e := range a {
		if !slices.ContainsFunc(b, func(h zk.ACL) bool { return sameEntry(h, e) && h.Perms == e.Perms }) {
			return false
		}
	}
	return true
}

func aclList(acl []zk.ACL) string {
	var s []string
	for _, e := range acl {
		s = append(s, e.Scheme+":"+e.ID)
	}
	return strings.Join(s, ", ")
}

func entryOut(e zk.ACL, members []replicaMember) aclEntry {
	out := aclEntry{Scheme: e.Scheme, ID: e.ID, Perms: permString(e.Perms), UsedBy: []string{}}
	for _, m := range members {
		if slices.Contains(m.Identities, zkx.PublicIdentity(e)) {
			out.UsedBy = append(out.UsedBy, m.ID)
		}
	}
	return out
}
