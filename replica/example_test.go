package replica_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/replica"
	"github.com/roomlog/roomlog/store"
)

// Example opens a one-member room, waits to be primary, proposes an edit
// and reads it back.
func Example() {
	// The example runs against a real ZooKeeper; without one, Start fails
	// and so does the example (it never prints the expected output unrun).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ens, err := zkensemble.Start(ctx, zkensemble.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer ens.Close()
	dir, err := os.MkdirTemp("", "replica-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	r, err := replica.Open(ctx, replica.Config{
		Servers: ens.Addrs(),
		Room:    "example",
		ID:      "master-a",
		DataDir: dir,
		// Serve checkpoints for peers that bootstrap (or mount
		// r.CheckpointHandler() at replica.CheckpointPath("example")).
		ListenAddr: "127.0.0.1:0",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	// A master reacts to its role changes (serve writes, redirect, …).
	for rc := range r.RoleChanges() {
		if rc.Role == replica.RolePrimary {
			break
		}
	}
	fmt.Println("primary:", r.Status().Role == replica.RolePrimary)

	edit, _ := store.EncodeOps([]store.Op{{Kind: store.OpSet, Key: []byte("inode/1"), Value: []byte("/a/b")}})
	if _, err := r.Propose(ctx, edit); err != nil {
		log.Fatal(err)
	}
	v, err := r.Get([]byte("inode/1"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("value:", string(v))
	// Output:
	// primary: true
	// value: /a/b
}
