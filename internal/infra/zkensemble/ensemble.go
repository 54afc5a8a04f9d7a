package zkensemble

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/roomlog/roomlog/internal/infra/faultnet"
	"github.com/roomlog/roomlog/internal/infra/spawn"
	"github.com/roomlog/roomlog/internal/infra/testpki"
)

// Errors returned by this package, wrapped with %w; check them with errors.Is.
var (
	// ErrUnavailable: ZooKeeper or java is not installed (see Available).
	ErrUnavailable = errors.New("zkensemble: ZooKeeper is not available")
	// ErrBadOptions: Options failed validation; the message names every bad field.
	ErrBadOptions = errors.New("zkensemble: bad options")
	// ErrBadIndex: a server index outside [0, Servers).
	ErrBadIndex = errors.New("zkensemble: no such server")
	// ErrRunning: Start(ctx, i) on a server whose process is still running.
	ErrRunning = errors.New("zkensemble: server is running")
	// ErrNotRunning: Pause or Resume on a server that is not running.
	ErrNotRunning = errors.New("zkensemble: server is not running")
	// ErrExited: a server process exited while the ensemble waited for it to serve.
	ErrExited = errors.New("zkensemble: server exited")
	// ErrPortInUse: a server could not bind one of its ports (another process
	// took it between the pick and the bind). Start retries on it by itself.
	ErrPortInUse = errors.New("zkensemble: port in use")
	// ErrClosed: the ensemble was closed.
	ErrClosed = errors.New("zkensemble: closed")
)

// Defaults for Options.
const (
	DefaultHeapMB   = 1024
	DefaultTickTime = 200 * time.Millisecond
	// MaxSessionTimeout is the maxSessionTimeout every server is given.
	MaxSessionTimeout = 60 * time.Second
)

const (
	startAttempts = 3 // whole-ensemble start attempts on a port race
	pollInterval  = 50 * time.Millisecond
	fourLWTimeout = time.Second      // one srvr round trip
	exitTimeout   = 30 * time.Second // SIGKILL to reaped
	stopTimeout   = 20 * time.Second // SIGTERM before falling back to SIGKILL
	tailLines     = 40
)

// Options configure an ensemble. The zero value is one server with the defaults.
type Options struct {
	Servers  int           // 1 or 3 (default 1)
	HeapMB   int           // -Xmx and -Xms of each server, default 1024 (>= 1024 required by the design)
	TickTime time.Duration // default 200ms, whole milliseconds; session timeouts from 2*TickTime to 60s are allowed
	Dir      string        // parent of the ensemble's temp dir (default os.TempDir())
	Logger   *slog.Logger  // nil: discard

	// JVMFlags are extra java flags placed before the main class (e.g. a GC choice).
	JVMFlags []string

	// FaultNet routes every link through a faultnet proxy: a client link
	// per server (ProxiedAddrs, ClientLinks) and, in a 3-server ensemble,
	// a quorum and an election link per directed server pair, so a test can
	// partition a server from its peers while clients still reach it
	// (Isolate, Net). Off by default: nothing is proxied, nothing changes.
	FaultNet bool
	// FaultNetSeed seeds the jitter of every link (faultnet.NewNet).
	FaultNetSeed uint64

	// TLS, when set, gives every server a TLS client port as well
	// (secureClientPort through Netty, certificates from TLS.CA, the x509
	// authentication provider): SecureAddrs, TLSCA. The plaintext client
	// port stays (the harness's own checks use it). The quorum and
	// election links of a 3-server ensemble are TLS as well, unless
	// TLS.PlainQuorum.
	TLS *TLSOptions
}

// withDefaults fills in defaults and validates, naming every bad field.
func (o Options) withDefaults() (Options, error) {
	if o.Servers == 0 {
		o.Servers = 1
	}
	if o.HeapMB == 0 {
		o.HeapMB = DefaultHeapMB
	}
	if o.TickTime == 0 {
		o.TickTime = DefaultTickTime
	}
	if o.Dir == "" {
		o.Dir = os.TempDir()
	}
	var bad []string
	if o.Servers != 1 && o.Servers != 3 {
		bad = append(bad, fmt.Sprintf("Servers=%d (want 1 or 3)", o.Servers))
	}
	if o.HeapMB < DefaultHeapMB {
		bad = append(bad, fmt.Sprintf("HeapMB=%d (want >= %d)", o.HeapMB, DefaultHeapMB))
	}
	if o.TickTime < time.Millisecond || o.TickTime%time.Millisecond != 0 || 2*o.TickTime > MaxSessionTimeout {
		bad = append(bad, fmt.Sprintf("TickTime=%v (want whole milliseconds in [1ms, %v])", o.TickTime, MaxSessionTimeout/2))
	}
	bad = append(bad, o.TLS.validate()...)
	if len(bad) > 0 {
		return o, fmt.Errorf("%w: %s", ErrBadOptions, strings.Join(bad, ", "))
	}
	return o, nil
}

// Ensemble is a running set of ZooKeeper servers started by Start. Its
// methods are safe for concurrent use. Server i is the API index
// (0-based); its ZooKeeper myid is i+1.
type Ensemble struct {
	opts Options
	inst install
	// classpath is inst's, plus the Netty jars TLS needs (Options.TLS).
	classpath []string
	tlsCA     *testpki.CA // Options.TLS only
	log       *slog.Logger
	root      string
	servers   []*server // immutable after Start

	closing chan struct{} // closed by Close: aborts every wait
	ops     []sync.Mutex  // ops[i] serializes launch/kill/stop of server i
	spawner *spawn.Spawner

	mu     sync.Mutex // guards procs, all, closed
	procs  []*proc    // current (maybe exited) process of server i; nil before its first launch
	all    []*proc    // every process ever launched; Close waits for each
	closed bool

	closeOnce sync.Once
	closeErr  error

	// Fault network, Options.FaultNet only (net is nil otherwise).
	net           *faultnet.Net
	relays        []*relay       // relays[j] forwards the quorum links to server j; immutable after Start
	proxied       []string       // default client link addresses; immutable after Start
	netMu         sync.Mutex     // guards clientAddrs, delay, jitter; serializes link creation with DelayAll
	clientAddrs   map[string]int // client link address -> server index
	delay, jitter time.Duration  // the last DelayAll, for links made later
}

// Start starts opts.Servers servers concurrently on free loopback ports in a
// new temp dir under opts.Dir and returns once a go-zookeeper client session
// is established against the ensemble and every server reports a Mode
// (leader, follower or standalone) over the srvr four-letter word. A port
// taken by someone else between the pick and the bind makes it start over
// with new ports (up to 3 times). On error nothing is left behind; the error
// carries the tail of the server logs.
func Start(ctx context.Context, opts Options) (*Ensemble, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	inst, err := locate()
	if err != nil {
		return nil, err
	}
	classpath := inst.classpath
	var ca *testpki.CA
	if opts.TLS != nil {
		if classpath, err = tlsClasspath(inst); err != nil {
			return nil, err
		}
		if ca = opts.TLS.CA; ca == nil {
			if ca, err = testpki.NewCA("zkensemble-ca"); err != nil {
				return nil, fmt.Errorf("zkensemble: TLS CA: %w", err)
			}
		}
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for attempt := 1; ; attempt++ {
		began := time.Now()
		e, err := tryStart(ctx, opts, inst, classpath, ca, log)
		if err == nil {
			log.Info("zkensemble: started", "servers", opts.Servers, "addrs", e.ConnString(),
				"dir", e.root, "elapsed", time.Since(began), "zookeeper", inst.source, "faultnet", opts.FaultNet)
			return e, nil
		}
		if !errors.Is(err, ErrPortInUse) || attempt >= startAttempts || ctx.Err() != nil {
			return nil, err
		}
		log.Warn("zkensemble: port race, starting over with new ports", "attempt", attempt, "err", err)
	}
}

func tryStart(ctx context.Context, opts Options, inst install, classpath []string, ca *testpki.CA, log *slog.Logger) (_ *Ensemble, err error) {
	root, err := os.MkdirTemp(opts.Dir, "zkensemble-")
	if err != nil {
		return nil, fmt.Errorf("zkensemble: temp dir: %w", err)
	}
	e := &Ensemble{
		opts:      opts,
		inst:      inst,
		classpath: classpath,
		tlsCA:     ca,
		log:       log,
		root:      root,
		closing:   make(chan struct{}),
		ops:       make([]sync.Mutex, opts.Servers),
		procs:     make([]*proc, opts.Servers),
		spawner:   spawn.New(),
	}
	defer func() {
		if err != nil {
			_ = e.Close() // the error already carries the log tails
		}
	}()
	var ports []int
	release := func() {}
	if opts.FaultNet {
		// Quorum and election ports are bound on the wildcard address (see
		// proxiedView): pick them free there. They stay held while the
		// proxies pick their own ports.
		addrs := make([]string, 0, 3*opts.Servers)
		for i := 0; i < opts.Servers; i++ {
			addrs = append(addrs, "127.0.0.1:0", ":0", ":0")
		}
		ports, release, err = holdPorts(addrs)
	} else {
		ports, err = freePorts(3 * opts.Servers)
	}
	if err != nil {
		return nil, err
	}
	var secure []int
	if opts.TLS != nil {
		if secure, err = freePorts(opts.Servers); err != nil {
			release()
			return nil, err
		}
	}
	for i := 0; i < opts.Servers; i++ {
		e.servers = append(e.servers, &server{
			index:        i,
			clientPort:   ports[3*i],
			quorumPort:   ports[3*i+1],
			electionPort: ports[3*i+2],
			dir:          fmt.Sprintf("%s/server-%d", root, i),
		})
		if secure != nil {
			e.servers[i].securePort = secure[i]
		}
	}
	var view peerView
	if opts.FaultNet {
		err := e.startNet()
		release()
		if err != nil {
			return nil, err
		}
		view = e.proxiedView
	}
	for _, s := range e.servers {
		if err := writeFiles(s, e.servers, view, opts.TickTime, opts.TLS); err != nil {
			return nil, fmt.Errorf("zkensemble: server %d files: %w", s.index, err)
		}
		if opts.TLS != nil {
			if err := writeTLSFiles(ca, s); err != nil {
				return nil, fmt.Errorf("zkensemble: server %d TLS files: %w", s.index, err)
			}
		}
	}
	all := make([]int, opts.Servers)
	for i := range all {
		all[i] = i
		if _, err := e.launch(i); err != nil {
			return nil, err
		}
	}
	if err := e.waitServing(ctx, all, true); err != nil {
		return nil, err
	}
	return e, nil
}

// Addrs returns the client addresses, "127.0.0.1:port"; index i is server i.
func (e *Ensemble) Addrs() []string {
	out := make([]string, len(e.servers))
	for i, s := range e.servers {
		out[i] = s.addr()
	}
	return out
}

// ConnString returns the comma-joined Addrs.
func (e *Ensemble) ConnString() string { return strings.Join(e.Addrs(), ",") }

// IndexOf returns the index of the server with client address addr (as in
// Addrs, ProxiedAddrs or ClientLinks, or as go-zookeeper's
// (*zk.Conn).Server() reports it), or -1.
func (e *Ensemble) IndexOf(addr string) int {
	for i, s := range e.servers {
		if s.addr() == addr || (s.securePort != 0 && s.secureAddr() == addr) {
			return i
		}
	}
	return e.proxiedIndex(addr)
}

// Size returns the number of servers.
func (e *Ensemble) Size() int { return len(e.servers) }

// Dir returns the ensemble's temp dir (removed by Close).
func (e *Ensemble) Dir() string { return e.root }

// LogPath returns the path of server i's log file ("" for a bad index). It
// holds the server's stdout and stderr (ZooKeeper's log and any JVM error)
// across restarts; each launch starts with a "zkensemble: launching" line.
func (e *Ensemble) LogPath(i int) string {
	if i < 0 || i >= len(e.servers) {
		return ""
	}
	return e.servers[i].logPath()
}

// LogTail returns the last n lines of server i's log ("" if unreadable).
func (e *Ensemble) LogTail(i, n int) string {
	return tailFile(e.LogPath(i), n)
}

// PID returns the process id of server i, or 0 when it is not running.
func (e *Ensemble) PID(i int) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if i < 0 || i >= len(e.procs) {
		return 0
	}
	if p := e.procs[i]; p != nil && !p.exited() {
		return p.pid
	}
	return 0
}

// Running reports whether server i's process is alive (paused counts as alive).
func (e *Ensemble) Running(i int) bool { return e.PID(i) != 0 }

func (e *Ensemble) checkIndex(i int) error {
	if i < 0 || i >= len(e.servers) {
		return fmt.Errorf("%w: index %d of %d servers", ErrBadIndex, i, len(e.servers))
	}
	return nil
}

// Close kills every process the ensemble started (paused ones included),
// waits for them to exit and removes the temp dir. It is idempotent: later
// calls return the first call's result.
func (e *Ensemble) Close() error {
	e.closeOnce.Do(func() { e.closeErr = e.close() })
	return e.closeErr
}

func (e *Ensemble) close() error {
	e.mu.Lock()
	e.closed = true
	close(e.closing)
	e.mu.Unlock()
	// Wait out any launch in progress; later ones see closed.
	for i := range e.ops {
		e.ops[i].Lock()
		e.ops[i].Unlock() //nolint:staticcheck // a barrier, not a critical section
	}
	e.mu.Lock()
	all := append([]*proc(nil), e.all...)
	e.mu.Unlock()
	var errs []error
	for _, p := range all {
		p.kill() // SIGKILL also ends a SIGSTOPped process
	}
	for _, p := range all {
		if err := p.waitExit(exitTimeout); err != nil {
			errs = append(errs, err)
		}
	}
	e.spawner.Stop()
	if e.net != nil {
		if err := e.net.Close(); err != nil {
			errs = append(errs, fmt.Errorf("zkensemble: faultnet: %w", err))
		}
	}
	for _, r := range e.relays {
		r.close()
	}
	if len(errs) == 0 { // never delete the files of a process still running
		if err := os.RemoveAll(e.root); err != nil {
			errs = append(errs, fmt.Errorf("zkensemble: remove %s: %w", e.root, err))
		}
	}
	e.log.Info("zkensemble: closed", "dir", e.root, "processes", len(all))
	return errors.Join(errs...)
}
