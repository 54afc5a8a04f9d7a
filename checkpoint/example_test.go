package checkpoint_test

import (
	"context"
	"fmt"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/roomlog/roomlog/checkpoint"
	"github.com/roomlog/roomlog/store"
)

func Example() {
	ctx := context.Background()
	tmp, err := os.MkdirTemp("", "checkpoint-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(tmp)

	// The source replica: a store at index 1.
	src, err := store.Open(filepath.Join(tmp, "primary"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close()
	data, _ := store.EncodeOps([]store.Op{{Kind: store.OpSet, Key: []byte("k"), Value: []byte("v")}})
	if _, err := src.Apply([]store.Entry{{Index: 1, Epoch: 1, Data: data}}); err != nil {
		log.Fatal(err)
	}

	// 1. Checkpoint it and serve the newest checkpoint over HTTP. The origin
	// is the room's name and the czxid of its znode (here made up).
	origin := checkpoint.Origin{Room: "room", RoomCzxid: 0x100000002}
	root := filepath.Join(tmp, "primary-ckpts")
	if _, err := checkpoint.Create(ctx, src, root, origin); err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(checkpoint.Handler(root))
	defer srv.Close()

	// 2. A new standby fetches (verified, of that origin only), restores and
	// opens it.
	info, err := checkpoint.Fetch(ctx, srv.URL, filepath.Join(tmp, "standby-ckpts"), checkpoint.FetchOptions{Origin: origin})
	if err != nil {
		log.Fatal(err)
	}
	storeDir := filepath.Join(tmp, "standby")
	if err := checkpoint.Restore(ctx, info.Path, storeDir, origin); err != nil {
		log.Fatal(err)
	}
	s, err := store.Open(storeDir, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	a, _, _ := src.StateHash()
	b, _, _ := s.StateHash()
	// 3. It tails the log from AppliedIndex()+1.
	fmt.Println("index:", s.AppliedIndex(), "same state:", a == b)
	// Output:
	// index: 1 same state: true
}
