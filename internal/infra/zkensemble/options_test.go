package zkensemble

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestOptionsDefaultsAndValidation(t *testing.T) {
	o, err := Options{}.withDefaults()
	require.NoError(t, err)
	require.Equal(t, 1, o.Servers)
	require.Equal(t, 1024, o.HeapMB)
	require.Equal(t, 200*time.Millisecond, o.TickTime)
	require.Equal(t, os.TempDir(), o.Dir)

	for _, tc := range []struct {
		name string
		opts Options
		want []string
	}{
		{"two servers", Options{Servers: 2}, []string{"Servers=2"}},
		{"negative servers", Options{Servers: -1}, []string{"Servers=-1"}},
		{"small heap", Options{HeapMB: 512}, []string{"HeapMB=512"}},
		{"sub-millisecond tick", Options{TickTime: 1500 * time.Microsecond}, []string{"TickTime=1.5ms"}},
		{"tick too long", Options{TickTime: 31 * time.Second}, []string{"TickTime=31s"}},
		{"every problem at once", Options{Servers: 5, HeapMB: 100, TickTime: -time.Second},
			[]string{"Servers=5", "HeapMB=100", "TickTime=-1s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.opts.withDefaults()
			require.ErrorIs(t, err, ErrBadOptions)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestStartRejectsBadOptionsBeforeAnything(t *testing.T) {
	dir := t.TempDir()
	_, err := Start(t.Context(), Options{Servers: 2, Dir: dir})
	require.ErrorIs(t, err, ErrBadOptions)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries)
}

func TestLimitsScaleWithTick(t *testing.T) {
	for _, tc := range []struct {
		tick       time.Duration
		init, sync int
	}{
		{200 * time.Millisecond, 50, 20},
		{2 * time.Second, 10, 5},
		{50 * time.Millisecond, 200, 80},
	} {
		i, s := limits(tc.tick)
		require.Equal(t, tc.init, i, "initLimit at tick %v", tc.tick)
		require.Equal(t, tc.sync, s, "syncLimit at tick %v", tc.tick)
	}
}

func writeExecutable(t *testing.T, path string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte("#!/bin/sh\n"), 0o755))
}

func writeFile(t *testing.T, path string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, nil, 0o644))
}

func TestLocate(t *testing.T) {
	noPath := func(string) (string, error) { return "", exec.ErrNotFound }
	vars := func(kv map[string]string) func(string) string {
		return func(k string) string { return kv[k] }
	}

	t.Run("nothing installed", func(t *testing.T) {
		dir := t.TempDir()
		_, err := locateIn(env{getenv: vars(nil), lookPath: noPath,
			debianJar: filepath.Join(dir, "zookeeper.jar"), javaPaths: []string{filepath.Join(dir, "java")}})
		require.ErrorIs(t, err, ErrUnavailable)
		require.Contains(t, err.Error(), "scripts/install-zookeeper.sh")
		require.Contains(t, err.Error(), "no java")
		require.Contains(t, err.Error(), "no ZooKeeper server jar")
	})

	t.Run("tarball in ZOOKEEPER_HOME, java in JAVA_HOME", func(t *testing.T) {
		dir := t.TempDir()
		zkHome := filepath.Join(dir, "apache-zookeeper-3.8.4-bin")
		writeFile(t, filepath.Join(zkHome, "lib", "zookeeper-3.8.4.jar"))
		writeFile(t, filepath.Join(zkHome, "lib", "logback-classic-1.2.13.jar"))
		javaHome := filepath.Join(dir, "jdk")
		writeExecutable(t, filepath.Join(javaHome, "bin", "java"))
		inst, err := locateIn(env{
			getenv:   vars(map[string]string{"ZOOKEEPER_HOME": zkHome, "JAVA_HOME": javaHome}),
			lookPath: noPath, debianJar: filepath.Join(dir, "none.jar"),
		})
		require.NoError(t, err)
		require.Equal(t, filepath.Join(javaHome, "bin", "java"), inst.java)
		require.Equal(t, []string{
			filepath.Join(zkHome, "lib", "logback-classic-1.2.13.jar"),
			filepath.Join(zkHome, "lib", "zookeeper-3.8.4.jar"),
		}, inst.classpath)
	})

	t.Run("ZOOKEEPER_HOME without a server jar falls back to Debian", func(t *testing.T) {
		dir := t.TempDir()
		jar := filepath.Join(dir, "zookeeper.jar")
		writeFile(t, jar)
		inst, err := locateIn(env{
			getenv:   vars(map[string]string{"ZOOKEEPER_HOME": filepath.Join(dir, "empty")}),
			lookPath: func(string) (string, error) { return "/opt/java", nil }, debianJar: jar,
		})
		require.NoError(t, err)
		require.Equal(t, "/opt/java", inst.java)
		require.Equal(t, jar, inst.classpath[0])
	})
}

// fakeTB records what ForTest does when ZooKeeper is missing; the embedded
// testing.TB is nil and must not be reached.
type fakeTB struct {
	testing.TB
	fatal, skip string
}

func (f *fakeTB) Helper()                        {}
func (f *fakeTB) Fatalf(format string, a ...any) { f.fatal = fmt.Sprintf(format, a...) }
func (f *fakeTB) Skip(a ...any)                  { f.skip = fmt.Sprint(a...) }

func TestForTestWithoutZooKeeper(t *testing.T) {
	missing := fmt.Errorf("%w: run scripts/install-zookeeper.sh", ErrUnavailable)

	t.Run("CI=true fails", func(t *testing.T) {
		t.Setenv("CI", "true")
		f := &fakeTB{}
		require.Nil(t, forTest(f, Options{}, missing))
		require.Contains(t, f.fatal, "scripts/install-zookeeper.sh")
		require.Empty(t, f.skip)
	})
	for _, ci := range []string{"", "false", "1"} {
		t.Run("CI="+ci+" skips", func(t *testing.T) {
			t.Setenv("CI", ci)
			f := &fakeTB{}
			require.Nil(t, forTest(f, Options{}, missing))
			require.Contains(t, f.skip, "scripts/install-zookeeper.sh")
			require.Empty(t, f.fatal)
		})
	}
}

func TestTailFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	var b strings.Builder
	for i := 1; i <= 100; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))
	require.Equal(t, "line 98\nline 99\nline 100", tailFile(path, 3))
	require.Equal(t, strings.TrimSuffix(b.String(), "\n"), tailFile(path, 1000))
	require.Contains(t, tailFile(filepath.Join(t.TempDir(), "missing"), 3), "no such file")
	require.Equal(t, "", tailFile("", 3))
}

func TestFreePortsDistinct(t *testing.T) {
	ports, err := freePorts(9)
	require.NoError(t, err)
	seen := map[int]bool{}
	for _, p := range ports {
		require.False(t, seen[p], "port %d twice", p)
		seen[p] = true
	}
}
