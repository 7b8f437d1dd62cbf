# Included by the top-level CMakeLists.txt in a kernels-only build (TESSERA_KERNELS_ONLY, e.g. the
# arm64 cross build): each runs under CMAKE_CROSSCOMPILING_EMULATOR
# (qemu-aarch64) when cross-compiling. Label `arm64` for the cross build.
set(KERNEL_TESTS kernels_conv_test kernels_elementwise_test kernels_gemm_test kernels_isa_test kernels_layout_test
    kernels_pool_test kernels_registry_test kernels_alloc_test kernels_resize_tile_test kernels_conv_int8_test)
# What every kernel test links besides its own file, compiled once (it was
# compiled again for each of the ten: ~3 CPU-minutes of CI's arm64 stage,
# Catch2's main alone ~14 s a copy).
add_library(tessera_kernel_test_common OBJECT ${PROJECT_SOURCE_DIR}/tests/unit/main.cc
            ${PROJECT_SOURCE_DIR}/daemon/runtime/executor.cc ${PROJECT_SOURCE_DIR}/partition/compile/constant_file.cc)
target_include_directories(tessera_kernel_test_common PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(tessera_kernel_test_common PRIVATE tessera_kernels Catch2::Catch2)
foreach(name ${KERNEL_TESTS})
  add_executable(${name} ${PROJECT_SOURCE_DIR}/tests/unit/daemon/runtime/kernels/${name}.cc
                 $<TARGET_OBJECTS:tessera_kernel_test_common>)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PRIVATE tessera_kernels Catch2::Catch2)
  add_test(NAME ${CMAKE_SYSTEM_PROCESSOR}.${name} COMMAND ${name} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(${CMAKE_SYSTEM_PROCESSOR}.${name} PROPERTIES LABELS "arm64;kernels" TIMEOUT 900)
endforeach()
