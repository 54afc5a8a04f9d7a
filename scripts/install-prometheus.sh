#!/usr/bin/env bash
# Installs Prometheus and promtool (Debian's `prometheus` package) when they
# are missing: the metrics tests scrape a running pair with a real
# Prometheus server and check every /metrics with promtool.
# Idempotent: does nothing when both are on PATH (or under $PROMETHEUS_HOME).
# On Debian/Ubuntu as root it runs apt-get (without starting the packaged
# service: the tests run their own server); anywhere else it prints the
# steps and exits non-zero.
set -euo pipefail

found() {
  if [ -n "${PROMETHEUS_HOME:-}" ] && [ -x "$PROMETHEUS_HOME/prometheus" ] && [ -x "$PROMETHEUS_HOME/promtool" ]; then
    echo "Prometheus found at PROMETHEUS_HOME=$PROMETHEUS_HOME"
    return 0
  fi
  command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1
}

if found; then
  exit 0
fi

is_debian=false
if [ -r /etc/os-release ] && grep -qiE '^(ID|ID_LIKE)=.*(debian|ubuntu)' /etc/os-release; then
  is_debian=true
fi

if $is_debian && [ "$(id -u)" = 0 ]; then
  echo "Installing Prometheus with apt-get (this takes a minute)..."
  export DEBIAN_FRONTEND=noninteractive
  # Keep the package's service from starting (and from taking :9090).
  policy=/usr/sbin/policy-rc.d
  created_policy=false
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod +x "$policy"
    created_policy=true
  fi
  trap '$created_policy && rm -f "$policy"' EXIT
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  if found; then
    exit 0
  fi
  echo "install-prometheus: apt-get finished but prometheus/promtool are still not on PATH" >&2
  exit 1
fi

cat >&2 <<'MSG'
install-prometheus: Prometheus is not installed and this script cannot install it here.
Do one of these, then run the command again:
  * Debian/Ubuntu:  sudo apt-get update && sudo apt-get install -y prometheus
  * Elsewhere: download a Prometheus 2.x release tarball, unpack it, and
    export PROMETHEUS_HOME=/path/to/prometheus-2.x   (holding prometheus and promtool)
MSG
exit 1
