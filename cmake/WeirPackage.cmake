# Installation and packaging (WEIR_INSTALL, on when weir is the top-level project):
#   cmake --install build --prefix P   the `weir` binary, its bash completion and man page, the
#                                      static libraries and public headers, the CMake package
#                                      (find_package(weir CONFIG)), weir.pc, docs and samples
#   make package                       the same as a Debian package, weir_<version>_amd64.deb
# The libraries come from weir_install_library (cmake/WeirTargets.cmake), which every
# weir_add_library calls, so this file names no module.
include(CMakePackageConfigHelpers)

set(WEIR_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/weir)
get_property(_weir_libs GLOBAL PROPERTY WEIR_INSTALLED_LIBRARIES)

# --- the CMake package --------------------------------------------------------------------------
install(EXPORT weirTargets NAMESPACE weir:: DESTINATION ${WEIR_CMAKE_DIR} COMPONENT devel)
get_property(_weir_deps GLOBAL PROPERTY WEIR_CONFIG_DEPENDENCIES)
list(REMOVE_DUPLICATES _weir_deps)
list(JOIN _weir_deps "\n" WEIR_CONFIG_DEPENDENCIES)
string(REPLACE "\\n" "\n" WEIR_CONFIG_DEPENDENCIES "${WEIR_CONFIG_DEPENDENCIES}")
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/weirConfig.cmake.in
  ${PROJECT_BINARY_DIR}/weirConfig.cmake INSTALL_DESTINATION ${WEIR_CMAKE_DIR})
# 0.x: a minor version may break the API, so 0.2 accepts 0.2.y only; from 1.0, SameMajorVersion.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/weirConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/weirConfig.cmake ${PROJECT_BINARY_DIR}/weirConfigVersion.cmake
  DESTINATION ${WEIR_CMAKE_DIR} COMPONENT devel)
install(FILES ${PROJECT_BINARY_DIR}/include/weir/version.hpp
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/weir COMPONENT devel)

# --- weir.pc: relocatable (prefix found from the .pc's own folder) ------------------------------
file(RELATIVE_PATH _weir_pc_up ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" _weir_pc_up "${_weir_pc_up}")
set(WEIR_PC_PREFIX "\${pcfiledir}/${_weir_pc_up}")
# Static libraries link in reverse order of creation (each depends only on earlier ones).
set(WEIR_PC_LIBS "")
foreach(_weir_lib ${_weir_libs})
  if(NOT _weir_lib STREQUAL "weir_inference_cuda")  # needs cudart: CMake consumers only
    string(PREPEND WEIR_PC_LIBS "-l${_weir_lib} ")
  endif()
endforeach()
string(STRIP "${WEIR_PC_LIBS}" WEIR_PC_LIBS)
set(WEIR_PC_REQUIRES "spdlog simdjson sqlite3 libpq libpcre2-8 openssl")
configure_file(${CMAKE_CURRENT_LIST_DIR}/weir.pc.in ${PROJECT_BINARY_DIR}/weir.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/weir.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
  COMPONENT devel)

# --- the binary, its completion and man page, docs, samples -------------------------------------
if(TARGET weir)
  install(TARGETS weir RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
  install(FILES ${PROJECT_BINARY_DIR}/share/bash-completion/completions/weir
    DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions COMPONENT runtime)
  install(FILES ${PROJECT_BINARY_DIR}/share/man/man1/weir.1
    DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT runtime)
endif()
install(FILES README.md CHANGELOG.md DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT runtime)
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT runtime)
# `weir demo` finds its crew in <prefix>/share/weir/samples when not run from a source tree.
# (samples/CMakeLists.txt builds the samples in weir's tree; samples/consumer's is for users.)
install(DIRECTORY samples/ DESTINATION ${CMAKE_INSTALL_DATADIR}/weir/samples COMPONENT runtime
  REGEX "samples/CMakeLists\\.txt$" EXCLUDE)
install(DIRECTORY schemas/ DESTINATION ${CMAKE_INSTALL_DATADIR}/weir/schemas COMPONENT runtime)

# --- the Debian package (make package) ----------------------------------------------------------
# -dev dependencies: the package ships static libraries and headers, whose users link weir's
# dependencies themselves. Each comes from weir_find_package(... DEBIAN ...).
get_property(_weir_debs GLOBAL PROPERTY WEIR_DEBIAN_DEPENDS)
list(REMOVE_DUPLICATES _weir_debs)
list(JOIN _weir_debs ", " _weir_debs)
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME weir)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "weir")
set(CPACK_PACKAGE_CONTACT "weir maintainers <weir@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGE_DESCRIPTION "${PROJECT_DESCRIPTION}.
Graphs of agents and tools run as Boost.Asio coroutines against one memory budget, with
admission limits, payloads by reference, bounded histories, loop caps and an in-process
transformer engine with a paged KV cache. This package holds the weir command, its static
libraries and headers, the CMake package (find_package(weir)), weir.pc, docs and samples.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # weir_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "${_weir_debs}")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)  # the binary's shared libraries (libc, libstdc++, ...)
set(CPACK_PACKAGE_DIRECTORY ${PROJECT_BINARY_DIR})
include(CPack)
