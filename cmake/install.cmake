# `cmake --install BUILD [--prefix P]` lays out:
#   P/bin/trident                        the program (finds P/lib/trident by itself)
#   P/lib/libtrident.so, libtrident_kernels.so, libtrident_base.so
#   P/lib/libtrident_models.so           the built-in models (trident/models.h)
#   P/lib/libtrident_mpi.so              data-parallel runs over MPI, where MPI was found
#   P/lib/trident/libtrident_backend_{torch,tf,jax}.so
#   P/include/trident/*.h                the base's, core's, the kernels' and the models'
#                                        public headers
#   P/lib/cmake/trident/                 find_package(trident CONFIG), trident_add_backend
#   P/lib/pkgconfig/trident.pc, trident-models.pc
#   P/share/trident/conf/*.ini
# RPATHs are relative ($ORIGIN), so the tree works wherever it is put. "lib" is fixed,
# not GNUInstallDirs' libdir: the loader's install directory is PREFIX/lib/trident.
include(CMakePackageConfigHelpers)

set(_tr_backends "")
foreach(be torch tf jax)
  if(TARGET trident_backend_${be})
    list(APPEND _tr_backends trident_backend_${be})
  endif()
endforeach()

# Directories of linked libraries outside the system's (cuda, a private oneDNN) are kept.
set_target_properties(trident_base PROPERTIES INSTALL_RPATH "$ORIGIN" INSTALL_RPATH_USE_LINK_PATH ON)
set_target_properties(trident_kernels PROPERTIES INSTALL_RPATH "$ORIGIN" INSTALL_RPATH_USE_LINK_PATH ON)
set_target_properties(trident PROPERTIES INSTALL_RPATH "$ORIGIN" INSTALL_RPATH_USE_LINK_PATH ON)
set_target_properties(trident_models PROPERTIES INSTALL_RPATH "$ORIGIN" INSTALL_RPATH_USE_LINK_PATH ON)
set_target_properties(trident_cli PROPERTIES INSTALL_RPATH "$ORIGIN/../lib" INSTALL_RPATH_USE_LINK_PATH ON)
if(_tr_backends)
  set_target_properties(${_tr_backends} PROPERTIES INSTALL_RPATH "$ORIGIN/.." INSTALL_RPATH_USE_LINK_PATH ON)
endif()

install(TARGETS trident_models trident trident_kernels trident_base LIBRARY DESTINATION lib)
if(TARGET trident_mpi) # the data-parallel communicator, where MPI was found (the program links it)
  set_target_properties(trident_mpi PROPERTIES INSTALL_RPATH "$ORIGIN" INSTALL_RPATH_USE_LINK_PATH ON)
  install(TARGETS trident_mpi LIBRARY DESTINATION lib)
  install(FILES ${PROJECT_SOURCE_DIR}/core/mpi/include/trident/comm_mpi.h DESTINATION include/trident)
endif()
install(TARGETS trident_cli RUNTIME DESTINATION bin)
if(_tr_backends)
  install(TARGETS ${_tr_backends} LIBRARY DESTINATION lib/trident)
endif()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/core/base/include/trident ${PROJECT_SOURCE_DIR}/core/include/trident
                  ${PROJECT_SOURCE_DIR}/plugins/kernels/include/trident ${PROJECT_SOURCE_DIR}/models/include/trident
        DESTINATION include FILES_MATCHING PATTERN "*.h")
install(DIRECTORY ${PROJECT_SOURCE_DIR}/conf/ DESTINATION share/trident/conf FILES_MATCHING PATTERN "*.ini")

# The package: file names come from the targets (generator expressions), the rest from
# the config file's own place at the time it is read.
set(TRIDENT_BASE_FILE "$<TARGET_SONAME_FILE_NAME:trident_base>")
set(TRIDENT_KERNELS_FILE "$<TARGET_SONAME_FILE_NAME:trident_kernels>")
set(TRIDENT_CORE_FILE "$<TARGET_SONAME_FILE_NAME:trident>")
set(TRIDENT_MODELS_FILE "$<TARGET_SONAME_FILE_NAME:trident_models>")
configure_file(${PROJECT_SOURCE_DIR}/cmake/trident-config.cmake.in
               ${CMAKE_BINARY_DIR}/cmake/trident-config.cmake.gen @ONLY)
file(GENERATE OUTPUT ${CMAKE_BINARY_DIR}/cmake/trident-config.cmake
     INPUT ${CMAKE_BINARY_DIR}/cmake/trident-config.cmake.gen)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/cmake/trident-config-version.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
configure_file(${PROJECT_SOURCE_DIR}/cmake/trident.pc.in ${CMAKE_BINARY_DIR}/cmake/trident.pc @ONLY)
configure_file(${PROJECT_SOURCE_DIR}/cmake/trident-models.pc.in ${CMAKE_BINARY_DIR}/cmake/trident-models.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/cmake/trident-config.cmake ${CMAKE_BINARY_DIR}/cmake/trident-config-version.cmake
        DESTINATION lib/cmake/trident)
install(FILES ${PROJECT_SOURCE_DIR}/plugins/backend.map DESTINATION lib/cmake/trident RENAME trident-backend.map)
install(FILES ${CMAKE_BINARY_DIR}/cmake/trident.pc ${CMAKE_BINARY_DIR}/cmake/trident-models.pc DESTINATION lib/pkgconfig)
