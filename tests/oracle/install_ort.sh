#!/usr/bin/env bash
# Make onnxruntime-node available in a cache directory and print the
# node_modules path to put in NODE_PATH.
#
#   install_ort.sh CACHE_DIR      -> prints CACHE_DIR/node_modules, exit 0
#
# Installs with ONNXRUNTIME_NODE_INSTALL=skip: the package already ships the
# CPU binding for linux x64, the skipped post-install step would only fetch
# GPU providers. Reuses CACHE_DIR when it already loads. Exit 77 (the CTest
# "skipped" code) when node/npm or the registry is unavailable or the native
# binding does not load on this platform.
set -u
cache=${1:?usage: install_ort.sh CACHE_DIR}
version=${TESSERA_ORT_NODE_VERSION:-1.30.0}

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "install_ort.sh: node/npm not installed (deploy/install-deps.sh installs them)" >&2
  exit 77
fi
mkdir -p "$cache"
loads() { NODE_PATH="$cache/node_modules" node -e "require('onnxruntime-node')" 2>"$cache/load-error.txt"; }

(
  # Concurrent test runs share the cache: serialise the install.
  flock 9
  if ! loads; then
    echo "install_ort.sh: installing onnxruntime-node@$version into $cache" >&2
    if ! ONNXRUNTIME_NODE_INSTALL=skip timeout 600 npm install --prefix "$cache" --no-audit --no-fund \
        --loglevel=error "onnxruntime-node@$version" >"$cache/npm-install.log" 2>&1; then
      echo "install_ort.sh: npm install failed (registry unavailable?); see $cache/npm-install.log:" >&2
      tail -5 "$cache/npm-install.log" >&2
      exit 77
    fi
    if ! loads; then
      echo "install_ort.sh: onnxruntime-node installed but its native binding does not load on $(uname -sm):" >&2
      head -5 "$cache/load-error.txt" >&2
      exit 77
    fi
  fi
) 9>"$cache/.lock" || exit $?
echo "$cache/node_modules"
