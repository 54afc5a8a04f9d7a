package zkensemble

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// server is the static description of one ZooKeeper server: its ports and
// files never change over restarts.
type server struct {
	index        int // API index i; myid is index+1
	clientPort   int
	quorumPort   int
	electionPort int
	securePort   int    // secureClientPort; 0 without Options.TLS
	dir          string // <root>/server-<i>
}

func (s *server) dataDir() string   { return filepath.Join(s.dir, "data") }
func (s *server) cfgPath() string   { return filepath.Join(s.dir, "zoo.cfg") }
func (s *server) logPath() string   { return filepath.Join(s.dir, "server.log") }
func (s *server) log4jPath() string { return filepath.Join(s.dir, "log4j.properties") }
func (s *server) logbackPath() string {
	return filepath.Join(s.dir, "logback.xml")
}
func (s *server) addr() string { return fmt.Sprintf("127.0.0.1:%d", s.clientPort) }

// limits returns initLimit and syncLimit in ticks: about 10 s for a follower
// to connect and sync at start (a JVM on a busy 2-core machine can be slow),
// about 4 s of silence before a leader drops a follower or a follower
// abandons its leader (a SIGSTOPped server is noticed in that time).
func limits(tick time.Duration) (initLimit, syncLimit int) {
	initLimit = max(10, int((10*time.Second+tick-1)/tick))
	syncLimit = max(5, int((4*time.Second+tick-1)/tick))
	return initLimit, syncLimit
}

// peerView says at which "host:quorumPort:electionPort" server i's zoo.cfg
// lists server j (i == j included). nil: every server at its real ports on
// 127.0.0.1, the same line in every zoo.cfg.
type peerView func(i, j int) string

// writeFiles writes zoo.cfg, myid and both logging configurations (log4j
// for the Debian classpath and ZooKeeper <= 3.7 tarballs, logback for 3.8+
// tarballs: whichever SLF4J binding is on the classpath picks its own).
func writeFiles(s *server, all []*server, view peerView, tick time.Duration, tlsOpts *TLSOptions) error {
	if err := os.MkdirAll(s.dataDir(), 0o755); err != nil {
		return err
	}
	initLimit, syncLimit := limits(tick)
	ms := tick.Milliseconds()
	var b strings.Builder
	fmt.Fprintf(&b, "# written by roomlog internal/infra/zkensemble\n")
	fmt.Fprintf(&b, "tickTime=%d\n", ms)
	fmt.Fprintf(&b, "initLimit=%d\n", initLimit)
	fmt.Fprintf(&b, "syncLimit=%d\n", syncLimit)
	fmt.Fprintf(&b, "minSessionTimeout=%d\n", 2*ms)
	fmt.Fprintf(&b, "maxSessionTimeout=%d\n", 60000)
	fmt.Fprintf(&b, "dataDir=%s\n", s.dataDir())
	fmt.Fprintf(&b, "clientPort=%d\n", s.clientPort)
	fmt.Fprintf(&b, "clientPortAddress=127.0.0.1\n")
	fmt.Fprintf(&b, "maxClientCnxns=0\n")
	fmt.Fprintf(&b, "autopurge.snapRetainCount=3\n")
	fmt.Fprintf(&b, "autopurge.purgeInterval=1\n")
	fmt.Fprintf(&b, "4lw.commands.whitelist=*\n")
	fmt.Fprintf(&b, "admin.enableServer=false\n")
	if tlsOpts != nil {
		b.WriteString(tlsConfig(tlsOpts, s, len(all) > 1))
	}
	if len(all) > 1 {
		for _, o := range all {
			if view != nil {
				fmt.Fprintf(&b, "server.%d=%s\n", o.index+1, view(s.index, o.index))
			} else {
				fmt.Fprintf(&b, "server.%d=127.0.0.1:%d:%d\n", o.index+1, o.quorumPort, o.electionPort)
			}
		}
	}
	if err := os.WriteFile(s.cfgPath(), []byte(b.String()), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(s.dataDir(), "myid"), []byte(fmt.Sprintf("%d\n", s.index+1)), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(s.log4jPath(), []byte(log4jProperties), 0o644); err != nil {
		return err
	}
	return os.WriteFile(s.logbackPath(), []byte(logbackXML), 0o644)
}

// Both configurations log to stdout, which the ensemble redirects (with
// stderr) to server.log: JVM errors, SLF4J warnings and ZooKeeper's own log
// end up in one file.
const log4jProperties = `log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.Target=System.out
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} [myid:%X{myid}] - %-5p [%t:%C{1}@%L] - %m%n
`

const logbackXML = `<configuration>
  <appender name="CONSOLE" class="ch.qos.logback.core.ConsoleAppender">
    <encoder>
      <pattern>%d{ISO8601} [myid:%X{myid}] - %-5p [%t:%C{1}@%L] - %m%n</pattern>
    </encoder>
  </appender>
  <root level="INFO">
    <appender-ref ref="CONSOLE"/>
  </root>
</configuration>
`

// jvmArgs is the java command line for one server.
func jvmArgs(inst install, classpath []string, s *server, heapMB int, extra []string) []string {
	args := []string{
		fmt.Sprintf("-Xmx%dm", heapMB),
		fmt.Sprintf("-Xms%dm", heapMB),
		"-XX:+ExitOnOutOfMemoryError",
		"-Djava.awt.headless=true",
		"-Dlog4j.configuration=file:" + s.log4jPath(),
		"-Dlogback.configurationFile=" + s.logbackPath(),
		"-Dzookeeper.jmx.log4j.disable=true",
		"-Dzookeeper.admin.enableServer=false",
	}
	args = append(args, extra...)
	args = append(args,
		"-cp", strings.Join(classpath, string(os.PathListSeparator)),
		"org.apache.zookeeper.server.quorum.QuorumPeerMain",
		s.cfgPath(),
	)
	return args
}
