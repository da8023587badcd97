# environment_edges_test.cmake: settings travel as values, the environment is
# read at a program's edge only (model/include/attn_oracle/model/environment.hpp,
# harness/include/attn_oracle/harness/settings.hpp).
#   cmake -DSOURCE_DIR=... [-DPLANTED=DIR] -P environment_edges_test.cmake
# Fails when the project's C++ code
#  - calls getenv anywhere but model/src/environment.cpp (read_environment,
#    the one reader, with the list of variables and what each means);
#  - writes the environment (setenv, unsetenv, putenv, clearenv) anywhere but
#    conformance/conformance_main.cpp, which removes GoogleTest's sharding
#    variables so that GoogleTest does not shard the tests as well as the draws,
#    and makes ctest's GPU allocation the CUDA runtime's visible devices;
#  - calls read_environment() or default_run_settings() below an edge. The
#    edges: the attn-oracle CLI's main (tools/), a conformance binary's main,
#    the Python module's init, and the programs under tests/, bench/ and fuzz/.
# With PLANTED (a directory) it scans instead a file it writes there as if it
# were properties/src/planted.cpp, which breaks every rule: the test of the test.
cmake_policy(SET CMP0057 NEW)
cmake_policy(SET CMP0007 NEW)
set(getenv_edges "model/src/environment.cpp")
set(setenv_edges "conformance/conformance_main.cpp")
set(reader_edges "model/include/attn_oracle/model/environment.hpp" "model/src/environment.cpp"
    "harness/include/attn_oracle/harness/settings.hpp" "harness/src/settings.cpp" "tools/attn_oracle_main.cpp"
    "conformance/conformance_main.cpp" "python/src/core_module.cpp")
set(program_dirs "tests/" "bench/" "fuzz/")
set(getenv_call "(^|[^_A-Za-z])(secure_)?getenv *\\(")
set(setenv_call "(^|[^_A-Za-z])(setenv|unsetenv|putenv|clearenv) *\\(")
set(reader_call "(^|[^_A-Za-z])(read_environment|default_run_settings) *\\(")
set(any_call "(^|[^_A-Za-z])(secure_getenv|getenv|setenv|unsetenv|putenv|clearenv|read_environment|default_run_settings) *\\(")

set(globs "")
foreach(dir model adapters reference seam cases properties runner harness conformance tools gpu backends python/src tests fuzz bench)
  foreach(ext cpp hpp h cu cuh cc)
    list(APPEND globs "${SOURCE_DIR}/${dir}/*.${ext}")
  endforeach()
endforeach()
file(GLOB_RECURSE files ${globs})
list(FILTER files EXCLUDE REGEX "/(build|\\.deps)/")
if(PLANTED)
  set(files "")  # the planted file alone: the rules are the same for every file
  file(WRITE "${PLANTED}/planted.cpp"
       "// A layer that talks to itself through the environment.\n"
       "const char* profile = std::getenv(\"ATTN_ORACLE_PROFILE\");\n"
       "void tell() { setenv(\"ATTN_ORACLE_PROFILE\", \"deep\", 1); }\n"
       "const auto env = read_environment();\n")
  list(APPEND files "${PLANTED}/planted.cpp")
endif()

set(failures "")
foreach(file ${files})
  if(file STREQUAL "${PLANTED}/planted.cpp")
    set(rel "properties/src/planted.cpp")
  else()
    file(RELATIVE_PATH rel "${SOURCE_DIR}" "${file}")
  endif()
  set(program FALSE)
  foreach(dir ${program_dirs})
    string(FIND "${rel}" "${dir}" at)
    if(at EQUAL 0)
      set(program TRUE)
    endif()
  endforeach()
  # One read a file, the lines that touch the environment; then each rule.
  file(STRINGS "${file}" lines REGEX "${any_call}")
  foreach(line IN LISTS lines)
    string(STRIP "${line}" line)
    string(REPLACE ";" "," line "${line}")
    if(line MATCHES "${getenv_call}" AND NOT rel IN_LIST getenv_edges)
      list(APPEND failures "${rel}: getenv outside model/src/environment.cpp: ${line}")
    elseif(line MATCHES "${setenv_call}" AND NOT rel IN_LIST setenv_edges)
      list(APPEND failures "${rel}: setenv or the like, a layer telling another through the environment: ${line}")
    elseif(line MATCHES "${reader_call}" AND NOT program AND NOT rel IN_LIST reader_edges)
      list(APPEND failures "${rel}: read_environment below a program's edge: ${line}")
    endif()
  endforeach()
endforeach()

list(LENGTH files count)
if(failures)
  list(JOIN failures "\n" text)
  message(FATAL_ERROR "${text}")
endif()
message(STATUS "environment edges: ${count} files; getenv in ${getenv_edges} only, setenv in ${setenv_edges} only")
