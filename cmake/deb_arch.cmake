# tessera_deb_arch(PROCESSOR OUT): the dpkg architecture name (amd64, arm64,
# armhf, i386, riscv64) for a CMAKE_SYSTEM_PROCESSOR value, empty if unknown.
# Used by cmake/packaging.cmake so the .deb is named after the target, not the
# build machine. `cmake -DPROCESSOR=aarch64 -P cmake/deb_arch.cmake` prints it.
function(tessera_deb_arch processor out)
  string(TOLOWER "${processor}" p)
  set(arch "")
  if(p MATCHES "^(x86_64|amd64)$")
    set(arch amd64)
  elseif(p MATCHES "^(aarch64|arm64)$")
    set(arch arm64)
  elseif(p MATCHES "^(armv7.*|armhf|arm)$")
    set(arch armhf)
  elseif(p MATCHES "^(i[3-6]86|x86)$")
    set(arch i386)
  elseif(p STREQUAL "riscv64")
    set(arch riscv64)
  endif()
  set(${out} "${arch}" PARENT_SCOPE)
endfunction()

if(CMAKE_SCRIPT_MODE_FILE AND DEFINED PROCESSOR)
  tessera_deb_arch("${PROCESSOR}" arch)
  message("${arch}")
endif()
