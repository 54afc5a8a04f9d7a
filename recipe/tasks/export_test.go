package tasks

import (
	"math"
	"strings"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/recipe/internal/zkr"
	"github.com/roomlog/roomlog/zkx"
)

// EncodeTaskForTest is the data of a task node for id.
func EncodeTaskForTest(id string, data []byte) []byte {
	return zkr.Encode(taskRecord{V: formatVersion, ID: id, Data: data})
}

// EncodeAssignForTest is the data of an assignment node.
func EncodeAssignForTest(id, worker string, data []byte, attempt int) []byte {
	return zkr.Encode(assignRecord{V: formatVersion, ID: id, Data: data, Worker: worker, Attempt: attempt})
}

// AcceptForTest runs the acceptance check of kind ("task", "assign",
// "result") on a node: the foreign reason, "" when it counts.
func AcceptForTest(kind, worker, name string, data []byte, owner int64) string {
	st := &zk.Stat{EphemeralOwner: owner, Czxid: 7}
	switch kind {
	case "task":
		_, why := decodeTask(name, data, st)
		return why
	case "assign":
		_, why := decodeAssign(worker, name, data, st)
		return why
	default:
		_, why := decodeResult(name, data, st)
		return why
	}
}

// EncodeResultForTest is the data of a result node.
func EncodeResultForTest(id, worker string, attempt int, data []byte) []byte {
	return zkr.Encode(resultRecord{V: formatVersion, ID: id, Worker: worker, Attempt: attempt, OK: true, Sum: dataSum(data)})
}

// SetAfterReadAssignmentsForTest makes each round of a call f once it read
// the assignments (call it before Run).
func SetAfterReadAssignmentsForTest(a *Assigner, f func()) { a.afterReadAssignments = f }

// MaxNodeCostsForTest returns what Submit charges a child change of
// <dir>/tasks and of <dir>/results, and the largest record of each (a
// task of MaxDataBytes, a result of MaxResultBytes, the longest names,
// the largest integers): the charge must cover the largest node.
func MaxNodeCostsForTest() (taskCharge, taskMax, resultCharge, resultMax int64) {
	id := strings.Repeat("i", MaxIDLen)
	task := zkr.Encode(taskRecord{V: formatVersion, ID: id, Data: make([]byte, MaxDataBytes), Submitted: math.MaxInt64})
	res := zkr.Encode(resultRecord{V: formatVersion, ID: id, Worker: strings.Repeat("w", zkx.MaxNameLen), Attempt: math.MaxInt,
		OK: true, Result: make([]byte, MaxResultBytes), At: math.MaxInt64, Sum: make([]byte, sumLen)})
	name := nodeName(id)
	return maxTaskCost, nodeCost(name, int32(len(task))), maxResultCost, nodeCost(name, int32(len(res)))
}
