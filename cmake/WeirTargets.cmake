# Helpers that give every weir target the same flags without touching global CMAKE_CXX_FLAGS,
# and install every library made with them (see weir_install_library).
include(GNUInstallDirs)

add_library(weir_build_flags INTERFACE)
target_compile_features(weir_build_flags INTERFACE cxx_std_20)
target_compile_options(weir_build_flags INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers>
  # GCC 12 reports impossible overlaps in std::string concatenation at -O3 (GCC bug 105329).
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-restrict>)
if(WEIR_SANITIZE)
  target_compile_options(weir_build_flags INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined>)
  target_link_options(weir_build_flags INTERFACE -fsanitize=address,undefined)
endif()

find_program(WEIR_CCACHE ccache)

# weir_install_library(<target> <export name> [HEADERS <dir>]): installs a static library into
# the `weirTargets` export set as weir::<export name> (lib/, and <dir>'s contents into include/).
# The package's config file, weir.pc and the Debian package are written from that set at the
# end of the top-level CMakeLists.txt (cmake/WeirPackage.cmake), so a module made with
# weir_add_library needs no install code of its own.
function(weir_install_library target export_name)
  cmake_parse_arguments(ARG "" "HEADERS" "" ${ARGN})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${export_name})
  set_property(GLOBAL APPEND PROPERTY WEIR_INSTALLED_LIBRARIES ${target})
  if(NOT WEIR_INSTALL)
    return()
  endif()
  install(TARGETS ${target} EXPORT weirTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT devel)
  if(ARG_HEADERS)
    install(DIRECTORY ${ARG_HEADERS}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT devel
      FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h" PATTERN "*.cuh")
  endif()
endfunction()

# weir_find_package(<package> [args...] [DEBIAN <deb>...]): find_package for a dependency that
# installed weir needs again: the same call becomes a find_dependency in weirConfig.cmake, and
# the Debian packages named become dependencies of weir's .deb. (Build-only dependencies such
# as GTest use plain find_package.)
# A macro, so that find_package's variables and imported targets land in the caller's scope.
macro(weir_find_package _weir_fp_package)
  cmake_parse_arguments(_weir_fp "" "" "DEBIAN" ${ARGN})
  find_package(${_weir_fp_package} ${_weir_fp_UNPARSED_ARGUMENTS})
  set(_weir_fp_args ${_weir_fp_UNPARSED_ARGUMENTS})
  list(REMOVE_ITEM _weir_fp_args REQUIRED QUIET)
  list(JOIN _weir_fp_args " " _weir_fp_args)
  set_property(GLOBAL APPEND PROPERTY WEIR_CONFIG_DEPENDENCIES
    "find_dependency(${_weir_fp_package} ${_weir_fp_args})")
  set_property(GLOBAL APPEND PROPERTY WEIR_DEBIAN_DEPENDS ${_weir_fp_DEBIAN})
endmacro()

# The modules off the inference hot path (the graph executor, agents, tools, HTTP, serving,
# the run queue, the CLI) build at -O2 in Release: GCC's -O3 costs them ~15% more compile time
# (measured per translation unit, bench/README.md "Build time") for code that waits on timers,
# sockets and the engine. runtime and inference* (kernels, quantised GEMMs, sampling) keep -O3.
function(weir_off_hot_path target module)
  if(NOT module MATCHES "^(runtime|inference)")
    target_compile_options(${target} PRIVATE $<$<AND:$<CONFIG:Release>,$<COMPILE_LANGUAGE:CXX>>:-O2>)
  endif()
endfunction()

# weir_add_library(<module> [INTERNAL] SOURCES ... [PUBLIC_DEPS ...] [PRIVATE_DEPS ...])
# Creates weir_<module> with alias weir::<module>; public headers in <module>/include, installed
# (with the library, exported as weir::<module>) by `cmake --install`.
# INTERNAL: a library only weir's own modules use (pg/): its include/ is their interface inside
# the build and is not installed; the archive is (installed static libraries that use it link it).
function(weir_add_library module)
  cmake_parse_arguments(ARG "INTERNAL" "" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(weir_${module} STATIC ${ARG_SOURCES})
  add_library(weir::${module} ALIAS weir_${module})
  target_include_directories(weir_${module}
    PUBLIC $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
           $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/include>  # weir/version.hpp (generated)
    PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
  if(NOT ARG_INTERNAL)
    target_include_directories(weir_${module} PUBLIC $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  endif()
  # weir_build_flags (warnings, sanitizers) is for weir's own build: BUILD_INTERFACE keeps it
  # out of the installed link interface, where a static library would otherwise carry it.
  target_link_libraries(weir_${module}
    PUBLIC ${ARG_PUBLIC_DEPS}
    PRIVATE $<BUILD_INTERFACE:weir_build_flags> ${ARG_PRIVATE_DEPS})
  target_compile_features(weir_${module} PUBLIC cxx_std_20)
  weir_off_hot_path(weir_${module} ${module})
  set(headers)
  if(NOT ARG_INTERNAL AND IS_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/include)
    set(headers HEADERS ${CMAKE_CURRENT_SOURCE_DIR}/include)
  endif()
  weir_install_library(weir_${module} ${module} ${headers})
endfunction()

# weir_add_executable(<name> SOURCES ... DEPS ...): lands in build/bin/<name>.
function(weir_add_executable name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE weir_build_flags ${ARG_DEPS})
endfunction()

# weir_add_test(<module> SOURCES ... DEPS ... [NAME n] [LABELS ...]): one gtest binary per module,
# build/bin/<module>_test (or NAME), every test case registered with ctest under the label
# <module> plus LABELS (e.g. gpu).
function(weir_add_test module)
  cmake_parse_arguments(ARG "" "NAME" "SOURCES;DEPS;LABELS" ${ARGN})
  set(name ${module}_test)
  if(ARG_NAME)
    set(name ${ARG_NAME})
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE weir_build_flags ${ARG_DEPS} GTest::gtest GTest::gtest_main GTest::gmock)
  target_compile_definitions(${name} PRIVATE
    WEIR_SHARED_DIR="${WEIR_SHARED_DIR}" WEIR_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    WEIR_BIN_DIR="${CMAKE_RUNTIME_OUTPUT_DIRECTORY}")
  gtest_discover_tests(${name}
    DISCOVERY_MODE PRE_TEST
    PROPERTIES LABELS "${module}" TIMEOUT 600
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  # gtest_discover_tests splits a list-valued property (LABELS "graph;scaleout" became LABELS
  # graph plus a bogus property "scaleout"), so extra labels are set by a script ctest includes
  # after the discovered tests (${name}_TESTS is the list discovery fills).
  if(ARG_LABELS)
    set(labels_file ${CMAKE_CURRENT_BINARY_DIR}/${name}_labels.cmake)
    file(WRITE ${labels_file}
      "if(${name}_TESTS)\n  set_tests_properties(\${${name}_TESTS} PROPERTIES LABELS \"${module};${ARG_LABELS}\")\nendif()\n")
    set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${labels_file})
  endif()
endfunction()
