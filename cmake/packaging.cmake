# `ninja package` (cpack -G DEB): tessera_<version>_<arch>.deb for Debian 12
# boards (issue 12 item 4). It holds
#   /usr/bin/tessera
#   /lib/systemd/system/tessera-{worker,gateway}.service  (deploy/systemd/, with
#       ExecStart= /usr/bin/tessera instead of the /usr/local/bin of a source install)
#   /usr/share/tessera/devices/*.yaml  device presets (configs/devices/; the
#       planner looks in <bin>/../share/tessera/devices)
#   /etc/tessera/cluster.yaml (conffile: dpkg keeps local edits), /etc/tessera/tls/,
#       /etc/tessera/devices/ (presets of the user's own boards: tessera calibrate)
#   /usr/lib/sysusers.d/tessera.conf  the static system user `tessera` the units run as
# and maintainer scripts (deploy/debian/) that create that user (systemd-sysusers,
# else adduser). Depends: from dpkg-shlibdeps on the binary, plus adduser.
#
# The architecture comes from the target (CMAKE_SYSTEM_PROCESSOR), not the
# build machine, so a native arm64 build names its package _arm64.deb.

set(TESSERA_UNITS tessera-worker.service tessera-gateway.service)
foreach(unit ${TESSERA_UNITS})
  set(src ${PROJECT_SOURCE_DIR}/deploy/systemd/${unit})
  set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${src})
  file(READ ${src} text)
  string(REPLACE "/usr/local/bin/tessera " "/usr/bin/tessera " text "${text}")
  file(WRITE ${CMAKE_BINARY_DIR}/package/systemd/${unit} "${text}")
  install(FILES ${CMAKE_BINARY_DIR}/package/systemd/${unit} DESTINATION /lib/systemd/system)
endforeach()

install(TARGETS tessera RUNTIME DESTINATION bin)
file(GLOB TESSERA_PRESETS ${PROJECT_SOURCE_DIR}/configs/devices/*.yaml)
install(FILES ${TESSERA_PRESETS} DESTINATION share/tessera/devices)
install(FILES ${PROJECT_SOURCE_DIR}/deploy/debian/cluster.yaml DESTINATION /etc/tessera)
install(FILES ${PROJECT_SOURCE_DIR}/deploy/debian/tessera.sysusers DESTINATION lib/sysusers.d RENAME tessera.conf)
# Empty directories: postinst gives tls/ to group tessera, mode 0750.
install(DIRECTORY DESTINATION /etc/tessera/tls)
install(DIRECTORY DESTINATION /etc/tessera/devices)

include(${CMAKE_CURRENT_LIST_DIR}/deb_arch.cmake)
tessera_deb_arch("${CMAKE_SYSTEM_PROCESSOR}" TESSERA_DEB_ARCH)
if(NOT TESSERA_DEB_ARCH)
  message(FATAL_ERROR "packaging: no Debian architecture name for CMAKE_SYSTEM_PROCESSOR '${CMAKE_SYSTEM_PROCESSOR}'; "
                      "add it to cmake/deb_arch.cmake")
endif()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME tessera)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_PACKAGE_CONTACT "tessera maintainers <tessera@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "run one CNN across a cluster of small devices")
set(CPACK_PACKAGE_DESCRIPTION
    "The tessera binary (worker, gateway, planner, deploy, calibrate) and systemd units for its worker and gateway daemons.")
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_PACKAGE_ARCHITECTURE ${TESSERA_DEB_ARCH})
set(CPACK_DEBIAN_FILE_NAME "tessera_${PROJECT_VERSION}_${TESSERA_DEB_ARCH}.deb")
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "systemd")
# conffiles: every file under /etc, so dpkg keeps a user's edits on upgrade.
file(WRITE ${CMAKE_BINARY_DIR}/package/conffiles "/etc/tessera/cluster.yaml\n")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${CMAKE_BINARY_DIR}/package/conffiles ${PROJECT_SOURCE_DIR}/deploy/debian/postinst
    ${PROJECT_SOURCE_DIR}/deploy/debian/prerm ${PROJECT_SOURCE_DIR}/deploy/debian/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
