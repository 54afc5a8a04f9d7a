package namespace

import (
	"bytes"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// CommandVersion is the first byte of every encoded command. An entry with
// another first byte is rejected with CodeBadRequest (never applied, never a
// replica-stopping error), so a log written by a newer demo cannot corrupt an
// older one's state.
const CommandVersion byte = 1

// ResponseVersion is the first byte of every encoded response.
const ResponseVersion byte = 1

// Limits checked by Command.Validate and again by the applier.
const (
	MinReplication   = 1
	MaxReplication   = 512     // HDFS's dfs.replication.max default
	MaxBlockSize     = 1 << 40 // 1 TiB
	MaxBlocksPerFile = 1 << 20 // so a file's size (<= 2^60) never overflows
)

// Op is the operation of a command.
type Op uint8

// The operations. Values are part of the log format: never renumber.
const (
	OpMkdir    Op = 1
	OpCreate   Op = 2
	OpAddBlock Op = 3
	OpRename   Op = 4
	OpDelete   Op = 5
	// Block placement (replicas.go): proposed only by a master with chunk
	// servers, which needs every master of the room at this release.
	OpAddReplica Op = 6
	OpLoseServer Op = 7
)

func (o Op) String() string {
	switch o {
	case OpMkdir:
		return "mkdir"
	case OpCreate:
		return "create"
	case OpAddBlock:
		return "addblock"
	case OpRename:
		return "rename"
	case OpDelete:
		return "delete"
	case OpAddReplica:
		return "addreplica"
	case OpLoseServer:
		return "loseserver"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Command is one namespace mutation, as it travels through the log. Only the
// fields of its Op are meaningful; the others must be zero.
type Command struct {
	Op          Op     `msgpack:"op"`
	Path        string `msgpack:"path"`                  // every op; rename: the source
	Dst         string `msgpack:"dst,omitempty"`         // rename
	Parents     bool   `msgpack:"parents,omitempty"`     // mkdir
	Recursive   bool   `msgpack:"recursive,omitempty"`   // delete
	Replication int    `msgpack:"replication,omitempty"` // create
	Size        int64  `msgpack:"size,omitempty"`        // addblock
	// Servers (addblock): the chunk servers the block is placed on (its
	// placement record is written); omitted without chunk servers.
	Servers []string `msgpack:"servers,omitempty"`
	Block   uint64   `msgpack:"block,omitempty"`  // addreplica
	Server  string   `msgpack:"server,omitempty"` // addreplica, loseserver
	// Expect (addreplica): the placement generation the re-replication
	// was made for, plus one (0: any). A placement that changed since is
	// left alone (ErrAlreadyExists: superseded), so a copy made from a
	// stale view is never recorded.
	Expect uint64 `msgpack:"expect,omitempty"`
}

// Validate checks everything about c that does not depend on the namespace
// state: a known op, valid paths, numbers in range, no field of another op.
// The error wraps ErrInvalidPath or ErrBadRequest.
func (c Command) Validate() error {
	var may struct{ dst, parents, recursive, replication, size, servers, block, server, expect bool }
	switch c.Op {
	case OpMkdir:
		may.parents = true
	case OpCreate:
		may.replication = true
	case OpAddBlock:
		may.size, may.servers = true, true
	case OpRename:
		may.dst = true
	case OpDelete:
		may.recursive = true
	case OpAddReplica:
		may.block, may.server, may.expect = true, true, true
	case OpLoseServer:
		may.server = true
	default:
		return reject(ErrBadRequest, "unknown op %d", uint8(c.Op))
	}
	for _, f := range [...]struct {
		name       string
		set, valid bool
	}{
		{"dst", c.Dst != "", may.dst},
		{"parents", c.Parents, may.parents},
		{"recursive", c.Recursive, may.recursive},
		{"replication", c.Replication != 0, may.replication},
		{"size", c.Size != 0, may.size},
		{"servers", len(c.Servers) != 0, may.servers},
		{"block", c.Block != 0, may.block},
		{"server", c.Server != "", may.server},
		{"expect", c.Expect != 0, may.expect},
	} {
		if f.set && !f.valid {
			return reject(ErrBadRequest, "%s: field %q does not apply", c.Op, f.name)
		}
	}
	switch c.Op {
	case OpAddReplica, OpLoseServer:
		if c.Path != "" {
			return reject(ErrBadRequest, "%s: field %q does not apply", c.Op, "path")
		}
	}
	switch c.Op {
	case OpAddReplica:
		if c.Block == 0 {
			return reject(ErrBadRequest, "addreplica: block 0")
		}
		return validServer("addreplica", c.Server)
	case OpLoseServer:
		return validServer("loseserver", c.Server)
	}
	if err := ValidatePath(c.Path); err != nil {
		return fmt.Errorf("%s: %w", c.Op, err)
	}
	switch c.Op {
	case OpCreate:
		if c.Replication < MinReplication || c.Replication > MaxReplication {
			return reject(ErrBadRequest, "create %s: replication %d out of range [%d, %d]", c.Path, c.Replication, MinReplication, MaxReplication)
		}
	case OpAddBlock:
		if c.Size < 0 || c.Size > MaxBlockSize {
			return reject(ErrBadRequest, "addblock %s: size %d out of range [0, %d]", c.Path, c.Size, int64(MaxBlockSize))
		}
		if err := validServers("addblock "+c.Path, c.Servers); err != nil {
			return err
		}
	case OpRename:
		if err := ValidatePath(c.Dst); err != nil {
			return fmt.Errorf("rename destination: %w", err)
		}
	}
	return nil
}

// EncodeCommand validates c and returns its log entry.
func EncodeCommand(c Command) ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	buf.WriteByte(CommandVersion)
	if err := msgpack.NewEncoder(&buf).Encode(&c); err != nil {
		return nil, fmt.Errorf("namespace: encode command: %w", err)
	}
	return buf.Bytes(), nil
}

// DecodeCommand parses and validates a log entry. It never panics; any
// problem wraps ErrBadRequest (or ErrInvalidPath for a bad path).
func DecodeCommand(entry []byte) (Command, error) {
	if len(entry) == 0 {
		return Command{}, reject(ErrBadRequest, "empty command")
	}
	if entry[0] != CommandVersion {
		return Command{}, reject(ErrBadRequest, "unknown command version %d (want %d)", entry[0], CommandVersion)
	}
	var c Command
	if err := decodeStrict(entry[1:], &c); err != nil {
		return Command{}, reject(ErrBadRequest, "malformed command: %v", err)
	}
	if err := c.Validate(); err != nil {
		return Command{}, err
	}
	return c, nil
}

// decodeStrict decodes exactly one msgpack value filling v, refusing unknown
// fields and trailing bytes.
func decodeStrict(b []byte, v any) error {
	r := bytes.NewReader(b)
	dec := msgpack.NewDecoder(r)
	dec.DisallowUnknownFields(true)
	if err := dec.Decode(v); err != nil {
		return err
	}
	if r.Len() != 0 {
		return fmt.Errorf("%d trailing bytes", r.Len())
	}
	return nil
}

// Response is the applier's deterministic answer to one command.
type Response struct {
	Code    Code   `msgpack:"code,omitempty"`     // empty on success
	Message string `msgpack:"message,omitempty"`  // why it was rejected
	BlockID uint64 `msgpack:"block_id,omitempty"` // addblock: the new block's id
}

// Err is nil on success, else an error whose text is Message and which wraps
// the sentinel of Code.
func (r Response) Err() error {
	if r.Code == codeOK {
		return nil
	}
	return &rejection{code: r.Code, msg: r.Message}
}

// EncodeResponse encodes r with its version byte.
func EncodeResponse(r Response) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte(ResponseVersion)
	if err := msgpack.NewEncoder(&buf).Encode(&r); err != nil {
		return nil, fmt.Errorf("namespace: encode response: %w", err)
	}
	return buf.Bytes(), nil
}

// DecodeResponse parses what the applier returned for a command.
func DecodeResponse(b []byte) (Response, error) {
	if len(b) == 0 || b[0] != ResponseVersion {
		return Response{}, fmt.Errorf("namespace: response of %d bytes without version %d", len(b), ResponseVersion)
	}
	var r Response
	if err := decodeStrict(b[1:], &r); err != nil {
		return Response{}, fmt.Errorf("namespace: malformed response: %w", err)
	}
	return r, nil
}

func rejectResponse(err error) Response {
	code, ok := CodeOf(err)
	if !ok {
		code = CodeBadRequest
	}
	return Response{Code: code, Message: err.Error()}
}
