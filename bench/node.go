package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/roomlog/roomlog/replica"
)

// The failover scenario needs replicas in separate processes (kill -9 of a
// primary process). The bench binary re-executes itself with the hidden
// first argument -node: it runs one replica and a tiny HTTP API on
// 127.0.0.1 and prints "READY <addr>" on stdout once it serves.
//
//	GET  /status                  nodeStatus as JSON
//	POST /propose[?wait=1]        body = entry; {"index": N}. wait=1 retries
//	                              ErrNotPrimary every millisecond until the
//	                              request ends (first ack on a new primary).
//	POST /transfer?to=ID          TransferLeadership(ctx, ID)
//	GET  <CheckpointPath(room)>   the replica's checkpoint handler

// nodeStatus is what GET /status returns.
type nodeStatus struct {
	ID        string `json:"id"`
	Role      string `json:"role"`
	Epoch     uint64 `json:"epoch"`
	Applied   uint64 `json:"applied"`
	Committed uint64 `json:"committed"`
	Primary   string `json:"primary"`
	Connected bool   `json:"connected"`
	Err       string `json:"err,omitempty"`
}

func runNode(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench -node", flag.ContinueOnError)
	fs.SetOutput(stderr)
	servers := fs.String("zk", "", "ZooKeeper addresses, comma-separated")
	room := fs.String("room", "", "room")
	id := fs.String("id", "", "member id")
	dir := fs.String("dir", "", "data dir")
	session := fs.Duration("session-timeout", 4*time.Second, "ZooKeeper session timeout")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintf(stderr, "node: %v\n", err)
		return 1
	}
	r, err := replica.Open(ctx, replica.Config{
		Servers:        strings.Split(*servers, ","),
		SessionTimeout: *session,
		Room:           *room,
		ID:             *id,
		DataDir:        *dir,
		AdvertiseAddr:  ln.Addr().String(),
		Logger:         log,
	})
	if err != nil {
		fmt.Fprintf(stderr, "node: %v\n", err)
		return 1
	}
	mux := http.NewServeMux()
	mux.Handle(replica.CheckpointPath(*room), r.CheckpointHandler())
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, req *http.Request) {
		st := r.Status()
		ns := nodeStatus{ID: st.ID, Role: st.Role.String(), Epoch: st.Epoch, Applied: st.Applied,
			Committed: st.Committed, Primary: st.PrimaryID, Connected: st.Connected}
		if st.Err != nil {
			ns.Err = st.Err.Error()
		}
		_ = json.NewEncoder(w).Encode(ns)
	})
	mux.HandleFunc("POST /propose", func(w http.ResponseWriter, req *http.Request) {
		entry, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		wait := req.URL.Query().Get("wait") == "1"
		for {
			res, err := r.Propose(req.Context(), entry)
			if err == nil {
				_ = json.NewEncoder(w).Encode(map[string]uint64{"index": res.Index})
				return
			}
			if wait && errors.Is(err, replica.ErrNotPrimary) && req.Context().Err() == nil {
				sleepCtx(req.Context(), time.Millisecond)
				continue
			}
			code := http.StatusInternalServerError
			if errors.Is(err, replica.ErrNotPrimary) {
				code = http.StatusServiceUnavailable
			}
			http.Error(w, err.Error(), code)
			return
		}
	})
	mux.HandleFunc("POST /transfer", func(w http.ResponseWriter, req *http.Request) {
		if err := r.TransferLeadership(req.Context(), req.URL.Query().Get("to")); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "READY %s\n", ln.Addr())
	code := 0
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		fmt.Fprintf(stderr, "node: serve: %v\n", err)
		code = 1
	}
	_ = srv.Close()
	if err := r.Close(); err != nil {
		fmt.Fprintf(stderr, "node: close: %v\n", err)
	}
	return code
}

// node is a replica process started by the bench.
type node struct {
	id, room, dir, logPath string
	url                    string // http://127.0.0.1:port
	proc                   *os.Process
	exited                 chan struct{}
	hc                     *http.Client
}

// startNode starts a replica process (or restarts one: same id and data
// dir) and waits until it serves its API.
func (b *bench) startNode(ctx context.Context, room, id string) (*node, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	n := &node{id: id, room: room, dir: fmt.Sprintf("%s/%s/%s", b.tmp, room, id),
		logPath: fmt.Sprintf("%s/%s/%s.log", b.tmp, room, id), exited: make(chan struct{}),
		hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	if err := os.MkdirAll(n.dir, 0o755); err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own descriptor
	cmd := newNodeCmd(exe, "-node", "-zk", strings.Join(b.ens.Addrs(), ","), "-room", room, "-id", id,
		"-dir", n.dir, "-session-timeout", b.cfg.sessionTimeout.String())
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	n.proc = cmd.Process
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), "READY "); ok {
				select {
				case ready <- addr:
				default:
				}
			}
		}
		_ = cmd.Wait() // reaps the child; stdout is at EOF by now
		close(n.exited)
	}()
	select {
	case addr := <-ready:
		n.url = "http://" + addr
		return n, nil
	case <-n.exited:
		return nil, fmt.Errorf("node %s exited before serving:\n%s", id, tail(n.logPath, 20))
	case <-time.After(60 * time.Second):
		n.kill()
		return nil, fmt.Errorf("node %s not ready after 60s:\n%s", id, tail(n.logPath, 20))
	case <-ctx.Done():
		n.kill()
		return nil, ctx.Err()
	}
}

// kill sends SIGKILL and waits until the process is reaped.
func (n *node) kill() {
	_ = n.proc.Signal(syscall.SIGKILL)
	<-n.exited
}

// stop sends SIGTERM, waits up to 15 s, then kills.
func (n *node) stop() {
	_ = n.proc.Signal(syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(15 * time.Second):
		n.kill()
	}
}

func (n *node) alive() bool {
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

func (n *node) status(ctx context.Context) (nodeStatus, error) {
	var st nodeStatus
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.url+"/status", nil)
	if err != nil {
		return st, err
	}
	resp, err := n.hc.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(resp.Body).Decode(&st)
	return st, err
}

func (n *node) post(ctx context.Context, path string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.url+path, strings.NewReader(string(body)))
	if err != nil {
		return nil, err
	}
	resp, err := n.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s %s: %s: %s", n.id, path, resp.Status, strings.TrimSpace(string(data)))
	}
	return data, nil
}

// propose sends one entry; wait makes the node retry until it leads.
func (n *node) propose(ctx context.Context, entry []byte, wait bool) (uint64, error) {
	path := "/propose"
	if wait {
		path += "?wait=1"
	}
	data, err := n.post(ctx, path, entry)
	if err != nil {
		return 0, err
	}
	var res struct{ Index uint64 }
	err = json.Unmarshal(data, &res)
	return res.Index, err
}

func tail(path string, lines int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	ls := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(ls[max(0, len(ls)-lines):], "\n")
}
