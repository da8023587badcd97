# CUDA is optional: enabled when nvcc is found (ATTN_ORACLE_CUDA=AUTO) or forced
# (ON). Nothing here needs a GPU to *build*; GPU-only tests skip without one.
include(CheckLanguage)
set(ATTN_ORACLE_HAS_CUDA OFF)
if(NOT ATTN_ORACLE_CUDA STREQUAL "OFF")
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)  # H100 / H200; override with -DCMAKE_CUDA_ARCHITECTURES=...
    endif()
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)  # one cudart in every binary
    enable_language(CUDA)
    set(ATTN_ORACLE_HAS_CUDA ON)
  elseif(ATTN_ORACLE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "ATTN_ORACLE_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
message(STATUS "attn-oracle: CUDA ${ATTN_ORACLE_HAS_CUDA} (architectures: ${CMAKE_CUDA_ARCHITECTURES})")
