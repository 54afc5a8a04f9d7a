package election

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/recipe/internal/zkr"
	"github.com/roomlog/roomlog/zkx"
)

const (
	// candidatePrefix starts every candidate node: c-<guid>-<seq>.
	candidatePrefix = "c-"
	// designationName is the designation record, a child of Dir.
	designationName = "designation"
	formatV1        = 1
)

// candidateData is a candidate node's data.
type candidateData struct {
	V    int    `msgpack:"v"`
	ID   string `msgpack:"id"`
	Data []byte `msgpack:"data"`
}

// designationData is the designation record's data.
type designationData struct {
	V        int    `msgpack:"v"`
	From     string `msgpack:"from"`
	FromGUID string `msgpack:"from_guid"`
	To       string `msgpack:"to"`
	ToGUID   string `msgpack:"to_guid"`
}

// Candidate describes one accepted candidate node (the leader is the
// lowest).
type Candidate struct {
	// ID and Data are what the participant published.
	ID   string
	Data []byte
	// Node is the node name c-<guid>-<seq>; Seq its sequence number.
	Node string
	Seq  int64
	// GUID identifies the participant's nodes.
	GUID string
	// Session holds the node; Czxid created it (the leader's fencing
	// token: Term.Token).
	Session int64
	Czxid   int64
	// Unreadable: the node's ACL denies this client READ (a candidate of
	// a client with other credentials). It holds its place in the line;
	// ID and Data are empty.
	Unreadable bool
}

func (c Candidate) clone() Candidate {
	c.Data = append([]byte(nil), c.Data...)
	return c
}

// Foreign is a child of the election directory that does not count, and
// why.
type Foreign = zkx.Foreign

// acceptCandidate checks a child: a candidate name, ephemeral, data that
// decodes as format v1 with a valid id. A node this client may not read
// (readable false: a candidate of a client with other credentials) counts
// on its Stat alone, Unreadable, with no ID or Data: ignoring it would let
// two candidates each lead. The reason is "" when it counts.
func acceptCandidate(sn zkr.SeqNode, data []byte, st *zk.Stat, readable bool) (Candidate, string) {
	if st.EphemeralOwner == 0 {
		return Candidate{}, "not ephemeral (a persistent znode is never a live candidate)"
	}
	if !readable {
		return Candidate{
			Node: sn.Name, Seq: sn.Seq, GUID: sn.GUID, Unreadable: true,
			Session: st.EphemeralOwner, Czxid: st.Czxid,
		}, ""
	}
	var d candidateData
	if err := zkr.Decode(data, &d); err != nil {
		return Candidate{}, "data does not decode: " + err.Error()
	}
	if d.V != formatV1 {
		return Candidate{}, fmt.Sprintf("unknown format version %d", d.V)
	}
	if err := zkx.ValidName(d.ID); err != nil {
		return Candidate{}, "bad candidate id: " + err.Error()
	}
	return Candidate{
		ID: d.ID, Data: d.Data, Node: sn.Name, Seq: sn.Seq, GUID: sn.GUID,
		Session: st.EphemeralOwner, Czxid: st.Czxid,
	}, ""
}

// lister reads a directory's candidates, caching accepted ones by name (a
// candidate node never changes; a name that leaves a listing is
// forgotten). Owned by one goroutine.
type lister struct {
	sess    *zkr.Session
	dir     string
	foreign *zkx.ForeignSet
	cache   map[string]Candidate
	// check, when set, is a further check on every accepted candidate at
	// every listing (it may depend on the session: never cached); its
	// reason makes the candidate foreign.
	check func(Candidate) string
}

func newLister(sess *zkr.Session, dir string, foreign *zkx.ForeignSet) *lister {
	return &lister{sess: sess, dir: dir, foreign: foreign, cache: map[string]Candidate{}}
}

// read returns the accepted candidates sorted by sequence. names is a
// listing of dir (read by the caller, with or without a watch).
func (l *lister) read(ctx context.Context, names []string) ([]Candidate, error) {
	foreign := map[string]string{}
	nodes := zkr.ParseListing(l.dir, candidatePrefix, names, designationName, l.cache, foreign)
	out := make([]Candidate, 0, len(nodes))
	for _, sn := range nodes {
		c, ok := l.cache[sn.Name]
		if !ok {
			var err error
			if c, ok, err = zkr.ReadAccepted(ctx, l.sess, l.dir, sn, "candidate", foreign, acceptCandidate); err != nil {
				return nil, err
			} else if !ok {
				continue
			}
			l.cache[sn.Name] = c
		}
		if l.check != nil {
			if reason := l.check(c); reason != "" {
				foreign[l.dir+"/"+sn.Name] = reason
				continue
			}
		}
		out = append(out, c)
	}
	l.foreign.Replace(foreign)
	return out, nil
}

// designation is an accepted designation record.
type designation struct {
	designationData
	czxid   int64
	version int32
}

// readDesignation reads the record; nil when absent or foreign (reported).
func readDesignation(ctx context.Context, sess *zkr.Session, dir string, foreign *zkx.ForeignSet) (*designation, error) {
	p := dir + "/" + designationName
	b, st, err := zkx.Get(ctx, sess, p)
	switch {
	case errors.Is(err, zk.ErrNoNode):
		foreign.Drop(p)
		return nil, nil
	case errors.Is(err, zk.ErrNoAuth):
		foreign.Report(p, "unreadable designation record")
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read designation: %w", err)
	}
	var d designationData
	reason := ""
	switch {
	case st.EphemeralOwner == 0:
		reason = "designation record is not ephemeral"
	case zkr.Decode(b, &d) != nil || d.V != formatV1:
		reason = "designation record does not decode as format v1"
	case !zkr.ValidGUID(d.ToGUID):
		reason = "designation record names no valid guid"
	}
	if reason != "" {
		foreign.Report(p, reason)
		return nil, nil
	}
	foreign.Drop(p)
	return &designation{designationData: d, czxid: st.Czxid, version: st.Version}, nil
}

// decision is what the lowest candidate does about a designation record.
type decision struct {
	// requeue: step behind the designated candidate instead of leading.
	requeue bool
	// drop: the record is spent (names us, a candidate that is gone, or
	// is older than the TTL): delete it on taking over.
	drop bool
}

// decide is the designation rule for the lowest candidate self: honour a
// record naming another live candidate for at most ttl after first seeing
// it (age, on the local monotonic clock); otherwise lead, and drop any
// record.
func decide(rec *designation, age, ttl time.Duration, self string, live map[string]bool) decision {
	switch {
	case rec == nil:
		return decision{}
	case rec.ToGUID == self, !live[rec.ToGUID], age >= ttl:
		return decision{drop: true}
	default:
		return decision{requeue: true}
	}
}
