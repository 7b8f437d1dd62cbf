#!/usr/bin/env bash
# Issue 12 item 4: the .deb (cmake/packaging.cmake) built by cpack from this
# build, installed into a clean directory root with dpkg.
#   * tessera_<version>_<arch>.deb with <arch> = this machine's dpkg
#     architecture; Depends: names the package (or a name it provides) of
#     every shared library the binary needs (found with dpkg -S), and adduser; conffiles lists
#     /etc/tessera/cluster.yaml.
#   * `dpkg --root=R --force-script-chrootless --force-depends -i`: a real
#     install with the maintainer scripts run (outside R, with DPKG_ROOT=R;
#     deploy/debian/postinst only touches R then: the check below proves this
#     machine's /etc/passwd and /etc/group unchanged). --force-depends: R is
#     empty, the libraries come from this machine. The postinst made the
#     tessera user in R/etc/passwd and gave R/etc/tessera/tls to its group.
#   * the installed R/usr/bin/tessera --version runs;
#   * `systemd-analyze verify` on the installed units reports nothing: each
#     is verified from a copy whose ExecStart= points at R/usr/bin/tessera
#     (systemd-analyze checks that the binary exists on this machine's
#     file system, and --root=R would need systemd's own units inside R);
#     the installed units themselves must start /usr/bin/tessera.
#   * conffiles: a local edit of /etc/tessera/cluster.yaml survives a
#     reinstall and a remove; purge deletes it.
# Args: path to tessera, build dir.
set -u
T=${1:?tessera binary}
B=${2:?build dir}
fail=0
ok() { echo "PASS $1"; }
bad() { echo "FAIL $1"; fail=1; }
for tool in cpack dpkg dpkg-deb dpkg-shlibdeps systemd-analyze systemd-sysusers; do
  command -v $tool >/dev/null || { echo "FAIL $tool missing (deploy/install-deps.sh)"; exit 1; }
done
[ -f "$B/CPackConfig.cmake" ] || { echo "FAIL $B/CPackConfig.cmake missing (cmake/packaging.cmake not included?)"; exit 1; }
D=$(mktemp -d /tmp/tessera-deb-XXXXXX)
trap 'rm -rf "$D"' EXIT

# ---- build the package ------------------------------------------------------
start=$(date +%s.%N)
if (cd "$D" && cpack -G DEB --config "$B/CPackConfig.cmake" -B "$D/pkg" >"$D/cpack.log" 2>&1); then
  ok "cpack built a .deb in $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }') s"
else
  bad "cpack failed:"; cat "$D/cpack.log"; exit 1
fi
arch=$(dpkg --print-architecture)
debs=("$D"/pkg/tessera_*_"$arch".deb)
[ ${#debs[@]} = 1 ] && [ -f "${debs[0]}" ] || { bad "no tessera_*_$arch.deb: $(ls "$D/pkg")"; exit 1; }
deb=${debs[0]}
ok "package $(basename "$deb")"

# The same packaging code names an arm64 build's package _arm64.deb: the arch
# comes from CMAKE_SYSTEM_PROCESSOR (cmake/deb_arch.cmake), e.g. the arm64
# toolchain file's.
SRC=$(cd "$(dirname "$0")/../.." && pwd)
proc=$(sed -n 's/^set(CMAKE_SYSTEM_PROCESSOR \([^)]*\)).*/\1/p' "$SRC/cmake/toolchain-aarch64.cmake")
for pair in "$proc:arm64" "x86_64:amd64" "armv7l:armhf"; do
  got=$(cmake -DPROCESSOR="${pair%%:*}" -P "$SRC/cmake/deb_arch.cmake" 2>&1)
  [ "$got" = "${pair#*:}" ] || bad "CMAKE_SYSTEM_PROCESSOR ${pair%%:*} gives .deb arch '$got', want ${pair#*:}"
done
ok "CMAKE_SYSTEM_PROCESSOR $proc (cmake/toolchain-aarch64.cmake) names the package _arm64.deb"

# ---- control fields -----------------------------------------------------------
[ "$(dpkg-deb -f "$deb" Architecture)" = "$arch" ] && ok "Architecture: $arch" ||
  bad "Architecture: $(dpkg-deb -f "$deb" Architecture), want $arch"
depends=$(dpkg-deb -f "$deb" Depends)
echo "    Depends: $depends"
echo ", $depends," | grep -q ', adduser[ ,]' || bad "Depends lacks adduser (postinst fallback)"
# Every NEEDED library, resolved on this machine, belongs to a package in Depends.
missing=0
for lib in $(objdump -p "$B/tessera" | awk '$1 == "NEEDED" { print $2 }'); do
  path=$(ldd "$B/tessera" | awk -v l="$lib" '$1 == l { print $3 }')
  [ -n "$path" ] || { bad "ldd does not resolve $lib"; missing=1; continue; }
  owner=$(dpkg -S "$path" 2>/dev/null || dpkg -S "$(realpath "$path")" 2>/dev/null ||
          dpkg -S "/usr$path" 2>/dev/null || dpkg -S "${path#/usr}" 2>/dev/null)
  pkg=${owner%%:*}
  if [ -z "$pkg" ]; then bad "$lib ($path) belongs to no package"; missing=1
  else
    # The package, or a name it Provides (libspdlog1.10 provides libspdlog1.10-fmt9).
    names="$pkg $(dpkg-query -W -f='${Provides}' "$pkg" 2>/dev/null | sed 's/([^)]*)//g; s/,/ /g')"
    found=0
    for n in $names; do
      echo ", $depends," | grep -qE ", ${n//+/\\+}( \(|,)" && found=1
    done
    [ $found = 1 ] || { bad "Depends lacks $pkg (for $lib)"; missing=1; }
  fi
done
[ $missing = 0 ] && ok "Depends names the package of every library tessera links ($(objdump -p "$B/tessera" | grep -c NEEDED) NEEDED)"
dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles >"$D/conffiles" 2>/dev/null
grep -qx /etc/tessera/cluster.yaml "$D/conffiles" && ok "conffiles: /etc/tessera/cluster.yaml" ||
  bad "conffiles lacks /etc/tessera/cluster.yaml: $(cat "$D/conffiles")"

# ---- install into a clean root --------------------------------------------------
R=$D/root
mkdir -p "$R/var/lib/dpkg/info" "$R/var/lib/dpkg/updates"
touch "$R/var/lib/dpkg/status" "$R/var/lib/dpkg/available"
host_ids=$(sha256sum /etc/passwd /etc/group)
install_deb() {
  dpkg --root="$R" --force-script-chrootless --force-depends -i "$deb" >"$D/dpkg.log" 2>&1
}
if install_deb; then ok "dpkg --root installed it (maintainer scripts run)"; else bad "dpkg -i:"; cat "$D/dpkg.log"; fi
[ "$(sha256sum /etc/passwd /etc/group)" = "$host_ids" ] && ok "this machine's /etc/passwd and /etc/group unchanged" ||
  bad "the install changed this machine's /etc/passwd or /etc/group"
dpkg --root="$R" -s tessera 2>/dev/null | grep -qx 'Status: install ok installed' && ok "dpkg status: install ok installed" ||
  bad "dpkg status: $(dpkg --root="$R" -s tessera 2>&1 | grep Status)"
for f in usr/bin/tessera lib/systemd/system/tessera-worker.service lib/systemd/system/tessera-gateway.service \
    etc/tessera/cluster.yaml usr/share/tessera/devices/rpi4.yaml usr/lib/sysusers.d/tessera.conf; do
  [ -e "$R/$f" ] || bad "/$f not installed"
done
uid_line=$(grep '^tessera:' "$R/etc/passwd" || true)
gid=$(awk -F: '$1 == "tessera" { print $3 }' "$R/etc/group" 2>/dev/null)
if [ -n "$uid_line" ] && [ -n "$gid" ]; then ok "postinst made the tessera user in the root: $uid_line"
else bad "no tessera user/group in $R/etc/passwd, $R/etc/group"; fi
[ "$(stat -c '%a %g' "$R/etc/tessera/tls")" = "750 $gid" ] && ok "/etc/tessera/tls: mode 0750, group tessera" ||
  bad "/etc/tessera/tls: $(stat -c '%a %g' "$R/etc/tessera/tls"), want 750 $gid"

version=$("$R/usr/bin/tessera" --version 2>&1)
if [[ "$version" =~ ^tessera\ [0-9]+\.[0-9]+\.[0-9]+ ]]; then ok "installed tessera --version: $version"
else bad "installed tessera --version: '$version'"; fi

# ---- the installed units --------------------------------------------------------
for unit in tessera-worker.service tessera-gateway.service; do
  src=$R/lib/systemd/system/$unit
  grep -q '^ExecStart=/usr/bin/tessera ' "$src" || bad "$unit: ExecStart= does not start /usr/bin/tessera"
  sed "s|^ExecStart=/usr/bin/tessera |ExecStart=$R/usr/bin/tessera |" "$src" >"$D/$unit"
  out=$(systemd-analyze verify --man=no "$D/$unit" 2>&1)
  rc=$?
  ours=$(echo "$out" | grep -F "$unit" || true)
  if [ $rc = 0 ] && [ -z "$ours" ]; then ok "$unit (installed): systemd-analyze verify reports nothing"
  else bad "$unit: systemd-analyze verify (exit $rc)"; echo "$out"; fi
done

# ---- conffiles ------------------------------------------------------------------
echo "# a local edit" >>"$R/etc/tessera/cluster.yaml"
install_deb || bad "reinstall failed: $(cat "$D/dpkg.log")"
grep -q '^# a local edit' "$R/etc/tessera/cluster.yaml" && ok "a local edit of cluster.yaml survives a reinstall" ||
  bad "reinstall overwrote the local edit of cluster.yaml"
dpkg --root="$R" --force-script-chrootless -r tessera >"$D/dpkg.log" 2>&1 || bad "dpkg -r: $(cat "$D/dpkg.log")"
if [ ! -e "$R/usr/bin/tessera" ] && grep -q '^# a local edit' "$R/etc/tessera/cluster.yaml"; then
  ok "remove: binary gone, edited cluster.yaml kept"
else bad "remove: binary $(ls "$R/usr/bin" 2>&1), cluster.yaml $(ls "$R/etc/tessera" 2>&1)"; fi
dpkg --root="$R" --force-script-chrootless -P tessera >"$D/dpkg.log" 2>&1 || bad "dpkg -P: $(cat "$D/dpkg.log")"
[ ! -e "$R/etc/tessera/cluster.yaml" ] && ok "purge deletes cluster.yaml" || bad "purge left cluster.yaml"
exit $fail
