#!/usr/bin/env bash
# Sets up a fresh machine: a virtualenv in .venv with the project and every
# extra installed, and a Java runtime for Spark when none is present.
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[dev,bench,spark]'

if ! command -v java >/dev/null 2>&1 && [ -z "${JAVA_HOME:-}" ]; then
  echo "setup: no Java found; installing a JRE for Spark (apt-get)"
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq openjdk-17-jre-headless >/dev/null
fi
echo "setup: ready ($(.venv/bin/python --version), $(java -version 2>&1 | head -1))"
