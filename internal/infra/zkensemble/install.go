package zkensemble

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// debianJar is the ZooKeeper server jar of Debian's zookeeper package. Its
// manifest Class-Path pulls in every dependency except an SLF4J binding.
const debianJar = "/usr/share/java/zookeeper.jar"

// debianBinding is the SLF4J binding added to Debian's classpath so the
// server's log4j.properties takes effect and its errors reach the log file.
var debianBinding = []string{
	"/usr/share/java/slf4j-log4j12.jar",
	"/usr/share/java/log4j-1.2.jar",
}

// install is a located ZooKeeper + java pair.
type install struct {
	java      string
	classpath []string
	source    string // for messages: "ZOOKEEPER_HOME=/x" or the Debian jar
}

// Available reports whether a ZooKeeper server and a java runtime are
// installed. It returns nil when both are found, else an error wrapping
// ErrUnavailable that says how to install them.
func Available() error {
	_, err := locate()
	return err
}

// env is where locate looks; a parameter so tests can point it elsewhere.
type env struct {
	getenv    func(string) string
	lookPath  func(string) (string, error)
	debianJar string
	javaPaths []string // fallbacks after PATH and $JAVA_HOME/bin/java
}

func systemEnv() env {
	return env{getenv: os.Getenv, lookPath: exec.LookPath, debianJar: debianJar, javaPaths: []string{"/usr/bin/java"}}
}

// locate finds java and the server classpath. ZOOKEEPER_HOME (a tarball
// install: $ZOOKEEPER_HOME/lib/*.jar, plus any top-level zookeeper*.jar of
// older layouts) wins when it holds a zookeeper jar; otherwise the Debian
// package is used.
func locate() (install, error) { return locateIn(systemEnv()) }

func locateIn(en env) (install, error) {
	java, jerr := en.findJava()
	cp, source, zerr := en.findZooKeeper()
	var problems []string
	if jerr != nil {
		problems = append(problems, jerr.Error())
	}
	if zerr != nil {
		problems = append(problems, zerr.Error())
	}
	if len(problems) > 0 {
		return install{}, fmt.Errorf("%w: %s; run scripts/install-zookeeper.sh (or set ZOOKEEPER_HOME to a ZooKeeper 3.8 install)",
			ErrUnavailable, strings.Join(problems, "; "))
	}
	return install{java: java, classpath: cp, source: source}, nil
}

func (en env) findJava() (string, error) {
	if p, err := en.lookPath("java"); err == nil {
		return p, nil
	}
	candidates := en.javaPaths
	if home := en.getenv("JAVA_HOME"); home != "" {
		candidates = append([]string{filepath.Join(home, "bin", "java")}, candidates...)
	}
	for _, p := range candidates {
		if isExecutable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("no java on PATH, in $JAVA_HOME/bin or at %s", strings.Join(en.javaPaths, ", "))
}

func (en env) findZooKeeper() (classpath []string, source string, err error) {
	if home := en.getenv("ZOOKEEPER_HOME"); home != "" {
		var jars []string
		for _, pattern := range []string{filepath.Join(home, "*.jar"), filepath.Join(home, "lib", "*.jar")} {
			m, _ := filepath.Glob(pattern) // the patterns are well-formed
			sort.Strings(m)
			jars = append(jars, m...)
		}
		for _, j := range jars {
			base := filepath.Base(j)
			if strings.HasPrefix(base, "zookeeper-3") || base == "zookeeper.jar" {
				return jars, "ZOOKEEPER_HOME=" + home, nil
			}
		}
		// Fall through to the Debian package, like scripts/install-zookeeper.sh.
	}
	if fileExists(en.debianJar) {
		cp := []string{en.debianJar}
		for _, j := range debianBinding {
			if fileExists(j) {
				cp = append(cp, j)
			}
		}
		return cp, en.debianJar, nil
	}
	return nil, "", fmt.Errorf("no ZooKeeper server jar ($ZOOKEEPER_HOME/lib/zookeeper-*.jar or %s)", en.debianJar)
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0
}
