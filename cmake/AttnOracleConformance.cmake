# attn_oracle_add_conformance(NAME SOURCE... [LIBRARIES LIB...])
#
# The one CMake line a vendoring project writes: a test executable NAME from the
# sources that register its backends (ATTN_ORACLE_REGISTER_BACKEND), linked with
# the conformance suite, every property x registered backend discovered as one
# ctest test (missing capabilities are skipped). Counterexample case files go to
# NAME-failures/ in the build directory. The caller needs enable_testing().
#
# Used from an install tree (find_package(AttnOracle)) and from add_subdirectory.
include_guard(GLOBAL)

function(attn_oracle_add_conformance name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "LIBRARIES")
  if(NOT TARGET GTest::gtest_main)
    find_package(GTest REQUIRED)  # imported targets are directory-scoped: find it here
  endif()
  add_executable(${name} ${arg_UNPARSED_ARGUMENTS})
  target_link_libraries(${name} PRIVATE attn_oracle::conformance GTest::gtest_main ${arg_LIBRARIES})
  include(GoogleTest)
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60
    PROPERTIES ENVIRONMENT "ATTN_ORACLE_FAILURES_DIR=${CMAKE_CURRENT_BINARY_DIR}/${name}-failures")
endfunction()
