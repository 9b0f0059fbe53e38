# weir's version: PROJECT_VERSION (the project() call) plus the git commit it was built from.
#
# WEIR_GIT_DESCRIBE is `git describe --tags --always --dirty` at configure time (e.g.
# "v0.2.0-3-g1a2b3c4-dirty", or a bare hash before the first tag), or "unknown" when the source
# is not a git checkout (a release tarball, a FetchContent archive). Configure re-runs when
# HEAD moves, so `weir --version` does not go stale across commits.
set(WEIR_GIT_DESCRIBE "unknown")
find_package(Git QUIET)
if(GIT_FOUND AND EXISTS ${PROJECT_SOURCE_DIR}/.git)
  execute_process(COMMAND ${GIT_EXECUTABLE} describe --tags --always --dirty
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
    OUTPUT_VARIABLE _weir_describe OUTPUT_STRIP_TRAILING_WHITESPACE
    RESULT_VARIABLE _weir_rc ERROR_QUIET)
  if(_weir_rc EQUAL 0 AND _weir_describe)
    set(WEIR_GIT_DESCRIBE ${_weir_describe})
  endif()
  # HEAD and the branch it points at (a worktree's .git is a file: ask git for the paths).
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --git-path HEAD
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR} OUTPUT_VARIABLE _weir_head
    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  execute_process(COMMAND ${GIT_EXECUTABLE} symbolic-ref -q HEAD
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR} OUTPUT_VARIABLE _weir_branch
    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  set(_weir_watch ${_weir_head})
  if(_weir_branch)
    execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --git-path ${_weir_branch}
      WORKING_DIRECTORY ${PROJECT_SOURCE_DIR} OUTPUT_VARIABLE _weir_branch_file
      OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    list(APPEND _weir_watch ${_weir_branch_file})
  endif()
  foreach(_weir_file ${_weir_watch})
    if(NOT IS_ABSOLUTE ${_weir_file})
      set(_weir_file ${PROJECT_SOURCE_DIR}/${_weir_file})
    endif()
    if(EXISTS ${_weir_file})
      set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${_weir_file})
    endif()
  endforeach()
endif()
message(STATUS "weir: version ${PROJECT_VERSION} (${WEIR_GIT_DESCRIBE})")

# weir/version.hpp, public (installed with the runtime's headers): the version numbers only, so
# that a new commit rebuilds nothing but the binary's main.cpp (which includes build_info.hpp).
configure_file(${CMAKE_CURRENT_LIST_DIR}/version.hpp.in ${PROJECT_BINARY_DIR}/include/weir/version.hpp @ONLY)
configure_file(${CMAKE_CURRENT_LIST_DIR}/build_info.hpp.in ${PROJECT_BINARY_DIR}/cli/build_info.hpp @ONLY)
