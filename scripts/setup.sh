#!/usr/bin/env bash
# Sets up a fresh machine: a virtualenv in .venv with the project and every
# extra installed, a Java runtime for Spark, etcd with Go for the bench's
# etcd flow, and Chromium for the report's browser test, when they are not present.
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[dev,bench,spark]'
# Bytecode for the project's own modules (pip compiles only what it installs): where
# PYTHONDONTWRITEBYTECODE is set, as on this project's machines, Python never writes
# it, and every `om` process (a node start, a shell call) compiled om/ again: 2.5 s of
# CPU instead of 0.7. compileall writes it whatever the variable says; an edited
# module's stale bytecode is ignored (Python checks the source's time and size).
.venv/bin/python -m compileall -q -j 0 om bench spark_analysis tests >/dev/null

# Debian packages: a JRE for Spark; etcd, Go and etcd's Go sources for the etcd
# flow of `om bench` (bench/etcd); Chromium, which opens the Spark report's page in
# tests/spark/test_spark_browser.py. A package that cannot be had only skips its part.
packages=()
if ! command -v java >/dev/null 2>&1 && [ -z "${JAVA_HOME:-}" ]; then
  packages+=(openjdk-17-jre-headless)
fi
command -v etcd >/dev/null 2>&1 || packages+=(etcd-server)
command -v go >/dev/null 2>&1 || packages+=(golang-go)
[ -d /usr/share/gocode/src/go.etcd.io/etcd/clientv3 ] || packages+=(golang-etcd-server-dev)
command -v chromium >/dev/null 2>&1 || packages+=(chromium)
if [ ${#packages[@]} -gt 0 ]; then
  echo "setup: installing ${packages[*]} (apt-get)"
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${packages[@]}" >/dev/null \
    || echo "setup: apt-get could not install ${packages[*]}; the etcd flow or the" \
            "report's browser test will be skipped"
fi
echo "setup: ready ($(.venv/bin/python --version), $(java -version 2>&1 | head -1)," \
     "$(etcd --version 2>/dev/null | head -1 || echo 'no etcd'))"
