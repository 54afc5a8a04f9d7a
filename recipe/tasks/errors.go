package tasks

import "errors"

// Sentinel errors, wrapped by the errors this package returns (check with
// errors.Is). ZooKeeper errors stay visible in the chain.
var (
	// ErrBadConfig: an invalid argument or AssignerConfig field (a
	// directory, a task or worker id, a nil client, data too large).
	// Nothing was sent.
	ErrBadConfig = errors.New("tasks: bad config")
	// ErrConflict: Submit of an id that is already submitted, assigned or
	// finished with other data. Nothing was written.
	ErrConflict = errors.New("tasks: id already submitted with other data")
	// ErrTooMany: Submit found MaxOpen tasks waiting in <dir>/tasks, or
	// MaxOpen results not yet deleted in <dir>/results. Nothing was
	// written; retry once the assigner or the clients made room.
	ErrTooMany = errors.New("tasks: too many open tasks")
	// ErrFull: Submit found the bytes of <dir>/tasks or <dir>/results
	// (as the assigner last published them, each change since counted
	// at the largest size a node can have) at their bound
	// (AssignerConfig.MaxWaitingBytes, MaxFinishedBytes). Nothing was
	// written; retry once the assigner or the clients made room. It is
	// backpressure, like ErrTooMany.
	ErrFull = errors.New("tasks: task directory full")
	// ErrFenced: the assigner's fence is lost (its term or lease ended,
	// or ZooKeeper refused a guarded write): nothing of that write was
	// applied, and Run returns it.
	ErrFenced = errors.New("tasks: fence lost")
	// ErrReassigned: Report of an assignment that is no longer this
	// worker's (reassigned after its session was lost, or deleted): the
	// result was not recorded.
	ErrReassigned = errors.New("tasks: assignment no longer held")
	// ErrMalformed: a znode of the recipe whose name or data breaks the
	// format (a forged or foreign node); it names the path.
	ErrMalformed = errors.New("tasks: malformed znode")
	// ErrClosed: the Worker was closed.
	ErrClosed = errors.New("tasks: closed")
)
