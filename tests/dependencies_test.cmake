# dependencies_test.cmake: where the C++ libraries come from when the system has
# none (cmake/AttnOracleDependencies.cmake), at configure time only: a full
# `pip install .` without them takes about 10 CPU-minutes and is
# scripts/pip-without-system-deps, run by hand.
#
#   cmake -DCASE=... -DSOURCE_DIR=... -DWORK_DIR=... -DPYTHON=... -DGENERATOR=...
#         -DCXX=... -DPYPI_EIGEN=cmeel-eigen==V -DPYPI_JSON=nlohmann-json==V -P dependencies_test.cmake
#
# Each case configures the whole project as pip does (SKBUILD, the Python
# package's options) in WORK_DIR, with Debian's packages hidden from CMake by
# CMAKE_DISABLE_FIND_PACKAGE_<Name> (the fallbacks ignore it):
#   fallback  ATTN_ORACLE_DEPENDENCIES=AUTO finds Eigen and nlohmann-json in the
#             PyPI packages pyproject.toml requires (pip-installed here into
#             WORK_DIR/site, from PyPI or pip's cache; SKIP when pip cannot) and
#             takes RapidCheck and CLI11 from checked archives. Without network to
#             GitHub each archive is a stand-in (an empty `rapidcheck` target; an
#             empty CLI/CLI.hpp), with its own SHA256, unless ATTN_ORACLE_RAPIDCHECK_URL
#             or ATTN_ORACLE_CLI11_URL names a copy of the pinned one.
#   missing   ATTN_ORACLE_DEPENDENCIES=SYSTEM (nothing fetched): the configure fails
#             naming the Debian and conda packages and the fallback, not with
#             find_package's own error.
#   bad_archive  AUTO with no PyPI packages and an archive whose SHA256 is not the
#             pinned one: it fails saying so, and what to install instead.
cmake_minimum_required(VERSION 3.25)
set(PYPI ${PYPI_EIGEN} ${PYPI_JSON})
set(build "${WORK_DIR}/build")
file(REMOVE_RECURSE "${build}")
file(MAKE_DIRECTORY "${WORK_DIR}")

set(hide -DCMAKE_DISABLE_FIND_PACKAGE_Eigen3=ON -DCMAKE_DISABLE_FIND_PACKAGE_nlohmann_json=ON
         -DCMAKE_DISABLE_FIND_PACKAGE_rapidcheck=ON -DCMAKE_DISABLE_FIND_PACKAGE_CLI11=ON)
set(pip_like -DSKBUILD=2 -DATTN_ORACLE_PYTHON=ON -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=${CXX}
             -DPython_EXECUTABLE=${PYTHON})

# configure(OUT RC ARGS...): the project configured in ${build}; its output and status.
function(configure out rc)
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${build} -G ${GENERATOR} ${pip_like} ${ARGN}
                  OUTPUT_VARIABLE text ERROR_VARIABLE text RESULT_VARIABLE status)
  set(${out} "${text}" PARENT_SCOPE)
  set(${rc} "${status}" PARENT_SCOPE)
endfunction()

function(expect text)
  foreach(want ${ARGN})
    string(FIND "${text}" "${want}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "the configure's output lacks '${want}':\n${text}")
    endif()
  endforeach()
endfunction()

# A zip holding rapidcheck-standin/CMakeLists.txt: an empty `rapidcheck` target.
function(make_standin_archive path)
  set(dir "${WORK_DIR}/standin")
  file(REMOVE_RECURSE "${dir}")
  file(WRITE "${dir}/rapidcheck-standin/CMakeLists.txt"
       "# A stand-in for RapidCheck's source, made by dependencies_test.cmake\nadd_library(rapidcheck INTERFACE)\n")
  execute_process(COMMAND ${CMAKE_COMMAND} -E tar cf "${path}" --format=zip --mtime=2000-01-01 rapidcheck-standin
                  WORKING_DIRECTORY "${dir}" COMMAND_ERROR_IS_FATAL ANY)
endfunction()

# CLI11 from ATTN_ORACLE_CLI11_URL (a copy of the pinned release) or a stand-in
# archive: sets CLI11_ARGS (the configure's options) and CLI11_ORIGIN.
function(cli11_archive)
  if(DEFINED ENV{ATTN_ORACLE_CLI11_URL})
    set(CLI11_ARGS -DATTN_ORACLE_CLI11_URL=$ENV{ATTN_ORACLE_CLI11_URL} PARENT_SCOPE)
    set(CLI11_ORIGIN "$ENV{ATTN_ORACLE_CLI11_URL}" PARENT_SCOPE)
    return()
  endif()
  set(dir "${WORK_DIR}/cli11-standin")
  file(REMOVE_RECURSE "${dir}")
  file(WRITE "${dir}/CLI11-standin/include/CLI/CLI.hpp" "// A stand-in for CLI11's headers, made by dependencies_test.cmake\n")
  execute_process(COMMAND ${CMAKE_COMMAND} -E tar czf "${WORK_DIR}/cli11-standin.tar.gz" --mtime=2000-01-01 CLI11-standin
                  WORKING_DIRECTORY "${dir}" COMMAND_ERROR_IS_FATAL ANY)
  file(SHA256 "${WORK_DIR}/cli11-standin.tar.gz" sha256)
  set(CLI11_ARGS -DATTN_ORACLE_CLI11_URL=${WORK_DIR}/cli11-standin.tar.gz -DATTN_ORACLE_CLI11_SHA256=${sha256} PARENT_SCOPE)
  set(CLI11_ORIGIN "${WORK_DIR}/cli11-standin.tar.gz" PARENT_SCOPE)
endfunction()

if(CASE STREQUAL "fallback")
  # The pins pyproject.toml requires are those the configure names.
  file(READ "${SOURCE_DIR}/pyproject.toml" pyproject)
  string(REGEX MATCH "requires = \\[[^]]*\\]" requires "${pyproject}")
  foreach(pin ${PYPI})
    expect("${requires}" "\"${pin}\"")
  endforeach()
  set(site "${WORK_DIR}/site")
  set(stamp "${site}/installed.txt")
  set(have "")
  if(EXISTS "${stamp}")
    file(READ "${stamp}" have)
  endif()
  if(NOT have STREQUAL "${PYPI}")
    file(REMOVE_RECURSE "${site}")
    execute_process(COMMAND ${PYTHON} -m pip install -q --disable-pip-version-check --no-deps --target ${site} ${PYPI}
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
    if(NOT rc EQUAL 0)
      message("SKIP: pip could not install ${PYPI} (${PYTHON}): ${out}")
      return()
    endif()
    file(WRITE "${stamp}" "${PYPI}")
  endif()
  if(DEFINED ENV{ATTN_ORACLE_RAPIDCHECK_URL})
    set(rapidcheck -DATTN_ORACLE_RAPIDCHECK_URL=$ENV{ATTN_ORACLE_RAPIDCHECK_URL})
    set(archive_origin "$ENV{ATTN_ORACLE_RAPIDCHECK_URL}")
  else()
    make_standin_archive("${WORK_DIR}/rapidcheck-standin.zip")
    file(SHA256 "${WORK_DIR}/rapidcheck-standin.zip" sha256)
    set(rapidcheck -DATTN_ORACLE_RAPIDCHECK_URL=${WORK_DIR}/rapidcheck-standin.zip -DATTN_ORACLE_RAPIDCHECK_SHA256=${sha256})
    set(archive_origin "${WORK_DIR}/rapidcheck-standin.zip")
    message("(RapidCheck: a stand-in archive; set ATTN_ORACLE_RAPIDCHECK_URL to a copy of the pinned one to use it)")
  endif()
  cli11_archive()
  set(ENV{PYTHONPATH} "${site}")
  configure(text rc -DATTN_ORACLE_DEPENDENCIES=AUTO ${hide} ${rapidcheck} ${CLI11_ARGS})
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the configure failed:\n${text}")
  endif()
  string(REGEX MATCH "cmeel-eigen==([0-9.]+)" _ "${PYPI}")
  set(eigen_version ${CMAKE_MATCH_1})
  string(REGEX MATCH "nlohmann-json==([0-9.]+)" _ "${PYPI}")
  expect("${text}" "attn-oracle: Eigen ${eigen_version} from PyPI's cmeel-eigen (${site}/"
         "attn-oracle: nlohmann-json ${CMAKE_MATCH_1} from PyPI's nlohmann-json (${site}/"
         "attn-oracle: RapidCheck from ${archive_origin}" "attn-oracle: CLI11 from ${CLI11_ORIGIN}")
  # What the targets the build links carry: nothing of the system's.
  file(STRINGS "${build}/CMakeCache.txt" eigen_dir REGEX "^Eigen3_DIR:")
  expect("${eigen_dir}" "${site}/cmeel.prefix/share/eigen3/cmake")
  message("fallback: Eigen and nlohmann-json from PyPI, RapidCheck and CLI11 from the checked archives")
elseif(CASE STREQUAL "missing")
  configure(text rc -DATTN_ORACLE_DEPENDENCIES=SYSTEM ${hide})
  if(rc EQUAL 0)
    message(FATAL_ERROR "the configure passed with every dependency hidden:\n${text}")
  endif()
  expect("${text}" "missing C++ dependencies"
         "sudo apt-get install libeigen3-dev" "sudo apt-get install nlohmann-json3-dev"
         "sudo apt-get install librapidcheck-dev" "sudo apt-get install libcli11-dev"
         "conda install -c conda-forge eigen" "conda install -c conda-forge cli11" "conda install -c conda-forge nlohmann_json"
         "conda install -c conda-forge rapidcheck" "-DATTN_ORACLE_DEPENDENCIES=AUTO")
  string(FIND "${text}" "Could not find a package configuration file" raw)
  if(NOT raw EQUAL -1)
    message(FATAL_ERROR "find_package's own error is shown:\n${text}")
  endif()
  message("missing: the configure fails with the packages to install")
elseif(CASE STREQUAL "bad_archive")
  make_standin_archive("${WORK_DIR}/not-rapidcheck.zip")
  file(SHA256 "${WORK_DIR}/not-rapidcheck.zip" wrong)
  set(ENV{PYTHONPATH} "${WORK_DIR}/empty")  # no PyPI packages either
  cli11_archive()  # CLI11's archive is fine: the RapidCheck one is the wrong one
  configure(text rc -DATTN_ORACLE_DEPENDENCIES=AUTO ${hide} -DATTN_ORACLE_RAPIDCHECK_URL=${WORK_DIR}/not-rapidcheck.zip
            ${CLI11_ARGS})
  if(rc EQUAL 0)
    message(FATAL_ERROR "the configure took an archive that is not the pinned one:\n${text}")
  endif()
  expect("${text}" "has SHA256 ${wrong}, not the pinned" "sudo apt-get install librapidcheck-dev"
         "tried:" "pip install cmeel-eigen==" "the fallbacks were tried too")
  if(EXISTS "${build}/_deps/rapidcheck-src")
    message(FATAL_ERROR "the wrong archive was unpacked into ${build}/_deps/rapidcheck-src")
  endif()
  message("bad_archive: refused, with what to install instead")
else()
  message(FATAL_ERROR "unknown CASE '${CASE}'")
endif()
