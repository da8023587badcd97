# The `cudnn` backend's dependencies: cuDNN itself (cudnn.h and libcudnn, from the
# CUDA install, CUDNN_ROOT, or a pip `nvidia-cudnn` package that CUDNN_ROOT points at)
# and the cuDNN frontend's C++ graph API, which is header-only and comes from the
# `nvidia-cudnn-frontend` wheel that scripts/setup unpacks into .deps/ (pinned there).
#
# ATTN_ORACLE_CUDNN: AUTO (default) builds the backend when CUDA is on and both are
# found, ON insists, OFF never. Sets ATTN_ORACLE_HAS_CUDNN and, when ON,
# ATTN_ORACLE_CUDNN_INCLUDE_DIRS (frontend and cuDNN headers) and
# ATTN_ORACLE_CUDNN_LIBRARY (a full path, so that nothing extra needs exporting).
set(ATTN_ORACLE_CUDNN "AUTO" CACHE STRING "Build the cudnn backend: ON, OFF or AUTO (when CUDA, cuDNN 9 and the frontend headers are found)")
set(ATTN_ORACLE_CUDNN_FRONTEND_INCLUDE "${PROJECT_SOURCE_DIR}/.deps/cudnn-frontend/include" CACHE PATH
    "Directory holding cudnn_frontend.h (scripts/setup installs it there)")
set(ATTN_ORACLE_HAS_CUDNN OFF)

function(attn_oracle_cudnn_missing what)
  if(ATTN_ORACLE_CUDNN STREQUAL "ON")
    message(FATAL_ERROR "ATTN_ORACLE_CUDNN=ON but ${what}")
  endif()
  message(STATUS "attn-oracle: cudnn backend OFF (${what})")
endfunction()

if(ATTN_ORACLE_CUDNN STREQUAL "OFF")
  message(STATUS "attn-oracle: cudnn backend OFF (ATTN_ORACLE_CUDNN=OFF)")
elseif(NOT ATTN_ORACLE_HAS_CUDA)
  attn_oracle_cudnn_missing("this build has no CUDA")
else()
  find_package(CUDAToolkit REQUIRED)
  set(_cudnn_hints $ENV{CUDNN_ROOT} ${CUDNN_ROOT} ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_TARGET_DIR})
  find_path(ATTN_ORACLE_CUDNN_INCLUDE_DIR cudnn_version.h
            HINTS ${_cudnn_hints} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
  # A pip `nvidia-cudnn-cu*` package ships only libcudnn.so.9, hence the full name.
  find_library(ATTN_ORACLE_CUDNN_LIBRARY NAMES cudnn libcudnn.so.9
               HINTS ${_cudnn_hints} ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib64 lib)
  find_path(ATTN_ORACLE_CUDNN_FRONTEND_DIR cudnn_frontend.h
            HINTS ${ATTN_ORACLE_CUDNN_FRONTEND_INCLUDE} $ENV{CUDNN_FRONTEND_INCLUDE} NO_DEFAULT_PATH)
  set(_cudnn_version "")
  if(ATTN_ORACLE_CUDNN_INCLUDE_DIR)
    file(STRINGS "${ATTN_ORACLE_CUDNN_INCLUDE_DIR}/cudnn_version.h" _lines REGEX "^#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) ")
    foreach(_part MAJOR MINOR PATCHLEVEL)
      string(REGEX MATCH "CUDNN_${_part} ([0-9]+)" _m "${_lines}")
      set(_cudnn_${_part} "${CMAKE_MATCH_1}")
    endforeach()
    set(_cudnn_version "${_cudnn_MAJOR}.${_cudnn_MINOR}.${_cudnn_PATCHLEVEL}")
  endif()
  if(NOT ATTN_ORACLE_CUDNN_INCLUDE_DIR OR NOT ATTN_ORACLE_CUDNN_LIBRARY)
    attn_oracle_cudnn_missing("cuDNN was not found (set CUDNN_ROOT to a directory with include/cudnn.h and lib/libcudnn*)")
  elseif(_cudnn_MAJOR LESS 9)
    attn_oracle_cudnn_missing("cuDNN ${_cudnn_version} is older than 9 (ragged SDPA needs 9)")
  elseif(NOT ATTN_ORACLE_CUDNN_FRONTEND_DIR)
    attn_oracle_cudnn_missing("the cuDNN frontend headers were not found in ${ATTN_ORACLE_CUDNN_FRONTEND_INCLUDE} (run scripts/setup)")
  else()
    set(ATTN_ORACLE_HAS_CUDNN ON)
    set(ATTN_ORACLE_CUDNN_INCLUDE_DIRS ${ATTN_ORACLE_CUDNN_FRONTEND_DIR} ${ATTN_ORACLE_CUDNN_INCLUDE_DIR})
    file(STRINGS "${ATTN_ORACLE_CUDNN_FRONTEND_DIR}/cudnn_frontend_version.h" _fe REGEX "^#define CUDNN_FRONTEND_(MAJOR|MINOR|PATCH)_VERSION ")
    string(REGEX MATCHALL "[0-9]+" _fe_parts "${_fe}")
    string(REPLACE ";" "." _fe_version "${_fe_parts}")
    message(STATUS "attn-oracle: cudnn backend ON (cuDNN ${_cudnn_version} at ${ATTN_ORACLE_CUDNN_LIBRARY}, frontend ${_fe_version})")
  endif()
endif()
