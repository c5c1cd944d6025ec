# `cmake --install build --prefix P` puts troupe where another project's
# find_package(troupe) finds it: the libraries, the headers (with the Cap'n
# Proto ones generated here), troupe-node, troupe-export and troupe-plot
# (and the GPU plugin where nvcc was found),
# and troupeConfig.cmake, which finds troupe's own dependencies again
# (CAF through the FindCAF.cmake it ships: Debian's CAF has no config).
# examples/custom_worker/CMakeLists.txt is such a project;
# tests/install/build_installed.sh builds it against an install.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(troupe_cmake_dir "${CMAKE_INSTALL_LIBDIR}/cmake/troupe")
set(troupe_include_dir "${CMAKE_INSTALL_INCLUDEDIR}/troupe")

target_include_directories(troupe PUBLIC
  "$<INSTALL_INTERFACE:${troupe_include_dir}>")
target_include_directories(troupe_kernels PUBLIC
  "$<INSTALL_INTERFACE:${troupe_include_dir}>")

install(TARGETS troupe troupe_kernels EXPORT troupeTargets
  ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}")
install(TARGETS troupe-node troupe-export troupe-plot
  RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}")
if(TROUPE_HAVE_CUDA) # found from bin/ as ../LIBDIR (actors/device/gpu_plugin)
  install(TARGETS troupe_cuda_plugin
    LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}")
endif()
install(DIRECTORY actors kernels messages
  DESTINATION "${troupe_include_dir}"
  FILES_MATCHING PATTERN "*.hpp")
install(FILES ${troupe_capnp_hdrs}
  DESTINATION "${troupe_include_dir}/messages")
install(EXPORT troupeTargets NAMESPACE troupe::
  DESTINATION "${troupe_cmake_dir}")

configure_package_config_file(cmake/troupeConfig.cmake.in
  "${PROJECT_BINARY_DIR}/troupeConfig.cmake"
  INSTALL_DESTINATION "${troupe_cmake_dir}")
write_basic_package_version_file(
  "${PROJECT_BINARY_DIR}/troupeConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion)
install(FILES
  "${PROJECT_BINARY_DIR}/troupeConfig.cmake"
  "${PROJECT_BINARY_DIR}/troupeConfigVersion.cmake"
  cmake/FindCAF.cmake
  DESTINATION "${troupe_cmake_dir}")
