#!/usr/bin/env bash
# Builds the Debian 12 arm64 sysroot of the full arm64 cross build (issue 12
# item 3; README "arm64"): the arm64 build of every library tessera links,
# their headers and CMake/pkg-config files, and the whole runtime dependency
# closure down to libc6, so that
#   * cmake/toolchain-aarch64.cmake (with -DTESSERA_ARM64_SYSROOT=<dir>) links
#     the whole `tessera` binary for arm64 against them, and
#   * qemu-aarch64 -L <dir> runs the result (and its tests) on this machine.
#
#   deploy/arm64-sysroot.sh [DIR]      (default /opt/tessera/sysroot-arm64)
#
# Run as root. Idempotent: a sysroot whose stamp file (.tessera-sysroot) lists
# the same packages (names and versions) as the archive offers now, made by
# the same version of this script, is left as it is.
#
# How: the host's dpkg database is never touched (no `dpkg --add-architecture`,
# nothing installed): apt-get runs with its own state under DIR.apt/ (lists,
# an empty dpkg status, package cache) and APT::Architecture=arm64, reading
# only the Debian 12 entries of this machine's apt sources. Its resolver
# computes the dependency closure of the packages below as if on an empty
# arm64 system and downloads those .debs (--download-only); each is unpacked
# with `dpkg-deb -x` into DIR, and the few links and files maintainer scripts
# would make follow (alternatives, usr-merge, DEBIAN/ for dpkg-shlibdeps). This
# sidesteps Multi-Arch limits (libyaml-cpp-dev is not Multi-Arch: same, so it
# cannot be installed beside the amd64 one) and cannot break the host's amd64
# packages. Finally absolute symlinks in DIR are made relative, so that they
# resolve inside the sysroot (for the cross linker and for qemu's -L).
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then exec sudo -E bash "$0" "$@"; fi
  echo "arm64-sysroot.sh: must run as root (apt-get, the sysroot under /opt)" >&2
  exit 1
fi

SYSROOT=${1:-/opt/tessera/sysroot-arm64}
case "$SYSROOT" in
  /*) ;;
  *) echo "arm64-sysroot.sh: DIR must be an absolute path, got '$SYSROOT'" >&2; exit 1 ;;
esac
STATE=$SYSROOT.apt
export DEBIAN_FRONTEND=noninteractive

# The arm64 side of deploy/install-deps.sh's BUILD_PKGS (what CMakeLists.txt's
# find_package/pkg_check_modules lines find) plus the OpenMP runtime and
# Catch2 for the unit tests. protobuf-compiler-grpc: gRPC's CMake targets
# check that its plugin files exist under the sysroot (the build runs the
# host's protoc and grpc_cpp_plugin: cmake/toolchain-aarch64.cmake).
ARM64_PKGS=(
  libc6-dev libgomp1
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev libssl-dev
  libboost-dev libboost-system-dev
  libeigen3-dev libspdlog-dev libfmt-dev catch2
  libonnx-dev coinor-libcbc-dev coinor-libclp-dev coinor-libosi-dev coinor-libcgl-dev coinor-libcoinutils-dev
  libyaml-cpp-dev nlohmann-json3-dev libcli11-dev
  libsystemd-dev
)

start=$(date +%s)
mkdir -p "$STATE/lists/partial" "$STATE/cache/archives/partial" "$STATE/etc/preferences.d" \
  "$STATE/etc/sources.list.d"
touch "$STATE/status"
# Sources: only the Debian 12 entries of this machine's apt sources (its
# mirror), i.e. suites bookworm, bookworm-updates, bookworm-security signed
# by Debian's archive keyring (or apt's default keyrings); any other
# repository configured here is left out. Both formats: one-line
# (sources.list) and deb822 (sources.list.d/*.sources).
debian_sources() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    awk '$1 == "deb" {
        i = 2; opts = ""
        if ($2 ~ /^\[/) { while ($i !~ /\]$/) { opts = opts " " $i; i++ } opts = opts " " $i; i++ }
        if ($(i + 1) ~ /^bookworm(-updates|-security)?$/ && (opts !~ /signed-by/ || opts ~ /debian-archive-keyring/)) {
          line = "deb " $i " " $(i + 1); for (j = i + 2; j <= NF && $j !~ /^#/; j++) line = line " " $j; print line
        }
      }' "$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk 'function flush() {
           if (types ~ /(^| )deb( |$)/ && enabled != "no" && (signed == "" || signed ~ /debian-archive-keyring/)) {
             n = split(uris, u, " "); m = split(suites, s, " ")
             for (a = 1; a <= n; a++) for (b = 1; b <= m; b++)
               if (s[b] ~ /^bookworm(-updates|-security)?$/) print "deb " u[a] " " s[b] " " comps
           }
           types = uris = suites = comps = signed = enabled = ""
         }
         /^[ \t]*#/ { next }
         /^[ \t]*$/ { flush(); next }
         { key = tolower($1); sub(/:$/, "", key); $1 = ""; sub(/^ +/, "")
           if (key == "types") types = $0; else if (key == "uris") uris = $0; else if (key == "suites") suites = $0
           else if (key == "components") comps = $0; else if (key == "signed-by") signed = $0
           else if (key == "enabled") enabled = tolower($0) }
         END { flush() }' "$f"
  done
}
debian_sources | sort -u >"$STATE/etc/sources.list"
if ! [ -s "$STATE/etc/sources.list" ]; then
  echo "arm64-sysroot.sh: no Debian 12 (bookworm) entry in this machine's apt sources" \
    "(/etc/apt/sources.list, /etc/apt/sources.list.d)" >&2
  exit 1
fi
# apt-get with its own state under $STATE, those sources, arm64 only.
APT=(apt-get -q
  -o APT::Architecture=arm64 -o APT::Architectures::=arm64
  -o Dir::State="$STATE" -o Dir::State::Lists="$STATE/lists" -o Dir::State::status="$STATE/status"
  -o Dir::Cache="$STATE/cache" -o Dir::Cache::archives="$STATE/cache/archives"
  -o Dir::Etc::sourcelist="$STATE/etc/sources.list" -o Dir::Etc::sourceparts="$STATE/etc/sources.list.d"
  -o Dir::Etc::preferencesparts="$STATE/etc/preferences.d"
  -o APT::Install-Recommends=false -o APT::Install-Suggests=false
  -o Debug::NoLocking=true)
APT_CACHE=(apt-cache "${APT[@]:2}")

# Package lists: refreshed when older than a day (or missing).
if [ -z "$(find "$STATE/lists" -maxdepth 1 -name '*_Packages*' -mmin -1440 -print -quit)" ]; then
  echo "arm64-sysroot.sh: apt-get update (arm64 package lists into $STATE/lists)"
  "${APT[@]}" update >"$STATE/update.log" 2>&1 || { cat "$STATE/update.log" >&2; exit 1; }
fi
libc6=$("${APT_CACHE[@]}" show libc6 2>/dev/null || true)
if ! grep -q '^Architecture: arm64' <<<"$libc6"; then
  echo "arm64-sysroot.sh: no arm64 package lists after apt-get update (see $STATE/update.log);" \
    "this machine's apt sources must reach a Debian 12 archive with arm64" >&2
  exit 1
fi

# The closure as apt's resolver sees it on an empty arm64 system (a
# simulated install): the .deb file of each package, name_version_arch.deb
# as in apt's cache (an epoch's ':' is '%3a' there).
plan=$("${APT[@]}" install -s -y "${ARM64_PKGS[@]}" 2>"$STATE/resolve.log") || { cat "$STATE/resolve.log" >&2; exit 1; }
want=$(echo "$plan" | sed -n 's/^Inst \([^ ]*\) (\([^ ]*\) .*\[\([a-z0-9]\+\)\]).*/\1_\2_\3.deb/p' | sed 's/:/%3a/g' | sort)
if [ -z "$want" ]; then
  echo "arm64-sysroot.sh: apt-get resolved no packages for: ${ARM64_PKGS[*]} (see $STATE/resolve.log)" >&2
  exit 1
fi
# The stamp: this script's layout version (bump it when the steps after
# unpacking change) and the package files.
LAYOUT="tessera arm64 sysroot, layout 2"
stamp=$SYSROOT/.tessera-sysroot
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$LAYOUT"$'\n'"$want" ] &&
  [ -e "$SYSROOT/usr/lib/aarch64-linux-gnu/libgrpc++.so" ]; then
  echo "arm64-sysroot.sh: $SYSROOT is up to date ($(echo "$want" | wc -l) packages)"
  exit 0
fi

echo "arm64-sysroot.sh: downloading $(echo "$want" | wc -l) arm64 packages"
"${APT[@]}" install --download-only -y "${ARM64_PKGS[@]}" >"$STATE/download.log" 2>&1 ||
  { cat "$STATE/download.log" >&2; exit 1; }

# A fresh tree each time the package set changes: nothing stale survives.
rm -rf "$SYSROOT.new"
mkdir -p "$SYSROOT.new"
n=0
for deb in $want; do
  f=$STATE/cache/archives/$deb
  [ -f "$f" ] || { echo "arm64-sysroot.sh: $deb was not downloaded (see $STATE/download.log)" >&2; exit 1; }
  dpkg-deb -x "$f" "$SYSROOT.new"
  n=$((n + 1))
done
# Debian 12 is /usr-merged: /lib, /bin and /sbin are links into /usr
# (dpkg-deb -x unpacks the packages' /lib files into a real lib/: move them).
for d in lib bin sbin; do
  if [ -d "$SYSROOT.new/$d" ] && [ ! -L "$SYSROOT.new/$d" ]; then
    mkdir -p "$SYSROOT.new/usr/$d"
    cp -a "$SYSROOT.new/$d/." "$SYSROOT.new/usr/$d/"
    rm -rf "${SYSROOT:?}.new/$d"
  fi
  mkdir -p "$SYSROOT.new/usr/$d"
  [ -e "$SYSROOT.new/$d" ] || ln -s "usr/$d" "$SYSROOT.new/$d"
done
# Links that maintainer scripts would make (dpkg-deb -x runs none): the
# master link of each `update-alternatives --install LINK NAME PATH` in a
# postinst, e.g. libblas.so.3 -> blas/libblas.so.3 (CoinUtils needs BLAS/LAPACK).
for deb in $want; do
  dpkg-deb --ctrl-tarfile "$STATE/cache/archives/$deb" | tar -xO ./postinst 2>/dev/null |
    sed -e ':a' -e '/\\$/N; s/\\\n/ /; ta' | grep -o 'update-alternatives --install [^;|&]*' |
    while read -r _ _ link _ path _; do
      if [ -e "$SYSROOT.new$path" ] && [ ! -e "$SYSROOT.new$link" ]; then ln -s "$path" "$SYSROOT.new$link"; fi
    done || true
done
# The shared-library dependency information of the unpacked packages (their
# control files' symbols and shlibs, concatenated) where dpkg-shlibdeps looks
# for a library that no installed package owns: DEBIAN/ at the top of the
# tree the library is in. cmake/packaging.cmake runs dpkg-shlibdeps on the
# arm64 binary against it for the _arm64.deb's Depends:.
mkdir -p "$SYSROOT.new/DEBIAN"
: >"$SYSROOT.new/DEBIAN/symbols"
: >"$SYSROOT.new/DEBIAN/shlibs"
for deb in $want; do
  for f in symbols shlibs; do
    dpkg-deb --ctrl-tarfile "$STATE/cache/archives/$deb" | tar -xO "./$f" >>"$SYSROOT.new/DEBIAN/$f" 2>/dev/null || true
  done
done
# Absolute symlinks (e.g. libfoo.so -> /lib/aarch64-linux-gnu/libfoo.so.1)
# would point into this machine's root: make them relative to the sysroot.
while IFS= read -r -d '' link; do
  target=$(readlink "$link")
  case "$target" in
    /*) ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$SYSROOT.new$target")" "$link" ;;
  esac
done < <(find "$SYSROOT.new" -type l -print0)
printf '%s\n%s\n' "$LAYOUT" "$want" >"$SYSROOT.new/.tessera-sysroot"
rm -rf "$SYSROOT.old"
[ -e "$SYSROOT" ] && mv "$SYSROOT" "$SYSROOT.old"
mv "$SYSROOT.new" "$SYSROOT"
rm -rf "$SYSROOT.old"
# The .debs stay in $STATE/cache for the next run; lists too.
echo "arm64-sysroot.sh: $SYSROOT: $n packages unpacked, $(du -sh "$SYSROOT" | cut -f1), $(($(date +%s) - start)) s"
