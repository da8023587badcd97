# layering_test.cmake: the production code never reaches the oracle that judges it.
#   cmake -DSOURCE_DIR=... -DCLOSURES="gpu=a;b|backends=c;d" -P layering_test.cmake
# Fails when a file under gpu/ or backends/ includes a header of the oracle
# (attn_oracle/reference/...), of the case files and the reference backend
# (attn_oracle/cases/...), of the properties or of their runner, or when the
# link closure of attn_oracle::gpu or attn_oracle::backends (computed at
# configure time, tests/CMakeLists.txt) holds one of those libraries.
cmake_policy(SET CMP0057 NEW)
set(forbidden_includes "attn_oracle/reference/" "attn_oracle/cases/" "attn_oracle/properties/" "attn_oracle/runner/")
set(failures "")
foreach(dir gpu backends)
  file(GLOB_RECURSE files "${SOURCE_DIR}/${dir}/*.hpp" "${SOURCE_DIR}/${dir}/*.cpp"
       "${SOURCE_DIR}/${dir}/*.cu" "${SOURCE_DIR}/${dir}/*.cuh")
  foreach(file ${files})
    file(STRINGS "${file}" includes REGEX "^#include")
    foreach(line ${includes})
      foreach(bad ${forbidden_includes})
        string(FIND "${line}" "${bad}" at)
        if(NOT at EQUAL -1)
          list(APPEND failures "${file}: ${line}")
        endif()
      endforeach()
    endforeach()
  endforeach()
endforeach()
string(REPLACE "|" ";" groups "${CLOSURES}")
foreach(group ${groups})
  string(REGEX MATCH "^[^=]*" target "${group}")
  string(REGEX REPLACE "^[^=]*=" "" closure "${group}")
  string(REPLACE "," ";" closure "${closure}")
  foreach(bad attn_oracle_reference attn_oracle_cases attn_oracle_properties attn_oracle_runner)
    if(bad IN_LIST closure)
      list(APPEND failures "attn_oracle_${target} links ${bad} (link closure: ${closure})")
    endif()
  endforeach()
endforeach()
if(failures)
  list(JOIN failures "\n  " text)
  message(FATAL_ERROR "the production code reaches the oracle:\n  ${text}")
endif()
message(STATUS "layering: gpu/ and backends/ include and link the data model and the seam only")
