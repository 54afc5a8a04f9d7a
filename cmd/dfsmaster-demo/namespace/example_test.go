package namespace_test

import (
	"fmt"
	"os"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/namespace"
	"github.com/roomlog/roomlog/store"
)

// A store that applies namespace commands, fed by hand the way a replica
// feeds it from the log.
func Example() {
	dir, err := os.MkdirTemp("", "namespace-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	st, err := store.Open(dir, &store.Options{Applier: namespace.Applier{}})
	if err != nil {
		panic(err)
	}
	defer st.Close()

	for _, c := range []namespace.Command{
		{Op: namespace.OpMkdir, Path: "/data/logs", Parents: true},
		{Op: namespace.OpCreate, Path: "/data/logs/today", Replication: 3},
		{Op: namespace.OpAddBlock, Path: "/data/logs/today", Size: 128 << 20},
		{Op: namespace.OpCreate, Path: "/data/logs/today", Replication: 3},
	} {
		entry, err := namespace.EncodeCommand(c)
		if err != nil {
			panic(err)
		}
		index := st.AppliedIndex() + 1
		raw, err := st.Apply([]store.Entry{{Index: index, Epoch: 1, Data: entry}})
		if err != nil {
			panic(err)
		}
		resp, err := namespace.DecodeResponse(raw[0])
		if err != nil {
			panic(err)
		}
		fmt.Printf("%d %s: block %d, err %v\n", index, c.Op, resp.BlockID, resp.Err())
	}

	view, err := st.View()
	if err != nil {
		panic(err)
	}
	defer view.Close()
	entries, err := namespace.Ls(view, "/data/logs")
	if err != nil {
		panic(err)
	}
	fmt.Printf("at index %d: %+v\n", view.Index(), entries)
	// Output:
	// 1 mkdir: block 0, err <nil>
	// 2 create: block 0, err <nil>
	// 3 addblock: block 1, err <nil>
	// 4 create: block 0, err already exists: create /data/logs/today: already exists
	// at index 4: [{Name:today Type:file Size:134217728 Replication:3 Blocks:1}]
}
