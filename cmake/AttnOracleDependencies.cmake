# The C++ libraries attn-oracle builds on, found in one place: Eigen, nlohmann-json,
# RapidCheck and CLI11 (every build), GoogleTest (the conformance suite and the tests).
#
# ATTN_ORACLE_DEPENDENCIES says where they may come from:
#   SYSTEM    find_package only: Debian's packages (scripts/setup), conda's, or any
#             prefix in CMAKE_PREFIX_PATH. The default of a development build.
#   AUTO      find_package first; what it does not find comes from the fallback
#             below. The default of `pip install .` (scikit-build-core sets SKBUILD).
#   FALLBACK  the fallback only, whatever the system has (a wheel that does not
#             depend on what the build machine installed; tests/dependencies_test.cmake).
# CMAKE_DISABLE_FIND_PACKAGE_<Name>=ON hides the system's <Name> alone (Eigen3,
# nlohmann_json, rapidcheck, CLI11); the fallback still applies.
#
# The fallbacks, one per library (docs/python.md#install says why each):
#   Eigen          PyPI's cmeel-eigen, a build requirement in pyproject.toml: found
#                  in the Python that configures (pip's build environment).
#   nlohmann-json  PyPI's nlohmann-json (headers only), likewise: an imported target.
#   RapidCheck     not on PyPI: its source at a pinned commit, downloaded and checked
#                  against a SHA256 here, then built with the project (FetchContent).
#   CLI11          not on PyPI: its release archive (v2.1.2, Debian's), downloaded and
#                  checked likewise; headers only (the harness's command line).
#   GoogleTest     none: only the tests and the conformance suite need it, and a pip
#                  build builds neither.
# Whatever is still missing stops the configure with one message that names, for
# each library, the Debian/Ubuntu and conda packages and the fallback's option.
# Tested by tests/dependencies_test.cmake (ctest -L dependencies).
include_guard(GLOBAL)

set(_attn_oracle_dependencies_default SYSTEM)
if(DEFINED SKBUILD)
  set(_attn_oracle_dependencies_default AUTO)
endif()
set(ATTN_ORACLE_DEPENDENCIES "${_attn_oracle_dependencies_default}" CACHE STRING
    "Where Eigen, nlohmann-json, RapidCheck and CLI11 come from: SYSTEM (find_package), AUTO (find_package, then PyPI packages and pinned downloads) or FALLBACK (never the system's)")
set_property(CACHE ATTN_ORACLE_DEPENDENCIES PROPERTY STRINGS SYSTEM AUTO FALLBACK)
string(TOUPPER "${ATTN_ORACLE_DEPENDENCIES}" _attn_oracle_deps_mode)
if(NOT _attn_oracle_deps_mode MATCHES "^(SYSTEM|AUTO|FALLBACK)$")
  message(FATAL_ERROR "ATTN_ORACLE_DEPENDENCIES is '${ATTN_ORACLE_DEPENDENCIES}': SYSTEM, AUTO or FALLBACK")
endif()

# RapidCheck has no releases: a commit of its master (2023-12-14, the one
# conan-center packages as cci.20231215), as the zip GitHub serves for it.
# ATTN_ORACLE_RAPIDCHECK_URL may name a mirror or a local copy of the same file
# (a path or file://); the hash is checked wherever it comes from. Pinning another
# commit means setting both. FETCHCONTENT_SOURCE_DIR_RAPIDCHECK=<a checkout>
# skips the download (and the check), as for any FetchContent dependency.
set(ATTN_ORACLE_RAPIDCHECK_URL
    "https://github.com/emil-e/rapidcheck/archive/ff6af6fc683159deb51c543b065eba14dfcf329b.zip"
    CACHE STRING "Where the RapidCheck fallback downloads its pinned source from")
set(ATTN_ORACLE_RAPIDCHECK_SHA256 "60951dbc4de162622f51a4a34117c269a9921833a51dddce36f4cc80a5f7cf9f"
    CACHE STRING "The SHA256 of the archive at ATTN_ORACLE_RAPIDCHECK_URL")
# CLI11's release v2.1.2 (the version Debian 12 packages), as GitHub serves its tag.
set(ATTN_ORACLE_CLI11_URL "https://github.com/CLIUtils/CLI11/archive/refs/tags/v2.1.2.tar.gz"
    CACHE STRING "Where the CLI11 fallback downloads its pinned release from")
set(ATTN_ORACLE_CLI11_SHA256 "26291377e892ba0e5b4972cdfd4a2ab3bf53af8dac1f4ea8fe0d1376b625c8cb"
    CACHE STRING "The SHA256 of the archive at ATTN_ORACLE_CLI11_URL")
set(ATTN_ORACLE_PYPI_EIGEN "cmeel-eigen==3.4.1")         # as in pyproject.toml's build requirements
set(ATTN_ORACLE_PYPI_NLOHMANN_JSON "nlohmann-json==3.12.0")

set(_attn_oracle_missing "")  # one paragraph per library still missing at the end

# attn_oracle_dependency_missing(NAME WHAT DEBIAN CONDA FALLBACK TRIED): records a
# paragraph for the final message.
function(attn_oracle_dependency_missing name what debian conda fallback tried)
  set(text "  ${name} (${what})\n")
  string(APPEND text "    Debian/Ubuntu: sudo apt-get install ${debian}\n")
  string(APPEND text "    conda:         conda install -c conda-forge ${conda}   (with the environment active)\n")
  if(fallback)
    string(APPEND text "    fallback:      ${fallback}\n")
  endif()
  string(APPEND text "    elsewhere:     add its install prefix to CMAKE_PREFIX_PATH\n")
  if(tried)
    string(APPEND text "    tried:         ${tried}\n")
  endif()
  set(_attn_oracle_missing "${_attn_oracle_missing}${text}" PARENT_SCOPE)
endfunction()

# The Python whose packages the PyPI fallbacks come from: scikit-build-core's
# (pip's build environment), else python3 on the PATH.
function(attn_oracle_fallback_python out)
  if(DEFINED Python_EXECUTABLE)
    set(${out} "${Python_EXECUTABLE}" PARENT_SCOPE)
  elseif(DEFINED Python3_EXECUTABLE)
    set(${out} "${Python3_EXECUTABLE}" PARENT_SCOPE)
  else()
    find_program(ATTN_ORACLE_FALLBACK_PYTHON NAMES python3 python)
    set(${out} "${ATTN_ORACLE_FALLBACK_PYTHON}" PARENT_SCOPE)
  endif()
endfunction()

# Runs a Python snippet that prints a directory (or nothing) into OUT.
function(attn_oracle_python_locate out code)
  attn_oracle_fallback_python(python)
  set(${out} "" PARENT_SCOPE)
  if(python)
    execute_process(COMMAND "${python}" -c "${code}" OUTPUT_VARIABLE dir
                    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
    if(rc EQUAL 0 AND IS_DIRECTORY "${dir}")
      set(${out} "${dir}" PARENT_SCOPE)
    endif()
  endif()
endfunction()

# ---------------------------------------------------------------- Eigen
function(attn_oracle_find_eigen)
  if(NOT _attn_oracle_deps_mode STREQUAL "FALLBACK")
    find_package(Eigen3 3.3 QUIET NO_MODULE)
    if(Eigen3_FOUND)
      message(STATUS "attn-oracle: Eigen ${Eigen3_VERSION} (${Eigen3_DIR})")
      return()
    endif()
  endif()
  set(tried "")
  if(NOT _attn_oracle_deps_mode STREQUAL "SYSTEM")
    # cmeel installs a CMake prefix, cmeel.prefix/, beside the Python packages.
    attn_oracle_python_locate(prefix [=[
import os, sys
print(next((os.path.join(p, "cmeel.prefix") for p in sys.path
            if os.path.isfile(os.path.join(p, "cmeel.prefix", "share", "eigen3", "cmake", "Eigen3Config.cmake"))), ""))
]=])
    if(prefix)
      set(CMAKE_DISABLE_FIND_PACKAGE_Eigen3 OFF)  # hides the system's, not this one
      find_package(Eigen3 3.3 QUIET CONFIG PATHS "${prefix}" NO_DEFAULT_PATH)
    endif()
    if(Eigen3_FOUND)
      message(STATUS "attn-oracle: Eigen ${Eigen3_VERSION} from PyPI's cmeel-eigen (${Eigen3_DIR})")
      return()
    endif()
    attn_oracle_fallback_python(python)
    set(tried "no cmeel.prefix/share/eigen3 in the sys.path of ${python}")
  endif()
  attn_oracle_dependency_missing("Eigen 3.3 or newer" "C++ linear algebra headers" libeigen3-dev eigen
    "pip install ${ATTN_ORACLE_PYPI_EIGEN} into the Python that configures, with ATTN_ORACLE_DEPENDENCIES=AUTO (pip install . does both)"
    "${tried}")
  set(_attn_oracle_missing "${_attn_oracle_missing}" PARENT_SCOPE)
endfunction()

# ---------------------------------------------------------------- nlohmann-json
function(attn_oracle_find_nlohmann_json)
  if(NOT _attn_oracle_deps_mode STREQUAL "FALLBACK")
    find_package(nlohmann_json 3.10 QUIET)
    if(nlohmann_json_FOUND)
      message(STATUS "attn-oracle: nlohmann-json ${nlohmann_json_VERSION} (${nlohmann_json_DIR})")
      return()
    endif()
  endif()
  set(tried "")
  if(NOT _attn_oracle_deps_mode STREQUAL "SYSTEM")
    # PyPI's nlohmann-json holds the headers under nlohmann_json/include/ and no
    # CMake package: the target is made here. find_spec does not import it.
    attn_oracle_python_locate(include [=[
import importlib.util, os
spec = importlib.util.find_spec("nlohmann_json")
print(os.path.join(list(spec.submodule_search_locations)[0], "include") if spec else "")
]=])
    if(include AND EXISTS "${include}/nlohmann/json.hpp")
      file(STRINGS "${include}/nlohmann/detail/abi_macros.hpp" lines
           REGEX "^ *#define NLOHMANN_JSON_VERSION_(MAJOR|MINOR|PATCH) +[0-9]+")
      set(version "")
      foreach(part MAJOR MINOR PATCH)
        string(REGEX MATCH "VERSION_${part} +([0-9]+)" _ "${lines}")
        list(APPEND version "${CMAKE_MATCH_1}")
      endforeach()
      list(JOIN version "." version)
      if(version VERSION_GREATER_EQUAL 3.10)
        add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
        set_target_properties(nlohmann_json::nlohmann_json PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${include}")
        message(STATUS "attn-oracle: nlohmann-json ${version} from PyPI's nlohmann-json (${include})")
        return()
      endif()
      set(tried "${include} holds nlohmann-json ${version}, older than 3.10")
    else()
      attn_oracle_fallback_python(python)
      set(tried "no package nlohmann_json in ${python}")
    endif()
  endif()
  attn_oracle_dependency_missing("nlohmann-json 3.10 or newer" "JSON headers" nlohmann-json3-dev nlohmann_json
    "pip install ${ATTN_ORACLE_PYPI_NLOHMANN_JSON} into the Python that configures, with ATTN_ORACLE_DEPENDENCIES=AUTO (pip install . does both)"
    "${tried}")
  set(_attn_oracle_missing "${_attn_oracle_missing}" PARENT_SCOPE)
endfunction()

# ---------------------------------------------------------------- pinned archives
# attn_oracle_pinned_archive(NAME PREFIX EXT): the archive ATTN_ORACLE_<PREFIX>_URL
# names (a URL, a path or file://), downloaded once into the build directory and
# checked against ATTN_ORACLE_<PREFIX>_SHA256 here, so that a failure says what
# to do. Sets ARCHIVE (its path) and SHA256 (lower case) in the caller, or TRIED
# when it fails; FetchContent checks it again as it unpacks it. With
# FETCHCONTENT_SOURCE_DIR_<NAME> (a checkout) nothing is downloaded.
function(attn_oracle_pinned_archive name prefix ext)
  set(url "${ATTN_ORACLE_${prefix}_URL}")
  string(TOLOWER "${ATTN_ORACLE_${prefix}_SHA256}" sha256)
  string(LENGTH "${sha256}" length)
  if(NOT sha256 MATCHES "^[0-9a-f]+$" OR NOT length EQUAL 64)
    message(FATAL_ERROR "ATTN_ORACLE_${prefix}_SHA256 is '${ATTN_ORACLE_${prefix}_SHA256}': 64 hexadecimal digits")
  endif()
  set(SHA256 "${sha256}" PARENT_SCOPE)
  string(TOUPPER "${name}" upper)
  if(FETCHCONTENT_SOURCE_DIR_${upper})
    return()
  endif()
  if(url MATCHES "^/")
    set(url "file://${url}")
  endif()
  string(TOLOWER "${name}" lower)
  string(SUBSTRING "${sha256}" 0 12 short)
  set(archive "${CMAKE_BINARY_DIR}/_deps/${lower}-${short}.${ext}")
  set(have "")
  if(EXISTS "${archive}")
    file(SHA256 "${archive}" have)
  endif()
  if(NOT have STREQUAL sha256)
    message(STATUS "attn-oracle: downloading ${name} from ${url}")
    file(DOWNLOAD "${url}" "${archive}.part" STATUS status TLS_VERIFY ON INACTIVITY_TIMEOUT 60)
    list(GET status 0 code)
    if(NOT code EQUAL 0)
      list(GET status 1 reason)
      file(REMOVE "${archive}.part")
      set(TRIED "downloading ${url} failed: ${reason}" PARENT_SCOPE)
      return()
    endif()
    file(SHA256 "${archive}.part" have)
    if(NOT have STREQUAL sha256)
      file(REMOVE "${archive}.part")
      set(TRIED "${url} has SHA256 ${have}, not the pinned ${sha256} (ATTN_ORACLE_${prefix}_SHA256)" PARENT_SCOPE)
      return()
    endif()
    file(RENAME "${archive}.part" "${archive}")
  endif()
  set(ARCHIVE "${archive}" PARENT_SCOPE)
endfunction()

# ---------------------------------------------------------------- RapidCheck
# The pinned archive (attn_oracle_pinned_archive), built with the project.
# Sets TRIED in the caller when it fails.
function(attn_oracle_fetch_rapidcheck)
  include(FetchContent)
  set(origin "${ATTN_ORACLE_RAPIDCHECK_URL}")
  set(ARCHIVE "")
  set(TRIED "")
  attn_oracle_pinned_archive(RapidCheck RAPIDCHECK zip)
  if(FETCHCONTENT_SOURCE_DIR_RAPIDCHECK)
    set(origin "${FETCHCONTENT_SOURCE_DIR_RAPIDCHECK}")
    set(url "${FETCHCONTENT_SOURCE_DIR_RAPIDCHECK}")
  elseif(NOT ARCHIVE)
    set(tried "${TRIED}" PARENT_SCOPE)
    return()
  else()
    set(url "${ARCHIVE}")
  endif()
  set(sha256 "${SHA256}")
  FetchContent_Declare(rapidcheck URL "${url}" URL_HASH SHA256=${sha256} DOWNLOAD_EXTRACT_TIMESTAMP TRUE)
  FetchContent_GetProperties(rapidcheck)
  if(NOT rapidcheck_POPULATED)
    # Populate + add_subdirectory, not MakeAvailable: EXCLUDE_FROM_ALL needs CMake
    # 3.28 in FetchContent_Declare, and the project takes 3.25.
    cmake_policy(PUSH)
    if(POLICY CMP0169)
      cmake_policy(SET CMP0169 OLD)
    endif()
    FetchContent_Populate(rapidcheck)
    cmake_policy(POP)
    set(RC_ENABLE_TESTS OFF CACHE BOOL "")
    set(RC_ENABLE_EXAMPLES OFF CACHE BOOL "")
    set(RC_ENABLE_GTEST ${ATTN_ORACLE_BUILD_TESTS} CACHE BOOL "")  # rapidcheck_gtest, headers only
    add_subdirectory(${rapidcheck_SOURCE_DIR} ${rapidcheck_BINARY_DIR} EXCLUDE_FROM_ALL)
  endif()
  set(tried "" PARENT_SCOPE)
  message(STATUS "attn-oracle: RapidCheck from ${origin} (SHA256 ${sha256}), built here")
endfunction()

function(attn_oracle_find_rapidcheck)
  if(NOT _attn_oracle_deps_mode STREQUAL "FALLBACK")
    find_package(rapidcheck QUIET)
    if(rapidcheck_FOUND)
      message(STATUS "attn-oracle: RapidCheck (${rapidcheck_DIR})")
      return()
    endif()
  endif()
  set(tried "")
  if(NOT _attn_oracle_deps_mode STREQUAL "SYSTEM")
    set(tried "?")
    attn_oracle_fetch_rapidcheck()
    if(TARGET rapidcheck AND NOT tried)
      return()
    endif()
  endif()
  attn_oracle_dependency_missing("RapidCheck" "C++ property-based testing" librapidcheck-dev rapidcheck
    "ATTN_ORACLE_DEPENDENCIES=AUTO (pip install . does this) downloads its pinned source, checks its SHA256 and builds it;\n                   offline: -DATTN_ORACLE_RAPIDCHECK_URL=<a copy of ${ATTN_ORACLE_RAPIDCHECK_URL}>"
    "${tried}")
  set(_attn_oracle_missing "${_attn_oracle_missing}" PARENT_SCOPE)
endfunction()

# ---------------------------------------------------------------- CLI11
# Headers only: the pinned release's include/ as the target CLI11::CLI11.
function(attn_oracle_find_cli11)
  if(NOT _attn_oracle_deps_mode STREQUAL "FALLBACK")
    find_package(CLI11 2.1 CONFIG QUIET)
    if(CLI11_FOUND)
      message(STATUS "attn-oracle: CLI11 ${CLI11_VERSION} (${CLI11_DIR})")
      return()
    endif()
  endif()
  set(tried "")
  if(NOT _attn_oracle_deps_mode STREQUAL "SYSTEM")
    include(FetchContent)
    set(ARCHIVE "")
    set(TRIED "")
    attn_oracle_pinned_archive(CLI11 CLI11 tar.gz)
    set(url "${ARCHIVE}")
    set(origin "${ATTN_ORACLE_CLI11_URL}")
    if(FETCHCONTENT_SOURCE_DIR_CLI11)
      set(url "${FETCHCONTENT_SOURCE_DIR_CLI11}")
      set(origin "${url}")
    endif()
    set(tried "${TRIED}")
    if(url)
      FetchContent_Declare(cli11 URL "${url}" URL_HASH SHA256=${SHA256} DOWNLOAD_EXTRACT_TIMESTAMP TRUE)
      FetchContent_GetProperties(cli11)
      if(NOT cli11_POPULATED)
        cmake_policy(PUSH)
        if(POLICY CMP0169)
          cmake_policy(SET CMP0169 OLD)
        endif()
        FetchContent_Populate(cli11)  # no add_subdirectory: the headers are all it takes
        cmake_policy(POP)
      endif()
      if(EXISTS "${cli11_SOURCE_DIR}/include/CLI/CLI.hpp")
        add_library(CLI11::CLI11 INTERFACE IMPORTED GLOBAL)
        set_target_properties(CLI11::CLI11 PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${cli11_SOURCE_DIR}/include")
        message(STATUS "attn-oracle: CLI11 from ${origin} (SHA256 ${SHA256}), headers only")
        return()
      endif()
      set(tried "${origin} holds no include/CLI/CLI.hpp")
    endif()
  endif()
  attn_oracle_dependency_missing("CLI11 2.1 or newer" "C++ command-line parsing headers" libcli11-dev cli11
    "ATTN_ORACLE_DEPENDENCIES=AUTO (pip install . does this) downloads its pinned release and checks its SHA256;\n                   offline: -DATTN_ORACLE_CLI11_URL=<a copy of ${ATTN_ORACLE_CLI11_URL}>"
    "${tried}")
  set(_attn_oracle_missing "${_attn_oracle_missing}" PARENT_SCOPE)
endfunction()

# ---------------------------------------------------------------- GoogleTest
function(attn_oracle_find_gtest)
  find_package(GTest QUIET)
  if(NOT GTest_FOUND)
    attn_oracle_dependency_missing("GoogleTest" "for the tests and the conformance suite; a pip build needs neither"
      libgtest-dev gtest "none; a build without them: -DATTN_ORACLE_BUILD_TESTS=OFF -DATTN_ORACLE_INSTALL=OFF -DATTN_ORACLE_CONFORMANCE=OFF" "")
    set(_attn_oracle_missing "${_attn_oracle_missing}" PARENT_SCOPE)
  endif()
endfunction()

attn_oracle_find_eigen()
attn_oracle_find_nlohmann_json()
attn_oracle_find_rapidcheck()
attn_oracle_find_cli11()
if(ATTN_ORACLE_CONFORMANCE)
  attn_oracle_find_gtest()
endif()
if(_attn_oracle_missing)
  if(_attn_oracle_deps_mode STREQUAL "SYSTEM")
    set(how "  ATTN_ORACLE_DEPENDENCIES=SYSTEM: only find_package was asked. -DATTN_ORACLE_DEPENDENCIES=AUTO\n"
            "  also tries the fallbacks (under pip, the default: -C cmake.define.ATTN_ORACLE_DEPENDENCIES=AUTO).\n")
  else()
    set(how "  ATTN_ORACLE_DEPENDENCIES=${_attn_oracle_deps_mode}: the fallbacks were tried too (see 'tried').\n")
  endif()
  message(FATAL_ERROR "attn-oracle: missing C++ dependencies. Install them, or let the build fetch them:\n"
    "${_attn_oracle_missing}" ${how} "  See docs/python.md#install.")
endif()
