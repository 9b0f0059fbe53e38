# Helpers that give every weir target the same flags without touching global CMAKE_CXX_FLAGS.

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

# weir_add_library(<module> SOURCES ... [PUBLIC_DEPS ...] [PRIVATE_DEPS ...])
# Creates weir_<module> with alias weir::<module>; public headers in <module>/include.
function(weir_add_library module)
  cmake_parse_arguments(ARG "" "" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(weir_${module} STATIC ${ARG_SOURCES})
  add_library(weir::${module} ALIAS weir_${module})
  target_include_directories(weir_${module}
    PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/include
    PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
  target_link_libraries(weir_${module} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE weir_build_flags ${ARG_PRIVATE_DEPS})
  target_compile_features(weir_${module} PUBLIC cxx_std_20)
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
    WEIR_SHARED_DIR="${WEIR_SHARED_DIR}" WEIR_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
    WEIR_BIN_DIR="${CMAKE_RUNTIME_OUTPUT_DIRECTORY}")
  gtest_discover_tests(${name}
    DISCOVERY_MODE PRE_TEST
    PROPERTIES LABELS "${module};${ARG_LABELS}" TIMEOUT 600
    WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
endfunction()
