package tasks

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"strings"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/recipe/internal/zkr"
	"github.com/roomlog/roomlog/zkx"
)

// Bounds.
const (
	// MaxDataBytes bounds a task's data: it is copied into its
	// assignment, and the assigner reads every new task.
	MaxDataBytes = 64 << 10
	// MaxResultBytes bounds a result's payload.
	MaxResultBytes = 64 << 10
	// MaxIDLen bounds a task id (a znode name with the "t-" prefix).
	MaxIDLen = zkx.MaxNameLen - len(taskPrefix)
	// DefaultMaxOpen is the default cap on the children of each parent
	// the recipe fills: waiting tasks (Submit), results not yet deleted
	// (Submit) and one worker's assignments (the assigner). A listing of
	// DefaultMaxOpen names of MaxIDLen bytes stays well below ZooKeeper's
	// 1 MiB packet limit (jute.maxbuffer), which a getChildren reply must
	// fit.
	DefaultMaxOpen = 4096
	// MaxOpenLimit is the largest AssignerConfig.MaxOpen: 6,000 names of
	// 128 bytes (plus 4 bytes of length each) are under 0.8 MiB.
	MaxOpenLimit = 6000
	// DefaultMaxOpenBytes is the default cap on the task data assigned
	// to one worker at once (AssignerConfig.MaxOpenBytes): 128 tasks of
	// MaxDataBytes, or DefaultMaxOpen tasks of 2 KiB. ZooKeeper keeps
	// every node in memory.
	DefaultMaxOpenBytes = 8 << 20
	// DefaultResultTTL is how long the assigner keeps a result nobody
	// deleted.
	DefaultResultTTL = 10 * time.Minute
)

const (
	taskPrefix = "t-"
	// reportPrefix names a result a worker wrote into its report
	// directory <dir>/reports/<worker> (per-worker ACLs), for the
	// assigner to move to <dir>/results.
	reportPrefix = "r-"
	// maxStaleReports is how many reports beyond MaxOpen a worker's
	// report directory may hold before the assigner stops listing it.
	maxStaleReports = 64
	// keptDeletedReports is how many of the reports the assigner deleted
	// (malformed or unmatched) stay listed by Assigner.Foreign, per
	// worker.
	keptDeletedReports = 16
	formatVersion      = 1
	sumLen             = 16
)

// Subdirectories of the recipe's directory.
const (
	tasksDir   = "tasks"
	assignDir  = "assign"
	workersDir = "workers"
	resultsDir = "results"
	// reportsDir holds a directory per worker where it reports
	// (per-worker ACLs only).
	reportsDir = "reports"
)

// taskRecord is the data of <dir>/tasks/t-<id>.
type taskRecord struct {
	V         int    `msgpack:"v"`
	ID        string `msgpack:"id"`
	Data      []byte `msgpack:"data"`
	Submitted int64  `msgpack:"submitted"` // Unix ms, the submitter's clock (informational)
}

// assignRecord is the data of <dir>/assign/<worker>/t-<id>.
type assignRecord struct {
	V       int    `msgpack:"v"`
	ID      string `msgpack:"id"`
	Data    []byte `msgpack:"data"`
	Worker  string `msgpack:"worker"`
	Token   int64  `msgpack:"token"`
	Attempt int    `msgpack:"attempt"`
	// Submitted is carried over from the task (informational).
	Submitted int64 `msgpack:"submitted"`
}

// resultRecord is the data of <dir>/results/t-<id>.
type resultRecord struct {
	V       int    `msgpack:"v"`
	ID      string `msgpack:"id"`
	Worker  string `msgpack:"worker"`
	Attempt int    `msgpack:"attempt"`
	OK      bool   `msgpack:"ok"`
	Result  []byte `msgpack:"result"`
	At      int64  `msgpack:"at"` // Unix ms, the worker's clock (informational)
	// Sum is dataSum of the task's data: Submit compares it to tell a
	// repeated submission of a finished task from a conflicting one.
	Sum []byte `msgpack:"sum"`
}

// dataSum is the first 16 bytes of SHA-256 of a task's data.
func dataSum(data []byte) []byte {
	s := sha256.Sum256(data)
	return s[:sumLen]
}

// validID checks a task id.
func validID(id string) error {
	if len(id) > MaxIDLen {
		return fmt.Errorf("%d bytes, at most %d", len(id), MaxIDLen)
	}
	return zkx.ValidName(id)
}

// nodeName is the znode name of task id.
func nodeName(id string) string { return taskPrefix + id }

// reportName is the name of task id's result in its worker's directory.
func reportName(id string) string { return reportPrefix + id }

// parseName returns the task id a child name stands for; the error is the
// foreign reason.
func parseName(name string) (string, error) {
	id, ok := strings.CutPrefix(name, taskPrefix)
	if !ok {
		return "", fmt.Errorf("name does not start with %q", taskPrefix)
	}
	if err := validID(id); err != nil {
		return "", fmt.Errorf("bad task id %q: %v", id, err)
	}
	return id, nil
}

// persistent is the acceptance check common to every node the recipe
// writes as PERSISTENT: an ephemeral one is someone else's.
func persistent(st *zk.Stat) string {
	if st != nil && st.EphemeralOwner != 0 {
		return fmt.Sprintf("ephemeral (session 0x%x), the recipe writes it persistent", st.EphemeralOwner)
	}
	return ""
}

// decodeTask decodes and checks the data of tasks/<name>; the string is
// the foreign reason ("" when accepted).
func decodeTask(name string, b []byte, st *zk.Stat) (taskRecord, string) {
	var r taskRecord
	id, err := parseName(name)
	if err != nil {
		return r, err.Error()
	}
	if why := persistent(st); why != "" {
		return r, why
	}
	if err := zkr.Decode(b, &r); err != nil {
		return r, err.Error()
	}
	switch {
	case r.V != formatVersion:
		return r, fmt.Sprintf("format version %d, want %d", r.V, formatVersion)
	case r.ID != id:
		return r, fmt.Sprintf("id %q in a node named for %q", r.ID, id)
	case len(r.Data) > MaxDataBytes:
		return r, fmt.Sprintf("data of %d bytes, at most %d", len(r.Data), MaxDataBytes)
	}
	return r, ""
}

// decodeAssign decodes and checks the data of assign/<worker>/<name>.
func decodeAssign(worker, name string, b []byte, st *zk.Stat) (assignRecord, string) {
	var r assignRecord
	id, err := parseName(name)
	if err != nil {
		return r, err.Error()
	}
	if why := persistent(st); why != "" {
		return r, why
	}
	if err := zkr.Decode(b, &r); err != nil {
		return r, err.Error()
	}
	switch {
	case r.V != formatVersion:
		return r, fmt.Sprintf("format version %d, want %d", r.V, formatVersion)
	case r.ID != id:
		return r, fmt.Sprintf("id %q in a node named for %q", r.ID, id)
	case r.Worker != worker:
		return r, fmt.Sprintf("worker %q in the directory of %q", r.Worker, worker)
	case r.Attempt < 1:
		return r, fmt.Sprintf("attempt %d < 1", r.Attempt)
	case len(r.Data) > MaxDataBytes:
		return r, fmt.Sprintf("data of %d bytes, at most %d", len(r.Data), MaxDataBytes)
	}
	return r, ""
}

// decodeResult decodes and checks the data of results/<name>.
func decodeResult(name string, b []byte, st *zk.Stat) (resultRecord, string) {
	var r resultRecord
	id, err := parseName(name)
	if err != nil {
		return r, err.Error()
	}
	if why := persistent(st); why != "" {
		return r, why
	}
	if err := zkr.Decode(b, &r); err != nil {
		return r, err.Error()
	}
	switch {
	case r.V != formatVersion:
		return r, fmt.Sprintf("format version %d, want %d", r.V, formatVersion)
	case r.ID != id:
		return r, fmt.Sprintf("id %q in a node named for %q", r.ID, id)
	case zkx.ValidName(r.Worker) != nil:
		return r, fmt.Sprintf("bad worker id %q", r.Worker)
	case r.Attempt < 1:
		return r, fmt.Sprintf("attempt %d < 1", r.Attempt)
	case len(r.Result) > MaxResultBytes:
		return r, fmt.Sprintf("result of %d bytes, at most %d", len(r.Result), MaxResultBytes)
	case len(r.Sum) != sumLen:
		return r, fmt.Sprintf("sum of %d bytes, want %d", len(r.Sum), sumLen)
	}
	return r, ""
}

// sameSum reports whether a result record was produced for data.
func (r resultRecord) sameSum(data []byte) bool { return bytes.Equal(r.Sum, dataSum(data)) }

// Task is a submitted task, as Pick sees it.
type Task struct {
	ID   string
	Data []byte
	// Submitted is the submitter's clock at Submit (informational).
	Submitted time.Time
}

// Assignment is one attempt of a task given to a worker: the node
// <dir>/assign/<worker>/t-<id>.
type Assignment struct {
	ID     string
	Data   []byte
	Worker string
	// Token is the fencing token of the assigner that made this attempt
	// (its term's or lease's czxid, 0 when the Fence has no Token): hand
	// it to systems outside ZooKeeper the task writes to.
	Token int64
	// Attempt is 1 for the first assignment, +1 for each reassignment.
	Attempt int
	// Submitted is the submitter's clock at Submit (informational).
	Submitted time.Time

	// czxid and version identify the assignment node (Report's fence).
	czxid   int64
	version int32
}

// Result is a task's outcome, as its worker reported it.
type Result struct {
	ID      string
	Worker  string
	Attempt int
	OK      bool
	Result  []byte
	// At is the worker's clock at Report (informational).
	At time.Time
}

func msTime(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

func (r resultRecord) result() Result {
	return Result{ID: r.ID, Worker: r.Worker, Attempt: r.Attempt, OK: r.OK, Result: r.Result, At: msTime(r.At)}
}
