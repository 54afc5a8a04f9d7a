package main

import (
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/roomlog/roomlog/checkpoint"
	"github.com/roomlog/roomlog/internal/cli"
)

// bootstrapProgress is serve's checkpoint fetch callback
// (replica.Config.CheckpointFetch.Progress, which the replica calls while
// it bootstraps from a peer's checkpoint): on a terminal it draws prog's
// bar (the log lines go through prog.Writer, so the two do not mix);
// otherwise, once a fetch has run for cli.ProgressAfter, it logs one line
// every cli.ProgressEvery with the bytes received, the total and the
// rate, and one when the checkpoint is verified.
func bootstrapProgress(log *slog.Logger, prog *cli.Progress) func(checkpoint.Progress) {
	var mu sync.Mutex
	var last time.Duration // Elapsed of the last line (0: none yet)
	return func(p checkpoint.Progress) {
		if prog != nil {
			if p.Stage == checkpoint.StageVerified {
				prog.Step("")
				return
			}
			prog.Step("bootstrap: fetching a checkpoint (%.1f MiB/s)", p.Rate/(1<<20))
			prog.Count(p.Bytes, p.Total, "bytes")
			return
		}
		mu.Lock()
		defer mu.Unlock()
		attrs := []any{"received_mib", mib(p.Bytes), "rate_mib_s", float64(int(p.Rate/(1<<20)*10)) / 10, "elapsed", p.Elapsed.Round(time.Millisecond)}
		if p.Total > 0 {
			attrs = append(attrs, "total_mib", mib(p.Total), "percent", p.Bytes*100/p.Total)
		}
		switch {
		case p.Stage == checkpoint.StageVerified:
			if last > 0 {
				log.Info("bootstrap: checkpoint fetched and verified", attrs...)
			}
			last = 0
		case p.Elapsed < last: // a new fetch
			last = 0
			fallthrough
		default:
			if p.Elapsed >= cli.ProgressAfter && (last == 0 || p.Elapsed-last >= cli.ProgressEvery) {
				log.Info("bootstrap: fetching a checkpoint", attrs...)
				last = p.Elapsed
			}
		}
	}
}

func mib(b int64) float64 { return float64(b*10/(1<<20)) / 10 }

// serveLogOutput is where serve's log goes: stderr, through a progress
// bar's writer when stderr is a terminal (the bar is then returned).
func serveLogOutput(stderr io.Writer) (io.Writer, *cli.Progress) {
	if !cli.IsTerminal(stderr) {
		return stderr, nil
	}
	prog := cli.StartProgress(stderr, "dfsmaster-demo serve", true)
	return prog.Writer(), prog
}
