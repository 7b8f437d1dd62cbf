#!/usr/bin/env bash
# Issue 12 item 4: the arm64 .deb of the full cross build (cmake/packaging.cmake,
# cpack in BUILD_DIR) for Raspberry Pi OS 64-bit / Debian 12 arm64 boards.
#   * cpack makes exactly tessera_<version>_arm64.deb;
#   * dpkg-deb -I: Package tessera, Version <version>, Architecture arm64;
#     Depends names adduser and, for every library the arm64 binary needs
#     (NEEDED), the Debian 12 arm64 package that ships it: found here,
#     independently of dpkg-shlibdeps, in the file lists (dpkg-deb -c) of the
#     .debs deploy/arm64-sysroot.sh unpacked (SYSROOT.apt/cache), or a name
#     that package Provides;
#   * dpkg-deb -c: the binary, both systemd units, /etc/tessera/cluster.yaml,
#     the device presets and the sysusers file;
#   * usr/bin/tessera inside is an AArch64 ELF executable (readelf), stripped;
#   * `dpkg --root=R` installs it into an empty arm64 root (R's dpkg is
#     told its architecture is arm64; maintainer scripts run chrootless as in
#     tests/integration/package_deb.sh; --force-depends: R has no libraries);
#   * the installed R/usr/bin/tessera --version runs under qemu-aarch64 with
#     the sysroot's libraries (-L SYSROOT).
#   package_deb.sh BUILD_DIR SYSROOT VERSION
# Exit 0 pass, 1 fail.
set -u
B=${1:?usage: package_deb.sh BUILD_DIR SYSROOT VERSION}
S=${2:?sysroot}
V=${3:?version}
fail=0
ok() { echo "PASS $1"; }
bad() { echo "FAIL $1"; fail=1; }
for tool in cpack dpkg dpkg-deb dpkg-shlibdeps readelf qemu-aarch64; do
  command -v $tool >/dev/null || { echo "FAIL $tool missing (deploy/install-deps.sh)"; exit 1; }
done
[ -f "$B/CPackConfig.cmake" ] || { echo "FAIL $B/CPackConfig.cmake missing"; exit 1; }
cache=$S.apt/cache/archives
[ -d "$cache" ] || { echo "FAIL $cache missing: make the sysroot with deploy/arm64-sysroot.sh $S"; exit 1; }
D=$(mktemp -d /tmp/tessera-deb-arm64-XXXXXX)
trap 'rm -rf "$D"' EXIT

# ---- build the package ---------------------------------------------------------
start=$(date +%s.%N)
if (cd "$D" && cpack -G DEB --config "$B/CPackConfig.cmake" -B "$D/pkg" >"$D/cpack.log" 2>&1); then
  ok "cpack built a .deb in $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }') s"
else
  bad "cpack failed:"; cat "$D/cpack.log"; exit 1
fi
debs=("$D"/pkg/*.deb)
want=tessera_${V}_arm64.deb
[ ${#debs[@]} = 1 ] && [ "$(basename "${debs[0]}")" = "$want" ] || { bad "cpack made $(ls "$D/pkg"), want $want"; exit 1; }
deb=${debs[0]}
ok "package $want"

# ---- control fields ----------------------------------------------------------------
for field in Package:tessera Version:"$V" Architecture:arm64; do
  got=$(dpkg-deb -f "$deb" "${field%%:*}")
  [ "$got" = "${field#*:}" ] && ok "${field%%:*}: $got" || bad "${field%%:*}: '$got', want ${field#*:}"
done
depends=$(dpkg-deb -f "$deb" Depends)
echo "    Depends: $depends"
echo ", $depends," | grep -q ', adduser[ ,]' || bad "Depends lacks adduser (postinst fallback)"

dpkg-deb -x "$deb" "$D/x"
bin=$D/x/usr/bin/tessera
[ -f "$bin" ] || { bad "no /usr/bin/tessera in the package"; exit 1; }
machine=$(readelf -h "$bin" | sed -n 's/^ *Machine: *//p')
type=$(readelf -h "$bin" | sed -n 's/^ *Type: *\([A-Z]*\).*/\1/p')
[ "$machine" = AArch64 ] && [[ $type == EXEC || $type == DYN ]] && ok "/usr/bin/tessera: ELF $type, machine $machine" ||
  bad "/usr/bin/tessera: machine '$machine', type '$type' (want an AArch64 executable)"
readelf -S "$bin" | grep -q '\.symtab' && bad "/usr/bin/tessera is not stripped (CPACK_STRIP_FILES)" ||
  ok "/usr/bin/tessera is stripped"

# Which sysroot package ships each file: the .debs' own file lists.
for f in $(cd "$S" && sed -n '/\.deb$/p' .tessera-sysroot); do
  [ -f "$cache/$f" ] || { bad "$cache/$f missing (re-run deploy/arm64-sysroot.sh $S)"; exit 1; }
  pkg=$(dpkg-deb -f "$cache/$f" Package)
  dpkg-deb -c "$cache/$f" | awk -v p="$pkg" '{ print p, $6 }'
done >"$D/files"
missing=0
needed=$(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
for lib in $needed; do
  pkg=$(awk -v l="$lib" '$2 ~ "^[.]/(usr/)?lib/aarch64-linux-gnu/[^/]*$" {
      n = split($2, part, "/"); if (part[n] == l) { print $1; exit } }' "$D/files")
  if [ -z "$pkg" ]; then bad "$lib: no sysroot package ships it"; missing=1; continue; fi
  f=$(awk -v p="${pkg}_" 'index($0, p) == 1 { print; exit }' "$S/.tessera-sysroot")
  names="$pkg $(dpkg-deb -f "$cache/$f" Provides | sed 's/([^)]*)//g; s/,/ /g')"
  found=0
  for n in $names; do echo ", $depends," | grep -qE ", ${n//+/\\+}( \(|,)" && found=1; done
  [ $found = 1 ] || { bad "Depends lacks $pkg (ships $lib)"; missing=1; }
done
[ $missing = 0 ] && ok "Depends names the arm64 package of each of the $(echo "$needed" | wc -w) NEEDED libraries"

contents=$(dpkg-deb -c "$deb" | awk '{ print $6 }')
for f in ./usr/bin/tessera ./lib/systemd/system/tessera-worker.service ./lib/systemd/system/tessera-gateway.service \
    ./etc/tessera/cluster.yaml ./usr/share/tessera/devices/rpi4.yaml ./usr/lib/sysusers.d/tessera.conf; do
  grep -qx -- "$f" <<<"$contents" || bad "dpkg-deb -c: $f missing"
done
ok "dpkg-deb -c: binary, units, /etc/tessera/cluster.yaml, presets, sysusers file"

# ---- install into an empty arm64 root ----------------------------------------------------
R=$D/root
mkdir -p "$R/var/lib/dpkg/info" "$R/var/lib/dpkg/updates"
touch "$R/var/lib/dpkg/status" "$R/var/lib/dpkg/available"
echo arm64 >"$R/var/lib/dpkg/arch"
host_ids=$(sha256sum /etc/passwd /etc/group)
if dpkg --root="$R" --force-script-chrootless --force-depends -i "$deb" >"$D/dpkg.log" 2>&1; then
  ok "dpkg --root installed it into an arm64 root (maintainer scripts run)"
else
  bad "dpkg -i:"; cat "$D/dpkg.log"
fi
[ "$(sha256sum /etc/passwd /etc/group)" = "$host_ids" ] || bad "the install changed this machine's /etc/passwd or /etc/group"
dpkg --root="$R" -s tessera 2>/dev/null | grep -qx 'Status: install ok installed' && ok "dpkg status: install ok installed" ||
  bad "dpkg status: $(dpkg --root="$R" -s tessera 2>&1 | grep Status)"
grep -q '^tessera:' "$R/etc/passwd" 2>/dev/null && ok "postinst made the tessera user in the root" ||
  bad "no tessera user in $R/etc/passwd"
version=$(qemu-aarch64 -L "$S" "$R/usr/bin/tessera" --version 2>&1)
if [[ "$version" =~ ^tessera\ ${V//./\\.}( |$) ]]; then ok "installed tessera --version under qemu-aarch64: $version"
else bad "installed tessera --version: '$version'"; fi
exit $fail
