# `cmake --install` of the vendoring package AttnOracle: the data model, the convention adapters, the reference, the seam, the
# case files, the properties, their runner, the harness (CLI verbs, check, reports) and the conformance suite (an object library: its objects are
# installed and land in every executable that links it, so that its tests
# register), their headers, and AttnOracleConfig.cmake with its version file.
# The gpu/ algorithms and the built-in backends stay out: a consumer brings its own.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(ATTN_ORACLE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/AttnOracle)
set_target_properties(attn_oracle_model PROPERTIES EXPORT_NAME model)
set_target_properties(attn_oracle_adapters PROPERTIES EXPORT_NAME adapters)
set_target_properties(attn_oracle_reference PROPERTIES EXPORT_NAME reference)
set_target_properties(attn_oracle_reference_scalar PROPERTIES EXPORT_NAME reference_scalar)
set_target_properties(attn_oracle_seam PROPERTIES EXPORT_NAME seam)
set_target_properties(attn_oracle_cases PROPERTIES EXPORT_NAME cases)
set_target_properties(attn_oracle_properties PROPERTIES EXPORT_NAME properties)
set_target_properties(attn_oracle_runner PROPERTIES EXPORT_NAME runner)
set_target_properties(attn_oracle_harness PROPERTIES EXPORT_NAME harness)
set_target_properties(attn_oracle_conformance PROPERTIES EXPORT_NAME conformance)
set_target_properties(attn_oracle_conformance_main PROPERTIES EXPORT_NAME conformance_main)

install(TARGETS attn_oracle_model attn_oracle_adapters attn_oracle_reference attn_oracle_reference_scalar attn_oracle_seam attn_oracle_cases attn_oracle_properties attn_oracle_runner attn_oracle_harness
        attn_oracle_conformance attn_oracle_conformance_main
  EXPORT AttnOracleTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  OBJECTS DESTINATION ${CMAKE_INSTALL_LIBDIR}/attn_oracle/objects
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/model/include/ ${PROJECT_SOURCE_DIR}/adapters/include/
        ${PROJECT_SOURCE_DIR}/reference/include/
        ${PROJECT_SOURCE_DIR}/seam/include/ ${PROJECT_SOURCE_DIR}/cases/include/
        ${PROJECT_SOURCE_DIR}/properties/include/ ${PROJECT_SOURCE_DIR}/runner/include/
        ${PROJECT_SOURCE_DIR}/harness/include/
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT AttnOracleTargets NAMESPACE attn_oracle:: DESTINATION ${ATTN_ORACLE_CMAKE_DIR})

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/AttnOracleConfig.cmake.in
  ${PROJECT_BINARY_DIR}/AttnOracleConfig.cmake INSTALL_DESTINATION ${ATTN_ORACLE_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/AttnOracleConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/AttnOracleConfig.cmake ${PROJECT_BINARY_DIR}/AttnOracleConfigVersion.cmake
        ${PROJECT_SOURCE_DIR}/cmake/AttnOracleConformance.cmake
        DESTINATION ${ATTN_ORACLE_CMAKE_DIR})

# The attn-oracle CLI with this build's own backends, for replaying, checking
# and promoting (`attn-oracle promote`) from a shell (linked statically; CUDA's
# runtime found through its RPATH).
if(TARGET attn_oracle_cli)
  install(TARGETS attn_oracle_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
