package lock_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/recipe/lock"
	"github.com/roomlog/roomlog/zkx"
)

// Example takes the lock and writes under it. It needs a running
// ZooKeeper, so it is compiled but not run (no Output comment).
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := zkx.Dial(ctx, zkx.DialConfig{Servers: []string{"127.0.0.1:2181"}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	m, err := lock.New(ctx, lock.Config{Client: c, Dir: "/dfs/locks/ns1", ID: "master-a"})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close(context.Background())

	l, err := m.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	// Lands only while this lease holds the lock, whatever happened to us.
	_, err = l.Multi(ctx, &zk.SetDataRequest{Path: "/dfs/ns1/owner", Data: []byte("master-a"), Version: -1})
	if errors.Is(err, lock.ErrLockLost) {
		log.Print("lost the lock; nothing was written")
	}
	log.Printf("fencing token for other stores: %d", l.Token())
	if err := l.Unlock(ctx); err != nil {
		log.Print(err)
	}
}
