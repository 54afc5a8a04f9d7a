#!/usr/bin/env bash
# Installs Apache ZooKeeper (Debian's `zookeeper` package) when it is missing.
# Idempotent: does nothing when ZooKeeper is already found through
# $ZOOKEEPER_HOME, or Debian's /usr/share/zookeeper and
# /usr/share/java/zookeeper.jar. On Debian/Ubuntu as root it runs apt-get;
# anywhere else it prints the exact steps and exits non-zero.
set -euo pipefail

found() {
  if [ -n "${ZOOKEEPER_HOME:-}" ] && [ -d "$ZOOKEEPER_HOME" ]; then
    if ls "$ZOOKEEPER_HOME"/zookeeper*.jar "$ZOOKEEPER_HOME"/lib/zookeeper*.jar >/dev/null 2>&1; then
      echo "ZooKeeper found at ZOOKEEPER_HOME=$ZOOKEEPER_HOME"
      return 0
    fi
  fi
  if [ -d /usr/share/zookeeper ] && [ -f /usr/share/java/zookeeper.jar ]; then
    echo "ZooKeeper found: /usr/share/java/zookeeper.jar (Debian package)"
    return 0
  fi
  return 1
}

have_java() { command -v java >/dev/null 2>&1; }

# A TLS client port (secureClientPort, Netty) needs Netty jars that the
# Debian zookeeper.jar manifest does not name (codec, resolver,
# transport-native-unix-common; internal/infra/zkensemble adds them to the
# classpath). A tarball install ships them in lib/.
have_netty() {
  if [ -n "${ZOOKEEPER_HOME:-}" ] && ls "$ZOOKEEPER_HOME"/lib/netty-codec*.jar >/dev/null 2>&1; then
    return 0
  fi
  [ -f /usr/share/java/netty-codec.jar ] && [ -f /usr/share/java/netty-resolver.jar ] &&
    [ -f /usr/share/java/netty-transport-native-unix-common.jar ]
}

# jcmd (a JDK tool) measures a server's live heap in the byte-bound test
# (logroom: TestRoomByteBoundHeap); the JRE alone lacks it.
have_jcmd() {
  command -v jcmd >/dev/null 2>&1 && return 0
  have_java && [ -x "$(dirname "$(readlink -f "$(command -v java)")")/jcmd" ]
}

if found && have_java && have_jcmd && have_netty; then
  exit 0
fi

is_debian=false
if [ -r /etc/os-release ] && grep -qiE '^(ID|ID_LIKE)=.*(debian|ubuntu)' /etc/os-release; then
  is_debian=true
fi

if $is_debian && [ "$(id -u)" = 0 ]; then
  echo "Installing ZooKeeper with apt-get (this takes a minute)..."
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  pkgs=(zookeeper)
  have_java || pkgs+=(default-jre-headless)
  have_jcmd || pkgs+=(default-jdk-headless)
  have_netty || pkgs+=(libnetty-java)
  apt-get install -y -qq --no-install-recommends "${pkgs[@]}" liblog4j1.2-java libslf4j-java >/dev/null
  if found && have_java && have_jcmd && have_netty; then
    exit 0
  fi
  echo "install-zookeeper: apt-get finished but ZooKeeper is still not found" >&2
  exit 1
fi

cat >&2 <<'MSG'
install-zookeeper: ZooKeeper 3.8 is not installed and this script cannot install it here.
Do one of these, then run the command again:
  * Debian/Ubuntu:  sudo apt-get update && sudo apt-get install -y zookeeper default-jdk-headless libnetty-java
  * Elsewhere: download Apache ZooKeeper 3.8 (binary tarball), unpack it, and
    export ZOOKEEPER_HOME=/path/to/apache-zookeeper-3.8.x-bin   (needs a JDK 11+ on PATH: java, and jcmd for the heap test)
MSG
exit 1
