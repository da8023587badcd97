# CuTe (CUTLASS's headers) for the tensor-core attention kernels of gpu/: the
# headers of PyPI's nvidia-cutlass wheel, pinned, fetched by pip on first configure
# and unpacked under build/_deps (shared by every build directory of this tree), or
# ATTN_ORACLE_CUTLASS_INCLUDE_DIR to use headers already on the machine. Without
# them the CuTe kernels are left out of the build (ATTN_ORACLE_HAS_CUTE OFF) and
# the `cuda` backend declines attention, with a message saying why.
set(ATTN_ORACLE_CUTLASS_VERSION 4.2.0.0)
set(ATTN_ORACLE_CUTLASS_INCLUDE_DIR "" CACHE PATH "CUTLASS include directory (holding cute/); empty: fetch the pinned wheel")
set(ATTN_ORACLE_HAS_CUTE OFF)
if(ATTN_ORACLE_HAS_CUDA)
  set(_cutlass_dir "${PROJECT_SOURCE_DIR}/build/_deps/cutlass-${ATTN_ORACLE_CUTLASS_VERSION}")
  if(ATTN_ORACLE_CUTLASS_INCLUDE_DIR)
    set(_cutlass_include "${ATTN_ORACLE_CUTLASS_INCLUDE_DIR}")
  else()
    set(_cutlass_include "${_cutlass_dir}/include")
    if(NOT EXISTS "${_cutlass_include}/cute/tensor.hpp")
      find_package(Python3 COMPONENTS Interpreter QUIET)
      set(_wheel_dir "${_cutlass_dir}/wheel")
      file(REMOVE_RECURSE "${_wheel_dir}")
      if(Python3_Interpreter_FOUND)
        message(STATUS "attn-oracle: fetching nvidia-cutlass ${ATTN_ORACLE_CUTLASS_VERSION} (CuTe headers) with pip")
        execute_process(COMMAND ${Python3_EXECUTABLE} -m pip download -q --disable-pip-version-check --no-deps
                                --only-binary=:all: -d "${_wheel_dir}" "nvidia-cutlass==${ATTN_ORACLE_CUTLASS_VERSION}"
                        RESULT_VARIABLE _pip OUTPUT_QUIET ERROR_QUIET)
        file(GLOB _wheel "${_wheel_dir}/nvidia_cutlass-*.whl")
        if(_pip EQUAL 0 AND _wheel)
          # A wheel is a zip archive; only the C++ headers are kept.
          execute_process(COMMAND ${CMAKE_COMMAND} -E tar xf "${_wheel}" -- cutlass_library/source/include
                          WORKING_DIRECTORY "${_wheel_dir}" RESULT_VARIABLE _unzip OUTPUT_QUIET ERROR_QUIET)
          if(_unzip EQUAL 0 AND EXISTS "${_wheel_dir}/cutlass_library/source/include/cute/tensor.hpp")
            file(REMOVE_RECURSE "${_cutlass_include}")
            file(RENAME "${_wheel_dir}/cutlass_library/source/include" "${_cutlass_include}")
          endif()
        endif()
      endif()
      file(REMOVE_RECURSE "${_wheel_dir}")
    endif()
  endif()
  if(EXISTS "${_cutlass_include}/cute/tensor.hpp")
    set(ATTN_ORACLE_HAS_CUTE ON)
    set(ATTN_ORACLE_CUTE_INCLUDE_DIR "${_cutlass_include}")
  else()
    message(STATUS "attn-oracle: no CuTe headers (pip could not fetch nvidia-cutlass ${ATTN_ORACLE_CUTLASS_VERSION}); "
                   "the CuTe attention kernels are left out (set ATTN_ORACLE_CUTLASS_INCLUDE_DIR)")
  endif()
endif()
message(STATUS "attn-oracle: CuTe ${ATTN_ORACLE_HAS_CUTE} ${ATTN_ORACLE_CUTE_INCLUDE_DIR}")
