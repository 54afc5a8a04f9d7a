package testnode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/roomlog/roomlog/internal/infra/procstat"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/replica"
	"github.com/roomlog/roomlog/tlsfiles"

	"github.com/roomlog/roomlog/internal/infra/spawn"
)

// DefaultSessionTimeout is the ZooKeeper session timeout of a test node
// (NodeOptions.SessionTimeout, the node binary's --session-timeout) unless
// told otherwise: shorter than logroom.DefaultSessionTimeout so failover
// tests finish sooner.
const DefaultSessionTimeout = 2 * time.Second

// Errors of the process harness.
var (
	// ErrInvalidOptions: NodeOptions.Validate found bad fields.
	ErrInvalidOptions = errors.New("testnode: invalid node options")
	// ErrExited: the node process exited while it was being waited for.
	ErrExited = errors.New("testnode: node process exited")
	// ErrRunning: the operation needs a node that is not running (WipeData).
	ErrRunning = errors.New("testnode: node is running")
	// ErrNotRunning: the operation needs a running node (Pause, Resume).
	ErrNotRunning = errors.New("testnode: node is not running")
	// ErrClosed: the Node was closed.
	ErrClosed = errors.New("testnode: node closed")
)

// Harness timeouts.
const (
	DefaultStartTimeout = 90 * time.Second
	stopTimeout         = 30 * time.Second // SIGTERM, then SIGKILL
	exitTimeout         = 30 * time.Second // after SIGKILL
	pollInterval        = 10 * time.Millisecond
)

// NodeOptions configure one node process. Zero numeric fields leave the
// replica's defaults (flags are passed only when set).
type NodeOptions struct {
	// Binary is the roomlog-testnode executable. "": Build(ctx).
	Binary string
	// ZK are the ZooKeeper client addresses. Required.
	ZK []string
	// Room and ID name the room and this member. Required.
	Room, ID string
	// Dir is the node's own directory: Dir/data is the replica's DataDir,
	// Dir/node.log its log (every launch appended), Dir/addr the API
	// address of the current launch. Required; created if missing.
	Dir string
	// HTTPAddr is the API listen address of the first launch (default
	// "127.0.0.1:0"). Restarts reuse the address the node had, if free.
	HTTPAddr string
	// Advertise is the address peers fetch checkpoints from (--advertise;
	// default the bound HTTP address): a faultnet proxy in front of it
	// puts the node's checkpoint traffic on a link a test can break.
	Advertise string
	// FetchIdleTimeout bounds a checkpoint fetch that makes no progress
	// (0: the checkpoint package's default).
	FetchIdleTimeout time.Duration

	SessionTimeout       time.Duration // default DefaultSessionTimeout (2s)
	CheckpointEvery      int           // entries; <0 off
	CheckpointEveryBytes int64         // <0 off
	KeepCheckpoints      int
	RetainBytes          int64 // <0 off
	MaxRoomBytes         int64
	MaxChannelBatches    int
	MaxChannelBytes      int64
	MaxBatchBytes        int
	MaxPending           int
	TransferTimeout      time.Duration
	MemberUpdate         time.Duration
	Sync                 string // "every" (default) or "group"
	// Observer starts the replica as an observer (--observer,
	// replica.Config.Observer): it never leads.
	Observer bool
	LogLevel string // default "info"
	// TLS, when set, runs the node over TLS: to ZooKeeper (its
	// secureClientPort; ZK must name those ports) with x509 ACLs, and
	// mutual TLS between members on a checkpoint port of its own.
	TLS *NodeTLS
	// Archive is the room's continuous archive, a directory every member
	// of the room shares (--archive, replica.Config.Archive with
	// archive.OpenDir). "": none. SetArchive changes it between launches
	// (the previous release's binary has no such flag).
	Archive   string
	ExtraArgs []string

	// StartTimeout bounds a launch until the API serves /status (the
	// replica is open). Default 90s.
	StartTimeout time.Duration
	// Logger receives the harness's own logs (launch, kill…). nil: discard.
	Logger *slog.Logger
}

// NodeTLS is a node's TLS (the node binary's --zk-tls-*, --zk-acl-x509,
// --peer-tls-* and --peer-listen). Files are read by the node, which
// follows their rotation (tlsfiles): replace them in place to rotate.
type NodeTLS struct {
	// ZK: the ZooKeeper servers' CA and this member's client certificate
	// (replica.Config.ZooKeeperTLS); ZKACL the x509 identities granted
	// ALL on what it creates (replica.Config.ACLIdentities: every member
	// of the room lists the same ones, its own included).
	ZK    tlsfiles.Files
	ZKACL []string
	// Peer: mutual TLS between members (replica.Config.PeerTLS), the
	// checkpoint endpoint served over HTTPS on PeerListen (host:port),
	// reached by peers at Advertise. Empty Peer: plain HTTP on the API
	// port. A Cluster with a Net picks PeerListen and puts the
	// "peers-><id>" proxy in front of it.
	Peer       tlsfiles.Files
	PeerListen string
}

func (t *NodeTLS) args() []string {
	if t == nil {
		return nil
	}
	var a []string
	if t.ZK != (tlsfiles.Files{}) {
		a = append(a, "--zk-tls-ca", t.ZK.CA, "--zk-tls-cert", t.ZK.Cert, "--zk-tls-key", t.ZK.Key)
		for _, id := range t.ZKACL {
			a = append(a, "--zk-acl-x509", id)
		}
	}
	if t.Peer != (tlsfiles.Files{}) {
		a = append(a, "--peer-tls-ca", t.Peer.CA, "--peer-tls-cert", t.Peer.Cert, "--peer-tls-key", t.Peer.Key, "--peer-listen", t.PeerListen)
	}
	return a
}

// Validate names every bad field.
func (o NodeOptions) Validate() error {
	var errs []error
	bad := func(field, why string) { errs = append(errs, fmt.Errorf("%w: %s %s", ErrInvalidOptions, field, why)) }
	if len(o.ZK) == 0 {
		bad("ZK", "is empty")
	}
	if err := logroom.ValidateName(o.Room); err != nil {
		bad("Room", err.Error())
	}
	if o.ID == "" || strings.ContainsAny(o.ID, "/\x00") {
		bad("ID", fmt.Sprintf("%q is empty or holds '/'", o.ID))
	}
	if o.Dir == "" {
		bad("Dir", "is empty")
	}
	if o.TLS != nil && o.TLS.Peer != (tlsfiles.Files{}) && o.TLS.PeerListen == "" {
		bad("TLS.PeerListen", "is empty while TLS.Peer is set")
	}
	if o.Sync != "" && o.Sync != "every" && o.Sync != "group" {
		bad("Sync", fmt.Sprintf("%q is not every or group", o.Sync))
	}
	if o.SessionTimeout < 0 || o.StartTimeout < 0 || o.TransferTimeout < 0 || o.MemberUpdate < 0 {
		bad("durations", "must not be negative")
	}
	return errors.Join(errs...)
}

// DataDir is the replica's data directory.
func (o NodeOptions) DataDir() string { return filepath.Join(o.Dir, "data") }

func (o NodeOptions) args(httpAddr, addrFile string) []string {
	st := o.SessionTimeout
	if st == 0 {
		st = DefaultSessionTimeout
	}
	a := []string{
		"--zk", strings.Join(o.ZK, ","), "--room", o.Room, "--id", o.ID,
		"--data", o.DataDir(), "--http", httpAddr, "--addr-file", addrFile,
		"--session-timeout", st.String(),
	}
	addInt := func(flag string, v int64) {
		if v != 0 {
			a = append(a, flag, strconv.FormatInt(v, 10))
		}
	}
	addInt("--checkpoint-every", int64(o.CheckpointEvery))
	addInt("--checkpoint-every-bytes", o.CheckpointEveryBytes)
	addInt("--keep-checkpoints", int64(o.KeepCheckpoints))
	addInt("--retain-bytes", o.RetainBytes)
	addInt("--max-room-bytes", o.MaxRoomBytes)
	addInt("--max-channel-batches", int64(o.MaxChannelBatches))
	addInt("--max-channel-bytes", o.MaxChannelBytes)
	addInt("--max-batch-bytes", int64(o.MaxBatchBytes))
	addInt("--max-pending", int64(o.MaxPending))
	if o.TransferTimeout > 0 {
		a = append(a, "--transfer-timeout", o.TransferTimeout.String())
	}
	if o.Advertise != "" {
		a = append(a, "--advertise", o.Advertise)
	}
	if o.FetchIdleTimeout > 0 {
		a = append(a, "--fetch-idle-timeout", o.FetchIdleTimeout.String())
	}
	if o.MemberUpdate > 0 {
		a = append(a, "--member-update", o.MemberUpdate.String())
	}
	if o.Sync != "" {
		a = append(a, "--sync", o.Sync)
	}
	if o.LogLevel != "" {
		a = append(a, "--log-level", o.LogLevel)
	}
	if o.Observer {
		a = append(a, "--observer")
	}
	if o.Archive != "" {
		a = append(a, "--archive", o.Archive)
	}
	a = append(a, o.TLS.args()...)
	return append(a, o.ExtraArgs...)
}

// Node is one roomlog-testnode process (and its restarts). All methods are
// safe for concurrent use; lifecycle operations (Restart, Kill, Stop,
// WipeData, Close) are serialised.
type Node struct {
	opts NodeOptions
	log  *slog.Logger
	sp   *spawn.Spawner

	ops sync.Mutex // serialises lifecycle operations

	mu       sync.Mutex  // guards proc, addr, client, closed, paused, launches
	proc     *spawn.Proc // the current (or last) launch
	addr     string
	client   *Client
	closed   bool
	paused   bool
	launches int
}

// Start launches a node process and waits until its replica is open (the
// API answers /status). On failure nothing is left running and the error
// carries the log's tail.
func Start(ctx context.Context, opts NodeOptions) (*Node, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Binary == "" {
		bin, err := Build(ctx)
		if err != nil {
			return nil, err
		}
		opts.Binary = bin
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = DefaultStartTimeout
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("testnode: %w", err)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	n := &Node{opts: opts, log: log.With("node", opts.ID), sp: spawn.New()}
	n.ops.Lock()
	err := n.launch(ctx)
	n.ops.Unlock()
	if err != nil {
		_ = n.Close()
		return nil, err
	}
	return n, nil
}

// StartForTest is Start for a test: it fails t on error, kills the node on
// cleanup and, when the test failed, logs the tail of the node's log first.
func StartForTest(t testing.TB, opts NodeOptions) *Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	n, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("start node: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log of node %s (%s):\n%s", n.ID(), n.LogPath(), n.LogTail(60))
		}
		_ = n.Close()
	})
	return n
}

// ID is the node's member id.
func (n *Node) ID() string { return n.opts.ID }

// Options returns the node's options (Binary filled in).
func (n *Node) Options() NodeOptions { return n.opts }

// Addr is the API address ("host:port") of the current (or last) launch.
func (n *Node) Addr() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.addr
}

// Client returns the API client of the current (or last) launch.
func (n *Node) Client() *Client {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.client
}

// PID returns the pid of the current launch (0 if none ran yet).
func (n *Node) PID() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil {
		return 0
	}
	return n.proc.Pid()
}

// Running reports whether the node process is alive (paused counts).
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.proc != nil && !n.proc.Exited()
}

// Paused reports whether the node is running and SIGSTOPped by Pause.
func (n *Node) Paused() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.proc != nil && !n.proc.Exited() && n.paused
}

// Live reports whether the node is running and not paused.
func (n *Node) Live() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.proc != nil && !n.proc.Exited() && !n.paused
}

// Exited returns a channel closed when the current launch's process ends
// (nil if none ran), and ExitErr its wait status.
func (n *Node) Exited() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil {
		return nil
	}
	return n.proc.Done()
}

// ExitErr returns the current launch's exit status once it exited (nil
// for a clean exit or while running).
func (n *Node) ExitErr() error {
	n.mu.Lock()
	p := n.proc
	n.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.Err()
}

// Launches counts the node's launches (1 after Start).
func (n *Node) Launches() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.launches
}

// LogPath is the node's log file.
func (n *Node) LogPath() string { return filepath.Join(n.opts.Dir, "node.log") }

// DataDir is the replica's data directory.
func (n *Node) DataDir() string { return n.opts.DataDir() }

// LogTail returns the last lines lines of the node's log.
func (n *Node) LogTail(lines int) string {
	b, err := os.ReadFile(n.LogPath())
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	return tailLines(b, lines)
}

func tailLines(b []byte, lines int) string {
	b = bytes.TrimRight(b, "\n")
	i := len(b)
	for k := 0; k < lines && i > 0; k++ {
		j := bytes.LastIndexByte(b[:i], '\n')
		if j < 0 {
			i = 0
			break
		}
		i = j
	}
	if i > 0 {
		i++ // skip the newline
	}
	return string(b[i:])
}

func (n *Node) addrFile() string { return filepath.Join(n.opts.Dir, "addr") }

// launch starts the binary and waits until it serves. The caller holds ops.
func (n *Node) launch(ctx context.Context) error {
	n.mu.Lock()
	closed, httpAddr := n.closed, n.addr
	n.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if httpAddr == "" {
		httpAddr = n.opts.HTTPAddr
	}
	if httpAddr == "" {
		httpAddr = "127.0.0.1:0"
	}
	err := n.launchAt(ctx, httpAddr)
	if err != nil && httpAddr != "127.0.0.1:0" && strings.Contains(err.Error(), "address already in use") {
		n.log.Info("testnode: address taken, launching on a new port", "addr", httpAddr)
		err = n.launchAt(ctx, "127.0.0.1:0")
	}
	return err
}

func (n *Node) launchAt(ctx context.Context, httpAddr string) error {
	if err := os.Remove(n.addrFile()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("testnode %s: %w", n.opts.ID, err)
	}
	logf, err := os.OpenFile(n.LogPath(), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("testnode %s: log: %w", n.opts.ID, err)
	}
	defer logf.Close() // the child holds its own descriptor
	logStart, _ := logf.Seek(0, io.SeekEnd)
	args := n.opts.args(httpAddr, n.addrFile())
	fmt.Fprintf(logf, "==== testnode: launching %s at %s: %s %s ====\n", n.opts.ID,
		time.Now().Format(time.RFC3339Nano), n.opts.Binary, strings.Join(args, " "))
	cmd := exec.Command(n.opts.Binary, args...)
	cmd.Dir = n.opts.Dir
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = spawn.SysProcAttr()
	p, err := n.sp.Launch(cmd) // reaped by spawn; Close waits for it (Kill)
	if err != nil {
		return fmt.Errorf("testnode %s: start %s: %w", n.opts.ID, n.opts.Binary, err)
	}
	n.mu.Lock()
	n.proc, n.paused = p, false
	n.launches++
	n.mu.Unlock()
	n.log.Info("testnode: launched", "pid", p.Pid(), "http", httpAddr)

	wctx, cancel := context.WithTimeout(ctx, n.opts.StartTimeout)
	defer cancel()
	if err := n.waitServing(wctx, p); err != nil {
		if !p.Exited() {
			p.Signal(syscall.SIGKILL)
			_ = p.WaitExit(exitTimeout)
		}
		return fmt.Errorf("testnode %s: launch: %w\n--- log of this launch (tail) ---\n%s", n.opts.ID, err, n.logSince(logStart, 40))
	}
	return nil
}

// logSince returns the tail of what the log got from offset on.
func (n *Node) logSince(offset int64, lines int) string {
	b, err := os.ReadFile(n.LogPath())
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	if offset >= 0 && offset <= int64(len(b)) {
		b = b[offset:]
	}
	return tailLines(b, lines)
}

// waitServing waits for the addr file, then for /status to answer.
func (n *Node) waitServing(ctx context.Context, p *spawn.Proc) error {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	var c *Client
	var last error
	for {
		if c == nil {
			if b, err := os.ReadFile(n.addrFile()); err == nil && len(b) > 0 {
				addr := string(b)
				c = NewClient(n.opts.ID, addr, nil)
				n.mu.Lock()
				if n.client != nil {
					n.client.CloseIdle()
				}
				n.addr, n.client = addr, c
				n.mu.Unlock()
			}
		}
		if c != nil {
			sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := c.Status(sctx)
			cancel()
			if err == nil {
				return nil
			}
			last = err
		}
		select {
		case <-p.Done():
			return fmt.Errorf("%w: %v", ErrExited, p.Err())
		case <-ctx.Done():
			return fmt.Errorf("not serving (last: %v): %w", last, ctx.Err())
		case <-t.C:
		}
	}
}

func (n *Node) current() *spawn.Proc {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.proc
}

// Kill sends SIGKILL and waits until the process was reaped. A node that
// is not running is left alone.
func (n *Node) Kill() error {
	n.ops.Lock()
	defer n.ops.Unlock()
	return n.kill()
}

func (n *Node) kill() error {
	p := n.current()
	if p == nil || p.Exited() {
		return nil
	}
	p.Signal(syscall.SIGKILL)
	err := p.WaitExit(exitTimeout)
	n.log.Info("testnode: killed", "pid", p.Pid())
	return err
}

// Stop sends SIGTERM (and SIGCONT, so a paused node gets it) and waits
// until the node exited (it leaves the room, a primary handing its role
// to a standby first: replica.Shutdown), falling
// back to SIGKILL after 30 s.
func (n *Node) Stop() error {
	n.ops.Lock()
	defer n.ops.Unlock()
	return n.stop()
}

func (n *Node) stop() error {
	p := n.current()
	if p == nil || p.Exited() {
		return nil
	}
	p.Signal(syscall.SIGTERM)
	p.Signal(syscall.SIGCONT)
	if err := p.WaitExit(stopTimeout); err != nil {
		n.log.Warn("testnode: SIGTERM ignored, killing", "pid", p.Pid())
		p.Signal(syscall.SIGKILL)
		return p.WaitExit(exitTimeout)
	}
	n.log.Info("testnode: stopped", "pid", p.Pid(), "exit", p.Err())
	return nil
}

// Pause sends SIGSTOP and waits until every thread is stopped.
func (n *Node) Pause() error { return n.pauseResume(syscall.SIGSTOP) }

// Resume sends SIGCONT and waits until no thread is stopped.
func (n *Node) Resume() error { return n.pauseResume(syscall.SIGCONT) }

func (n *Node) pauseResume(sig syscall.Signal) error {
	n.mu.Lock()
	p := n.proc
	if p == nil || p.Exited() {
		n.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrNotRunning, n.opts.ID)
	}
	stop := sig == syscall.SIGSTOP
	p.Signal(sig)
	n.paused = stop
	n.mu.Unlock()
	n.log.Info("testnode: signalled", "pid", p.Pid(), "signal", sig.String())
	deadline := time.Now().Add(exitTimeout)
	for {
		all, anyStopped, ok := procstat.ThreadsStopped(p.Pid())
		if !ok || p.Exited() || (stop && all) || (!stop && !anyStopped) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testnode %s: pid %d: %v not in effect after %v", n.opts.ID, p.Pid(), sig, exitTimeout)
		}
		time.Sleep(time.Millisecond) // polling /proc: there is no event for a stop
	}
}

// Restart stops the node (SIGTERM) if it runs, then launches it again with
// the same options, data and, if still free, the same API address, and
// waits until it serves.
func (n *Node) Restart(ctx context.Context) error {
	n.ops.Lock()
	defer n.ops.Unlock()
	if err := n.stop(); err != nil {
		return err
	}
	return n.launch(ctx)
}

// SetBinary makes the node's next launches run bin (a rolling upgrade
// or downgrade: stop, SetBinary, Restart); the running process is left
// alone.
func (n *Node) SetBinary(bin string) {
	n.ops.Lock()
	defer n.ops.Unlock()
	n.mu.Lock()
	n.opts.Binary = bin
	n.mu.Unlock()
}

// SetArchive makes the node's next launches use the archive directory
// dir ("": none; NodeOptions.Archive); the running process is left
// alone.
func (n *Node) SetArchive(dir string) {
	n.ops.Lock()
	defer n.ops.Unlock()
	n.mu.Lock()
	n.opts.Archive = dir
	n.mu.Unlock()
}

// Binary is the executable the node's next launch runs.
func (n *Node) Binary() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.opts.Binary
}

// WipeData deletes the replica's data directory (an empty disk). The node
// must not be running.
func (n *Node) WipeData() error {
	n.ops.Lock()
	defer n.ops.Unlock()
	if p := n.current(); p != nil && !p.Exited() {
		return fmt.Errorf("%w: %s", ErrRunning, n.opts.ID)
	}
	return os.RemoveAll(n.DataDir())
}

// Close kills the node if it runs and releases the harness. Idempotent.
func (n *Node) Close() error {
	n.ops.Lock()
	defer n.ops.Unlock()
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	c := n.client
	n.mu.Unlock()
	err := n.kill()
	if c != nil {
		c.CloseIdle()
	}
	n.sp.Stop()
	return err
}

// Propose is Client().Propose.
func (n *Node) Propose(ctx context.Context, entry []byte) (ProposeResponse, error) {
	return n.Client().Propose(ctx, entry)
}

// ProposeRequest is Client().ProposeRequest.
func (n *Node) ProposeRequest(ctx context.Context, id replica.RequestID, entry []byte) (ProposeResponse, error) {
	return n.Client().ProposeRequest(ctx, id, entry)
}

// Status is Client().Status.
func (n *Node) Status(ctx context.Context) (StatusJSON, error) { return n.Client().Status(ctx) }

// Hash is Client().Hash.
func (n *Node) Hash(ctx context.Context, minIndex uint64) (HashResponse, error) {
	return n.Client().Hash(ctx, minIndex)
}

// RunHashAt returns the node's running state hash at index (GET /runhash).
func (n *Node) RunHashAt(ctx context.Context, index uint64) (RunHashResponse, error) {
	return n.Client().RunHashAt(ctx, index)
}

// Dump is Client().Dump.
func (n *Node) Dump(ctx context.Context, from, to uint64) (DumpResponse, error) {
	return n.Client().Dump(ctx, from, to)
}

// StepDown is Client().StepDown.
func (n *Node) StepDown(ctx context.Context) error { return n.Client().StepDown(ctx) }

// Transfer is Client().Transfer.
func (n *Node) Transfer(ctx context.Context, toID string) error {
	return n.Client().Transfer(ctx, toID)
}

// Checkpoint is Client().Checkpoint.
func (n *Node) Checkpoint(ctx context.Context) error { return n.Client().Checkpoint(ctx) }

// Barrier is Client().Barrier.
func (n *Node) Barrier(ctx context.Context) (uint64, error) { return n.Client().Barrier(ctx) }
