package tasks_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/roomlog/roomlog/recipe/election"
	"github.com/roomlog/roomlog/recipe/tasks"
	"github.com/roomlog/roomlog/zkx"
)

// Example runs a master (assigning under its election term), a worker and
// a client. It needs a running ZooKeeper, so it is compiled but not run
// (no Output comment).
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := zkx.Dial(ctx, zkx.DialConfig{Servers: []string{"127.0.0.1:2181"}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	const dir = "/dfs/rerepl"

	// Master: assign for every term won.
	p, err := election.Join(ctx, election.Config{Client: c, Dir: "/dfs/election", ID: "master-a"})
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		for {
			term, err := p.Await(ctx)
			if err != nil {
				return
			}
			a, err := tasks.NewAssigner(tasks.AssignerConfig{Client: c, Dir: dir, Fence: term})
			if err != nil {
				log.Fatal(err)
			}
			if err := a.Run(ctx); !errors.Is(err, tasks.ErrFenced) {
				return
			}
		}
	}()

	// Worker: execute and report.
	w, err := tasks.JoinWorker(ctx, c, dir, "cs-7", tasks.WorkerOptions{Data: []byte("10.0.0.7:9000")})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	go func() {
		for a := range w.Assignments() {
			err := w.Report(ctx, a, true, []byte("copied "+string(a.Data)))
			if errors.Is(err, tasks.ErrReassigned) {
				log.Printf("task %s attempt %d moved to another worker", a.ID, a.Attempt)
			}
		}
	}()

	// Client: submit (idempotent per id), wait, delete the result.
	if err := tasks.Submit(ctx, c, dir, "blk-42", []byte("blk-42 to cs-7")); err != nil {
		log.Fatal(err)
	}
	r, err := tasks.WaitResult(ctx, c, dir, "blk-42")
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("%s: ok=%v by %s (attempt %d)", r.ID, r.OK, r.Worker, r.Attempt)
	_ = tasks.DeleteResult(ctx, c, dir, "blk-42")
}
