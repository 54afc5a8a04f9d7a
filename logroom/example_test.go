package logroom_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/roomlog/roomlog/logroom"
)

// Example shows the primary and standby sides of a room. It needs a running
// ZooKeeper, so it is compiled but not run (no Output comment).
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := logroom.Dial(ctx, logroom.DialConfig{Servers: []string{"127.0.0.1:2181"}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	room, err := logroom.OpenRoom(ctx, c, "namespace", logroom.RoomOptions{})
	if err != nil {
		log.Fatal(err)
	}

	// Primary: take over (fencing every older writer) and append.
	w, err := room.NewWriter(ctx, logroom.WriterConfig{Owner: "master-1"})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	last, err := w.Append(ctx, []byte("mkdir /a"), []byte("create /a/f"))
	if err != nil {
		log.Fatal(err) // ErrFenced: deposed; ErrOutcomeUnknown: read the log to learn
	}

	// Standby: tail from its applied index + 1.
	rd, err := room.Tail(ctx, 1)
	if err != nil {
		log.Fatal(err) // ErrCompacted: bootstrap from a checkpoint first
	}
	defer rd.Close()
	for rd.Position() <= last {
		entries, err := rd.Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		for _, e := range entries {
			fmt.Printf("%d@%d %s\n", e.Index, e.Epoch, e.Data)
		}
	}

	// Checkpoint flow: rotate, checkpoint up to sealed.LastIndex, then delete.
	sealed, err := w.Rotate(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if err := room.DeleteChannel(ctx, sealed.Num); err != nil {
		log.Fatal(err)
	}
}
