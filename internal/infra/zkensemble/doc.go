// Package zkensemble runs real Apache ZooKeeper servers (one or three) for
// roomlog's tests, demo and benchmarks, and lets a test fail them on purpose:
// SIGKILL, SIGTERM, restart with the same data, SIGSTOP/SIGCONT.
//
// It is internal test infrastructure, but it runs real JVMs: nothing is
// mocked, so what passes here passes against the ZooKeeper roomlog is
// deployed on (3.8, the Debian package, or a tarball in ZOOKEEPER_HOME).
//
// # Using it
//
//  1. In a test: e := zkensemble.ForTest(t, zkensemble.Options{Servers: 3}).
//     For the tests of a package that share one ensemble: a package-level
//     Shared (NewShared), Get(t) in each test, os.Exit(shared.Run(m)) in
//     TestMain. Elsewhere: e, err := zkensemble.Start(ctx, opts) and defer
//     e.Close().
//  2. Connect clients to e.Addrs() (or e.ConnString()). Start has already
//     seen a client session, and every server has joined the quorum.
//     With Options.FaultNet, clients whose network faults matter connect
//     to e.ProxiedAddrs() or e.ClientLinks(name) instead (below).
//  3. Break things: e.Kill(i), e.Stop(i), e.Pause(i)/e.Resume(i);
//     e.Leader(ctx) says which index leads; e.Start(ctx, i) restarts server i
//     on the same ports and data dir and waits until it is back in the quorum.
//     A 3-server ensemble with every server down cannot regain a quorum one
//     server at a time: use StartAll (or concurrent Starts).
//  4. e.Close() kills every process it started, paused ones included, waits
//     for each to be reaped and removes the temp dir. It is idempotent.
//
// Server i is the API index (0-based); its ZooKeeper myid is i+1.
//
// # Fault network (Options.FaultNet)
//
// With Options.FaultNet every link of the ensemble goes through a
// userspace fault proxy of internal/infra/faultnet, one per link, held in a
// faultnet.Net (e.Net()) and named "<client side>-><server side>" with
// zk<i> for server i (API index, not myid):
//
//	client->zk<i>           the default client link to server i: ProxiedAddrs()[i]
//	<name>->zk<i>           a client's own link, made by e.ClientLinks(name)
//	zk<i>->zk<j>/quorum     server i to server j's quorum port (follower i to leader j)
//	zk<i>->zk<j>/election   server i to server j's election port
//
// A 3-server ensemble has 3 default client links and 12 peer links (a
// quorum and an election link per directed pair; both directions of every
// pair exist, whichever ZooKeeper dials: election connections are kept
// only when the higher myid dialed them, quorum connections go from
// follower to leader). Server i's zoo.cfg lists each peer j at the proxies
// of zk<i>->zk<j> and itself at its real ports on 0.0.0.0. The wildcard is
// needed: a server sends its own election address when it dials a peer,
// and a peer with a lower myid closes that connection and dials back to
// the address it was sent, straight to the real port, unless it is a
// wildcard; then it dials the address in its own zoo.cfg, the proxy. So in
// this mode the quorum and election ports listen on every interface (the
// client port stays on 127.0.0.1). ZooKeeper 3.8 accepts zoo.cfg files
// that differ per server: reconfig is disabled, so the configuration a
// leader sends its followers is ignored ("Dynamic reconfig is disabled,
// we don't store the last seen config") and election notifications carry
// config version 0 on every server.
//
// Quorum links reach the real quorum port through a relay in this package
// that redials while the port refuses (up to 2 s). A faultnet proxy
// accepts a connection before it dials its target, so a follower dialing
// its newly elected leader a few milliseconds before the leader binds its
// quorum port would see a connect succeed and then a reset, abandon that
// leader, and leave it waiting initLimit (10 s) before a new election;
// with the relay it sees the connect complete once the leader listens, as
// its own retries of a refused connect would have made it.
//
// Ports: the servers' real ports are picked as without the option (and
// re-picked, proxies and all, when a server cannot bind one); the proxies
// listen on free ports of their own, picked while the real ones are held.
// Restarting a server (Start(ctx, i)) changes no port: the proxies keep
// theirs and their targets are the real ports. While a server is down its
// proxies accept connections and reset them (the target refuses).
//
// Which address to use:
//
//   - Addrs() and ConnString() stay direct, in both modes: Mode, Leader,
//     FourLetter and Start's readiness checks use them, so a fault on a
//     client link never hides a server's state from the harness.
//   - ProxiedAddrs() are the default client links: tests connect there
//     when the client side of a partition matters.
//   - e.ClientLinks(name) gives a client its own links, one per server, so
//     a test can partition that one client from one server:
//     e.Net().Partition(zkensemble.ClientLinkName(name, i)). It is
//     idempotent. IndexOf knows every client link address.
//
// Helpers: e.Isolate(i) blackholes PeerLinks(i), the quorum and election
// links between server i and every peer in both directions, while its
// client links stay up: its clients still connect and four-letter words
// still answer, and once it notices it lost its quorum (about syncLimit,
// 4 s) srvr says "not currently serving requests" and it accepts no
// session, while the two others elect a leader between them. e.HealNet()
// heals every link, client links included; an isolated server rejoins as
// a follower, in the tests here within half a second of the heal (the
// election notifications it sent meanwhile were held, not lost, and are
// answered at once). ZooKeeper's own back-off between notifications (up to
// 60 s) bounds it otherwise. e.DelayAll(d, jitter) puts latency on every
// link, including client links made later. Anything else (Cut, Reset,
// DropReplies, Bandwidth, one link at a time) goes through e.Net() and
// the names above; faultnet.To(ServerNode(i)) selects the client links to
// server i. Close closes the Net and the relays and waits for every
// goroutine they started. Without the option Net() is nil, ProxiedAddrs()
// and PeerLinks are nil, and the helpers return ErrNoFaultNet; nothing is
// proxied and zoo.cfg is what it always was.
//
// # TLS (Options.TLS)
//
// With Options.TLS every server also listens on a TLS client port
// (SecureAddrs, SecureConnString; IndexOf knows them): zoo.cfg gets
// serverCnxnFactory=NettyServerCnxnFactory (the plaintext port then runs
// on Netty too), secureClientPort on 127.0.0.1, ssl.keyStore.location and
// ssl.trustStore.location of type PEM, ssl.clientAuth (TLSOptions, "need"
// by default) and authProvider.x509=X509AuthenticationProvider, so a
// client's certificate subject becomes its x509 identity for ACLs. The
// certificates come from internal/infra/testpki: TLSOptions.CA, or a CA
// made at Start (TLSCA); each server's certificate is for 127.0.0.1 and
// localhost, written to server-<i>/tls/ (TLSFiles(i); keystore.pem holds
// key and certificate, as ZooKeeper's PEM key store reads them). Issue
// client certificates with e.TLSCA().Issue(dir, name, testpki.Options{}).
// On the Debian package the classpath gets Netty's codec, resolver and
// transport-native-unix-common jars, which zookeeper.jar's manifest does
// not name (scripts/install-zookeeper.sh installs libnetty-java if they
// are missing). The plaintext port stays and the harness's own checks
// (Mode, Leader, Start's readiness) use it. In a 3-server ensemble the
// quorum and election links are TLS too (sslQuorum=true with the same key
// and trust stores; each server then logs "Using TLS encrypted quorum
// communication"): without it every write a client sends over TLS would
// cross the server-to-server links in clear. TLSOptions.PlainQuorum
// leaves them plaintext (a control, a cost comparison). With FaultNet the
// peer links still go through their proxies, which then carry TLS;
// Net().Link(name).Record() and Contains show what an eavesdropper on a
// link saw. The TLS client port is not proxied by FaultNet: put a Tap
// (below) in front of it.
//
// # Tap
//
// NewTap(target) is a TCP proxy that records every byte it forwards in
// each direction (Contains, Seen) and can cut its connections (Cut): a
// test puts it on a client link to show what an eavesdropper would read,
// or to force a reconnect in the same session.
//
// # Temp dir layout
//
//	<Options.Dir or os.TempDir()>/zkensemble-<random>/
//	    server-0/
//	        zoo.cfg            the server's configuration (below)
//	        log4j.properties   logging for the Debian classpath and <= 3.7 tarballs
//	        logback.xml        logging for 3.8+ tarballs (logback is their binding)
//	        server.log         stdout+stderr of every launch of this server, appended;
//	                           each launch begins with a "==== zkensemble: launching" line
//	        data/myid          "1"
//	        data/version-2/    snapshots and transaction logs (dataDir = dataLogDir)
//	    server-1/ ...          (3-server ensembles)
//	    server-2/ ...
//
// Both logging configurations send ZooKeeper's log to stdout, which goes to
// server.log together with stderr, so SLF4J warnings and JVM errors (a bad
// flag, OutOfMemoryError) land in the same file. On the Debian package the
// classpath is /usr/share/java/zookeeper.jar (its manifest Class-Path pulls
// its dependencies) plus slf4j-log4j12.jar and log4j-1.2.jar, a working SLF4J
// binding: without one ZooKeeper logs nothing at all and a server that dies
// dies silently. ForTest prints the last 40 lines of every server.log when
// the test failed; errors from Start carry them too.
//
// # Server configuration
//
// Every port is on 127.0.0.1 and picked free by listening on port 0 and
// closing (client, quorum and election port per server). Someone can take
// one in between: a server that exits with a bind error makes Start begin
// again with new ports, up to 3 times. Each server runs
// org.apache.zookeeper.server.quorum.QuorumPeerMain with -Xms and -Xmx set to
// HeapMB (default and minimum 1024: a 512 MiB server died under 16 x 256 KiB
// writes in flight), -XX:+ExitOnOutOfMemoryError, no remote JMX and no admin
// server. zoo.cfg: tickTime (default 200ms), initLimit about 10 s and
// syncLimit about 4 s in ticks (a SIGSTOPped server is dropped from the
// quorum after about 4 s), minSessionTimeout 2*tickTime, maxSessionTimeout
// 60s, maxClientCnxns=0, autopurge.snapRetainCount=3 with
// autopurge.purgeInterval=1, 4lw.commands.whitelist=*, jute.maxbuffer left
// at its 1 MiB default (roomlog must respect the production limit). A
// 1-server ensemble has no server.N lines and runs standalone.
//
// # Readiness: a session, not ruok
//
// "ruok" answers "imok" as soon as the process listens, before any quorum
// exists, and a server that lost its quorum keeps answering it. A client
// session proves what a test needs: creating a session is a transaction the
// quorum commits. So Start returns only when a go-zookeeper client
// (state delivered through zk.WithEventCallback, never the 6-event channel)
// reaches StateHasSession, and, because a test may kill a server right
// away, when every server also answers the "srvr" four-letter word with a
// Mode line (leader, follower or standalone; a server outside a quorum
// answers "not currently serving requests"). Start(ctx, i) waits for that
// Mode line from server i. A server process that exits during either wait
// fails it at once with its log tail (ErrExited).
//
// # Processes
//
// Kill is SIGKILL, Stop is SIGTERM (plus SIGCONT, so a paused server gets
// it; SIGKILL after 20 s), Pause is SIGSTOP (the kernel still accepts TCP
// connections, nothing answers), Resume is SIGCONT. Each waits until the
// signal took effect (Kill and Stop until the process is reaped). Signals go
// through os.Process, which uses a pidfd on Linux: a recycled pid is never
// hit. Each server runs in its own process group. Every JVM is forked from
// one goroutine locked to its own OS thread for the ensemble's life, with
// Pdeathsig=SIGKILL: when the test binary dies without cleanup (SIGKILL, a
// go test timeout) its servers die with it instead of leaking 1 GiB JVMs.
//
// # When ZooKeeper is missing
//
// Available returns nil when java (PATH, $JAVA_HOME/bin, /usr/bin/java) and
// a ZooKeeper server jar ($ZOOKEEPER_HOME/lib, else the Debian package) are
// found, else an error wrapping ErrUnavailable that says to run
// scripts/install-zookeeper.sh. ForTest then fails the test when CI=true (a
// skip would make CI green while testing nothing) and skips it otherwise,
// so a developer without ZooKeeper can still run the rest of the suite.
//
// # Invariants
//
//   - After Start returns, every server is running and in the quorum.
//   - Close leaves no process it started and no file it wrote; after Close
//     nothing is launched again (ErrClosed).
//   - Ports and data dirs of server i never change over restarts, nor do
//     the addresses of its proxies.
//   - Without Options.FaultNet nothing is proxied and nothing differs
//     from an ensemble started before the option existed.
//   - Bad caller input (an index, Options) is an error, never a panic.
package zkensemble
