package tasks

import "github.com/roomlog/roomlog/recipe/internal/zkr"

// EncodeTaskForTest is the data of a task node for id.
func EncodeTaskForTest(id string, data []byte) []byte {
	return zkr.Encode(taskRecord{V: formatVersion, ID: id, Data: data})
}

// EncodeAssignForTest is the data of an assignment node.
func EncodeAssignForTest(id, worker string, data []byte, attempt int) []byte {
	return zkr.Encode(assignRecord{V: formatVersion, ID: id, Data: data, Worker: worker, Attempt: attempt})
}
