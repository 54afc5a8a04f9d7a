package election_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/recipe/election"
	"github.com/roomlog/roomlog/zkx"
)

// Example runs a participant that leads when elected and writes only
// through its term's guard. It needs a running ZooKeeper, so it is
// compiled but not run (no Output comment).
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := zkx.Dial(ctx, zkx.DialConfig{Servers: []string{"127.0.0.1:2181"}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	p, err := election.Join(ctx, election.Config{Client: c, Dir: "/dfs/election", ID: "master-a", Data: []byte("10.0.0.5:8080")})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Resign(context.Background())

	term, err := p.Await(ctx)
	if err != nil {
		log.Fatal(err)
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for term.Err() == nil {
		select {
		case <-term.Done():
			continue // deposed or stepped down
		case <-tick.C:
		}
		if !term.Active() {
			continue // disconnected: it cannot know it leads; do not act
		}
		// Lands only while this term's node exists, whatever we believe.
		_, err := term.Multi(ctx, &zk.SetDataRequest{Path: "/dfs/state", Data: []byte("..."), Version: -1})
		if errors.Is(err, election.ErrLeadershipLost) {
			log.Print("deposed; nothing was written")
		}
	}
	// Hand over to a chosen successor.
	if err := p.Designate(ctx, "master-b"); err != nil && !errors.Is(err, election.ErrNotLeader) {
		log.Print(err)
	}
}
