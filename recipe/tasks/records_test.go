package tasks_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/recipe/tasks"
	"github.com/roomlog/roomlog/zkx"
)

// TestAcceptance: the acceptance rules of each kind of node, on good
// nodes and on forged ones.
func TestAcceptance(t *testing.T) {
	task := tasks.EncodeTaskForTest("a", []byte("x"))
	asg := tasks.EncodeAssignForTest("a", "w1", []byte("x"), 1)
	res := tasks.EncodeResultForTest("a", "w1", 1, []byte("x"))
	for _, tc := range []struct {
		name, kind, worker, node string
		data                     []byte
		owner                    int64
		want                     string // substring of the reason, "" accepted
	}{
		{"task ok", "task", "", "t-a", task, 0, ""},
		{"task ephemeral", "task", "", "t-a", task, 5, "ephemeral"},
		{"task bad prefix", "task", "", "a", task, 0, "does not start"},
		{"task bad id", "task", "", "t-", task, 0, "bad task id"},
		{"task other id", "task", "", "t-b", task, 0, "in a node named for"},
		{"task garbage", "task", "", "t-a", []byte{0xc1}, 0, "malformed"},
		{"task empty", "task", "", "t-a", nil, 0, "malformed"},
		{"task assignment data", "task", "", "t-a", res, 0, ""}, // msgpack maps decode loosely: id matches
		{"assign ok", "assign", "w1", "t-a", asg, 0, ""},
		{"assign other worker", "assign", "w2", "t-a", asg, 0, "in the directory of"},
		{"assign attempt 0", "assign", "w1", "t-a", tasks.EncodeAssignForTest("a", "w1", nil, 0), 0, "attempt 0"},
		{"assign task data", "assign", "w1", "t-a", task, 0, "worker"},
		{"result ok", "result", "", "t-a", res, 0, ""},
		{"result no sum", "result", "", "t-a", task, 0, "bad worker"},
		{"result ephemeral", "result", "", "t-a", res, 9, "ephemeral"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			why := tasks.AcceptForTest(tc.kind, tc.worker, tc.node, tc.data, tc.owner)
			if tc.want == "" {
				require.Empty(t, why)
				return
			}
			require.Contains(t, why, tc.want)
		})
	}
}

// TestHostileData: random bytes and mutations of good records never
// panic any decoder.
func TestHostileData(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	good := [][]byte{
		tasks.EncodeTaskForTest("a", []byte(strings.Repeat("x", 100))),
		tasks.EncodeAssignForTest("a", "w1", []byte("x"), 3),
		tasks.EncodeResultForTest("a", "w1", 1, []byte("x")),
	}
	for i := 0; i < 20000; i++ {
		var b []byte
		if i%2 == 0 {
			b = make([]byte, rng.IntN(64))
			for j := range b {
				b[j] = byte(rng.IntN(256))
			}
		} else {
			b = append([]byte(nil), good[rng.IntN(len(good))]...)
			for k := 0; k < 1+rng.IntN(4); k++ {
				b[rng.IntN(len(b))] = byte(rng.IntN(256))
			}
			b = b[:rng.IntN(len(b)+1)]
		}
		for _, kind := range []string{"task", "assign", "result"} {
			_ = tasks.AcceptForTest(kind, "w1", "t-a", b, 0)
		}
	}
}

// TestValidateMaxOpenBytes: MaxOpenBytes is 0 (the default) or at least
// MaxDataBytes; anything else is ErrBadConfig naming the field.
func TestValidateMaxOpenBytes(t *testing.T) {
	fence := nodeFence{path: "/fence"}
	for _, tc := range []struct {
		bytes int
		ok    bool
	}{
		{0, true},
		{tasks.MaxDataBytes, true},
		{tasks.DefaultMaxOpenBytes, true},
		{tasks.MaxDataBytes - 1, false},
		{-1, false},
	} {
		t.Run(fmt.Sprint(tc.bytes), func(t *testing.T) {
			err := tasks.AssignerConfig{Client: &zkx.Client{}, Dir: "/d", Fence: fence, MaxOpenBytes: tc.bytes}.Validate()
			if tc.ok {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tasks.ErrBadConfig)
			require.ErrorContains(t, err, "MaxOpenBytes")
		})
	}
}

// TestMaxNodeCost: what Submit charges each child change since a
// published total covers the largest node the recipe writes there.
func TestMaxNodeCost(t *testing.T) {
	taskCharge, taskMax, resultCharge, resultMax := tasks.MaxNodeCostsForTest()
	require.GreaterOrEqual(t, taskCharge, taskMax)
	require.GreaterOrEqual(t, resultCharge, resultMax)
	require.Less(t, taskCharge-taskMax, int64(256), "the charge is close to the largest node")
}
