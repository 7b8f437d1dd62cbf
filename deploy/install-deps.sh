#!/usr/bin/env bash
# Installs every Debian 12 package tessera's build, tests, benchmarks and demo
# need. Idempotent and non-interactive; run as root (or it re-runs itself
# through sudo when that is available).
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then exec sudo -E bash "$0" "$@"; fi
  echo "install-deps.sh: must run as root (apt-get install)" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive

# Build toolchain and libraries (ARCHITECTURE.md "Dependencies").
BUILD_PKGS=(
  build-essential cmake ninja-build pkg-config git curl
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libssl-dev
  libboost-dev libboost-system-dev
  libeigen3-dev libspdlog-dev libfmt-dev catch2
  libonnx-dev coinor-libcbc-dev coinor-libclp-dev coinor-libosi-dev coinor-libcgl-dev coinor-libcoinutils-dev
  libyaml-cpp-dev nlohmann-json3-dev libcli11-dev
  libsystemd-dev  # sd_notify for the Type=notify units (daemon/cluster/service_notify.h)
  dpkg-dev  # dpkg-shlibdeps: Depends: of the .deb (`ninja package`, cmake/packaging.cmake)
)
# Test oracles and data: PyTorch/torchvision/ONNX for /usr/bin/python3,
# ONNX conformance data, darknet's cfg files, node + npm for onnxruntime-node.
TEST_PKGS=(
  python3 python3-numpy python3-torch python3-torchvision python3-onnx
  libonnx-testdata darknet
  systemd  # systemd-analyze verify/security, systemd-sysusers (tests/integration/systemd_units.sh, package_deb.sh)
  python3-grpcio python3-grpc-tools  # a generated Open Inference Protocol client (tests/integration/gateway_oip.sh)
)
# MCU path (firmware + emulator) and serial-link helpers.
MCU_PKGS=(gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm socat)
# Kernel tests on emulated x86-64 CPUs without AVX-512 / AVX2 (tests/CMakeLists.txt),
# and the arm64 cross builds whose tests run under qemu-aarch64 (.ci/run,
# README "arm64"). The full arm64 build's target libraries are not this
# machine's packages: deploy/arm64-sysroot.sh unpacks their arm64 builds
# (its ARM64_PKGS) into a sysroot without installing anything.
CPU_TEST_PKGS=(qemu-user g++-aarch64-linux-gnu)
# bench/cluster-netns, bench/cluster-emulated: network namespaces, tc link
# shaping, plots.
BENCH_PKGS=(iproute2 python3-matplotlib)
# .ci/check-format: changed C++ lines must be clang-format clean (git clang-format).
LINT_PKGS=(clang-format)
# libFuzzer targets (tests/fuzz/, -DTESSERA_FUZZ=ON): Debian's clang and its
# runtime libraries (libFuzzer, ASan, UBSan).
FUZZ_PKGS=(clang libclang-rt-14-dev)

ALL=("${BUILD_PKGS[@]}" "${TEST_PKGS[@]}" "${MCU_PKGS[@]}" "${CPU_TEST_PKGS[@]}" "${BENCH_PKGS[@]}" "${LINT_PKGS[@]}"
  "${FUZZ_PKGS[@]}")
# node + npm run onnxruntime-node (second reference runtime). Machines of this
# kind already ship a newer Node than Debian's, whose nodejs package conflicts
# with it; install Debian's only when no node is present at all.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  ALL+=(nodejs npm)
fi

missing=()
for p in "${ALL[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps.sh: all ${#ALL[@]} packages already installed"
  exit 0
fi

echo "install-deps.sh: installing ${#missing[@]} packages: ${missing[*]}"
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "install-deps.sh: done"
