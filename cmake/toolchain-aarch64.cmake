# Cross build for arm64 Linux boards (Raspberry Pi 4/5 class) with Debian's
# g++-aarch64-linux-gnu; tests run under qemu-aarch64 (qemu-user). Two uses
# (README "arm64"):
#   * -DTESSERA_KERNELS_ONLY=ON: kernels, executor and their tests (label
#     arm64); header-only dependencies from the build machine, libc and
#     libstdc++ from the cross toolchain (/usr/aarch64-linux-gnu).
#   * -DTESSERA_ARM64_SYSROOT=<dir>: the whole `tessera` binary, its tests
#     (label arm64-full) and its _arm64.deb, against the Debian 12 arm64
#     libraries in <dir>, made by deploy/arm64-sysroot.sh. Code generation
#     uses the build machine's protoc and grpc_cpp_plugin (CMakeLists.txt).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# try_compile projects see this variable too.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES TESSERA_ARM64_SYSROOT)

if(NOT TESSERA_ARM64_SYSROOT)
  set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
  set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/aarch64-linux-gnu)
  return()
endif()

if(NOT EXISTS "${TESSERA_ARM64_SYSROOT}/usr/lib/aarch64-linux-gnu/libgrpc++.so"
   OR NOT EXISTS "${TESSERA_ARM64_SYSROOT}/.tessera-sysroot")
  message(FATAL_ERROR "TESSERA_ARM64_SYSROOT=${TESSERA_ARM64_SYSROOT} is not an arm64 sysroot made by "
                      "deploy/arm64-sysroot.sh (no usr/lib/aarch64-linux-gnu/libgrpc++.so or .tessera-sysroot "
                      "there). Make it with: sudo deploy/arm64-sysroot.sh ${TESSERA_ARM64_SYSROOT}")
endif()
# The compiler's --sysroot: libraries, headers, CMake and pkg-config files of
# the arm64 packages. C++ standard headers and libstdc++ stay the cross
# toolchain's (same GCC 12 as Debian 12's libstdc++6).
set(CMAKE_SYSROOT "${TESSERA_ARM64_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH "${TESSERA_ARM64_SYSROOT}")
# The linker resolves the libraries' own DT_NEEDED (abseil under gRPC, ...)
# in the sysroot's multiarch directories, which GNU ld does not search itself.
set(_tessera_rpath_link
    "-Wl,-rpath-link,${TESSERA_ARM64_SYSROOT}/usr/lib/aarch64-linux-gnu -Wl,-rpath-link,${TESSERA_ARM64_SYSROOT}/lib/aarch64-linux-gnu")
set(CMAKE_EXE_LINKER_FLAGS_INIT "${_tessera_rpath_link}")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "${_tessera_rpath_link}")
set(CMAKE_MODULE_LINKER_FLAGS_INIT "${_tessera_rpath_link}")
# pkg-config (CBC, libsystemd): the sysroot's .pc files, paths prefixed with it.
set(ENV{PKG_CONFIG_SYSROOT_DIR} "${TESSERA_ARM64_SYSROOT}")
set(ENV{PKG_CONFIG_LIBDIR}
    "${TESSERA_ARM64_SYSROOT}/usr/lib/aarch64-linux-gnu/pkgconfig:${TESSERA_ARM64_SYSROOT}/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")
# Test programs and `tessera` itself run under qemu-user with the sysroot as
# their root for the dynamic loader and libraries.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L "${TESSERA_ARM64_SYSROOT}")
