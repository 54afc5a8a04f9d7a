package membership_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/roomlog/roomlog/recipe/membership"
	"github.com/roomlog/roomlog/zkx"
)

// Example registers this master and watches its mates. It needs a running
// ZooKeeper, so it is compiled but not run (no Output comment).
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := zkx.Dial(ctx, zkx.DialConfig{Servers: []string{"127.0.0.1:2181"}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	reg, err := membership.Join(ctx, c, "/dfs/masters", "10.0.0.5:8080", []byte(`{"role":"standby"}`), membership.JoinOptions{})
	if err != nil {
		log.Fatal(err) // ErrIDInUse: another live process holds this id
	}
	defer reg.Leave(context.Background())

	w, err := membership.Watch(ctx, c, "/dfs/masters", membership.WatchOptions{
		OnJoin:  func(m membership.Member) { fmt.Println("up:", m.ID) },
		OnLeave: func(m membership.Member) { fmt.Println("down:", m.ID) },
		OnUpdate: func(old, cur membership.Member) {
			fmt.Println("changed:", cur.ID, string(old.Data), "->", string(cur.Data))
		},
		OnSession: func(e membership.SessionEvent) { fmt.Println("session:", e) },
	})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	for _, m := range w.Members() {
		fmt.Println("member:", m.ID, string(m.Data))
	}
	for _, f := range w.Foreign() {
		fmt.Println("ignored:", f.Path, f.Reason)
	}
	// Republish this member's data (written now, or by the rebuild if the
	// session is being replaced).
	if err := reg.Update(ctx, []byte(`{"role":"primary"}`)); err != nil {
		log.Println("update:", err)
	}
}
