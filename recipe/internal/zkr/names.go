package zkr

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/roomlog/roomlog/zkx"
)

// GUIDLen is the length of a GUID: 32 lowercase hex characters.
const GUIDLen = 32

// seqDigits is the width of ZooKeeper's sequence suffix (%010d of a signed
// 32-bit counter).
const seqDigits = 10

// ValidDir checks a directory path: absolute, at least one component, no
// trailing '/', every component a zkx.ValidComponent (spaces allowed: a
// directory may sit below a room whose name holds them), and not under
// /zookeeper.
func ValidDir(dir string) error {
	if !strings.HasPrefix(dir, "/") || dir == "/" || strings.HasSuffix(dir, "/") {
		return errors.New("must be absolute with at least one component and no trailing '/'")
	}
	parts := strings.Split(dir[1:], "/")
	if parts[0] == "zookeeper" {
		return errors.New("/zookeeper is reserved by ZooKeeper")
	}
	for _, p := range parts {
		if err := zkx.ValidComponent(p); err != nil {
			return fmt.Errorf("component %q: %v", p, err)
		}
	}
	return nil
}

// NewGUID returns GUIDLen hex characters of randomness.
func NewGUID() string {
	var b [GUIDLen / 2]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand does not fail on supported platforms.
		panic(fmt.Sprintf("zkr: crypto/rand: %v", err))
	}
	return hex.EncodeToString(b[:])
}

// ValidGUID reports whether g is GUIDLen lowercase hex characters.
func ValidGUID(g string) bool {
	if len(g) != GUIDLen {
		return false
	}
	for i := 0; i < len(g); i++ {
		c := g[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// SeqNode is one parsed child "<prefix><guid>-<seq>" of a directory of
// EPHEMERAL_SEQUENTIAL nodes (election candidates, lock contenders).
type SeqNode struct {
	Name string
	GUID string
	// Seq is ZooKeeper's suffix parsed as an integer (never compared as
	// text).
	Seq int64
}

// SeqPrefix returns the name to pass to Create with FlagSequence.
func SeqPrefix(prefix, guid string) string { return prefix + guid + "-" }

// ParseSeqNode parses "<prefix><32 hex>-<10 digits>" whose digits are a
// non-negative 32-bit number, as ZooKeeper appends them. The error says why
// a name is not one (foreign).
func ParseSeqNode(prefix, name string) (SeqNode, error) {
	want := fmt.Sprintf("want %s<%d hex>-<%d-digit sequence>", prefix, GUIDLen, seqDigits)
	if len(name) != len(prefix)+GUIDLen+1+seqDigits || !strings.HasPrefix(name, prefix) {
		return SeqNode{}, fmt.Errorf("not a sequential node name (%s)", want)
	}
	rest := name[len(prefix):]
	guid, seq := rest[:GUIDLen], rest[GUIDLen+1:]
	if !ValidGUID(guid) || rest[GUIDLen] != '-' {
		return SeqNode{}, fmt.Errorf("bad guid in %q (%s)", name, want)
	}
	if strings.HasPrefix(seq, "-") {
		// ZooKeeper's counter past 2^31-1 wraps negative; a real node
		// never shows that in practice: it sorts below every live one.
		return SeqNode{}, fmt.Errorf("negative sequence %s", seq)
	}
	if strings.Trim(seq, "0123456789") != "" {
		return SeqNode{}, fmt.Errorf("sequence %q is not ZooKeeper's %d-digit suffix", seq, seqDigits)
	}
	n, err := strconv.ParseInt(seq, 10, 64)
	if err != nil || n > math.MaxInt32 {
		return SeqNode{}, fmt.Errorf("sequence %q out of range of ZooKeeper's 32-bit counter", seq)
	}
	return SeqNode{Name: name, GUID: guid, Seq: n}, nil
}

// SortBySeq sorts nodes by ascending sequence (ties, impossible in one
// parent, broken by name).
func SortBySeq(ns []SeqNode) {
	sort.Slice(ns, func(i, j int) bool {
		if ns[i].Seq != ns[j].Seq {
			return ns[i].Seq < ns[j].Seq
		}
		return ns[i].Name < ns[j].Name
	})
}
