package store_test

import (
	"fmt"
	"log"
	"os"

	"github.com/roomlog/roomlog/store"
)

func Example() {
	dir, err := os.MkdirTemp("", "store-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	s, err := store.Open(dir, nil) // OpsApplier, SyncEveryBatch
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	// Entries come from the log, in index order; each is EncodeOps output.
	mk := func(index uint64, ops ...store.Op) store.Entry {
		data, err := store.EncodeOps(ops)
		if err != nil {
			log.Fatal(err)
		}
		return store.Entry{Index: index, Epoch: 1, Data: data}
	}
	_, err = s.Apply([]store.Entry{
		mk(1, store.Op{Kind: store.OpSet, Key: []byte("/dir/a"), Value: []byte("inode 7")}),
		mk(2, store.Op{Kind: store.OpSet, Key: []byte("/dir/b"), Value: []byte("inode 8")}),
		mk(3, store.Op{Kind: store.OpDelete, Key: []byte("/dir/a")}),
	})
	if err != nil {
		log.Fatal(err)
	}
	// A gap is refused.
	_, err = s.Apply([]store.Entry{mk(5, store.Op{Kind: store.OpDelete, Key: []byte("x")})})
	fmt.Println("gap refused:", err != nil)

	s.ScanPrefix([]byte("/dir/"), func(k, v []byte) error {
		fmt.Printf("%s = %s\n", k, v)
		return nil
	})
	_, index, _ := s.StateHash()
	fmt.Println("applied:", s.AppliedIndex(), "hash at", index)
	// Output:
	// gap refused: true
	// /dir/b = inode 8
	// applied: 3 hash at 3
}
