# Install: `make install` (PREFIX, default /usr/local) or
# `cmake --build <build> --target ckpt_products && cmake --install <build> --prefix <dir>`.
# Layout under the prefix:
#   bin/ckpt                              the command (RPATH $ORIGIN/../lib)
#   lib/libckpt.so.0.1.0 (+ .so.0.1, .so)      layers 0-4: base, geometry, reshard, the zstd
#   lib/libckpt.a                         filter, format, protocol
#   lib/libckpt_mpi.so.0.1, libckpt_mpi.a the MPI Comm (links libckpt)
#   include/ckpt/{ckpt,reshard}/...       public headers only (include root
#                                         include/ckpt: #include "ckpt/protocol/checkpoint.h")
#   lib/cmake/ckpt/ckptConfig*.cmake      find_package(ckpt): ckpt::ckpt, ckpt::mpi
#                                         (shared), ckpt::ckpt_static, ckpt::mpi_static
#   lib/pkgconfig/ckpt.pc, ckpt-mpi.pc
#   lib/ckpt/hdf5-plugins/libckpt_h5zstd.so  HDF5 filter 32015 (HDF5_PLUGIN_PATH)
#   lib/python3.N/dist-packages/ckpt/     the Python package (python/, component
#                                         "python"), hdf5-plugins/ inside it
# The libraries reuse the objects of the per-folder targets: nothing is
# compiled twice. docs/DESIGN.md "Layers" says which layers they hold.
include(CMakePackageConfigHelpers)

set(CKPT_PUBLIC_HEADERS
  ckpt/base/status.h ckpt/base/phase.h ckpt/base/dtype.h ckpt/base/sharded_tensor.h ckpt/base/env.h ckpt/base/comm.h
  ckpt/base/chunk_hash.h ckpt/storage/storage.h ckpt/storage/layout.h
  ckpt/format/codec.h ckpt/format/shard_file.h ckpt/format/manifest.h
  reshard/geometry/intersect.h reshard/geometry/read_plan.h
  ckpt/protocol/checkpoint.h ckpt/protocol/async_save.h ckpt/protocol/snapshot_memory.h
  ckpt/protocol/verify.h ckpt/protocol/fingerprint.h ckpt/protocol/offline_reshard.h)
set(CKPT_MPI_PUBLIC_HEADERS ckpt/mpi/comm_mpi.h)
set(CKPT_INSTALL_INCLUDE_ROOT ${CMAKE_INSTALL_INCLUDEDIR}/ckpt)
set(CKPT_INSTALL_PLUGIN_DIR ${CMAKE_INSTALL_LIBDIR}/ckpt/hdf5-plugins)
set(CKPT_INSTALL_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/ckpt)
set(CKPT_SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
if(PROJECT_VERSION_PATCH STREQUAL "")
  set(CKPT_LIB_VERSION ${CKPT_SOVERSION}.0)
else()
  set(CKPT_LIB_VERSION ${CKPT_SOVERSION}.${PROJECT_VERSION_PATCH})
endif()

# Third-party libraries as exported interface targets holding the paths found
# here (ckpt::dep_hdf5, ckpt::dep_zstd, ckpt::dep_mpi): find_package(ckpt)
# then needs no FindHDF5/FindMPI/pkg-config, which want the C language enabled
# in the consumer's project (a C++-only project could not use them).
add_library(ckpt_dep_hdf5 INTERFACE)
target_link_libraries(ckpt_dep_hdf5 INTERFACE ${HDF5_C_LIBRARIES})
add_library(ckpt_dep_zstd INTERFACE)
target_link_libraries(ckpt_dep_zstd INTERFACE ${ZSTD_LINK_LIBRARIES})
add_library(ckpt_dep_xxhash INTERFACE)
target_link_libraries(ckpt_dep_xxhash INTERFACE ${XXHASH_LINK_LIBRARIES})
add_library(ckpt_dep_mpi INTERFACE)
foreach(prop INCLUDE_DIRECTORIES LINK_LIBRARIES COMPILE_OPTIONS COMPILE_DEFINITIONS LINK_OPTIONS)
  get_target_property(v MPI::MPI_C INTERFACE_${prop})
  if(v)
    set_property(TARGET ckpt_dep_mpi PROPERTY INTERFACE_${prop} ${v})
  endif()
endforeach()
foreach(dep hdf5 zstd xxhash mpi)
  set_target_properties(ckpt_dep_${dep} PROPERTIES EXPORT_NAME dep_${dep})
endforeach()

set(CKPT_CORE_OBJECTS $<TARGET_OBJECTS:ckpt_base> $<TARGET_OBJECTS:ckpt_storage> $<TARGET_OBJECTS:ckpt_geometry>
    $<TARGET_OBJECTS:ckpt_reshard>
    $<TARGET_OBJECTS:ckpt_zstd_filter> $<TARGET_OBJECTS:ckpt_format> $<TARGET_OBJECTS:ckpt_protocol>)

# Usage requirements shared by the shared and the static library. The static
# one passes its private dependencies on (as link-only items).
function(ckpt_package_library target kind output objects)
  add_library(${target} ${kind} ${objects})
  set_target_properties(${target} PROPERTIES OUTPUT_NAME ${output}
                        ARCHIVE_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/lib
                        LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/lib)
  if(kind STREQUAL "SHARED")
    set_target_properties(${target} PROPERTIES VERSION ${CKPT_LIB_VERSION} SOVERSION ${CKPT_SOVERSION})
    if(NOT CKPT_SANITIZE)  # every symbol resolved: the library is complete
      target_link_options(${target} PRIVATE LINKER:--no-undefined)
    endif()
  endif()
  target_include_directories(${target} INTERFACE $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
                                                 $<INSTALL_INTERFACE:${CKPT_INSTALL_INCLUDE_ROOT}>)
endfunction()

foreach(kind SHARED STATIC)
  string(TOLOWER ${kind} k)
  ckpt_package_library(ckpt_${k} ${kind} ckpt "${CKPT_CORE_OBJECTS}")
  target_link_libraries(ckpt_${k} PUBLIC Threads::Threads nlohmann_json::nlohmann_json
                        PRIVATE ckpt_dep_hdf5 ckpt_dep_zstd ckpt_dep_xxhash OpenSSL::Crypto)
  ckpt_package_library(ckpt_mpi_${k} ${kind} ckpt_mpi "$<TARGET_OBJECTS:ckpt_mpi>")
  target_link_libraries(ckpt_mpi_${k} PUBLIC ckpt_${k} ckpt_dep_mpi)
  target_compile_definitions(ckpt_mpi_${k} PUBLIC OMPI_SKIP_MPICXX=1 MPICH_SKIP_MPICXX=1)
endforeach()
set_target_properties(ckpt_shared PROPERTIES EXPORT_NAME ckpt)
set_target_properties(ckpt_static PROPERTIES EXPORT_NAME ckpt_static)
set_target_properties(ckpt_mpi_shared PROPERTIES EXPORT_NAME mpi)
set_target_properties(ckpt_mpi_static PROPERTIES EXPORT_NAME mpi_static)

# Component "cli": the command alone (python/build_backend puts it in a wheel
# with component "python"); the rest is component Unspecified.
install(TARGETS ckpt RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT cli)
install(TARGETS ckpt_shared ckpt_static ckpt_mpi_shared ckpt_mpi_static ckpt_dep_hdf5 ckpt_dep_zstd ckpt_dep_xxhash
                ckpt_dep_mpi EXPORT ckptTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS ckpt_h5zstd LIBRARY DESTINATION ${CKPT_INSTALL_PLUGIN_DIR})
foreach(h ${CKPT_PUBLIC_HEADERS} ${CKPT_MPI_PUBLIC_HEADERS})
  get_filename_component(d ${h} DIRECTORY)
  install(FILES ${h} DESTINATION ${CKPT_INSTALL_INCLUDE_ROOT}/${d})
endforeach()
install(EXPORT ckptTargets NAMESPACE ckpt:: DESTINATION ${CKPT_INSTALL_CMAKE_DIR})

configure_package_config_file(cmake/ckptConfig.cmake.in ${PROJECT_BINARY_DIR}/package/ckptConfig.cmake
                              INSTALL_DESTINATION ${CKPT_INSTALL_CMAKE_DIR}
                              PATH_VARS CKPT_INSTALL_PLUGIN_DIR CKPT_INSTALL_INCLUDE_ROOT)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/package/ckptConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/package/ckptConfig.cmake
              ${PROJECT_BINARY_DIR}/package/ckptConfigVersion.cmake
        DESTINATION ${CKPT_INSTALL_CMAKE_DIR})
foreach(pc ckpt ckpt-mpi)
  configure_file(cmake/${pc}.pc.in ${PROJECT_BINARY_DIR}/package/${pc}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/package/${pc}.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endforeach()

# The list of public headers, for the install test (each must compile alone
# against the installed include root).
string(REPLACE ";" "\n" _ckpt_headers "${CKPT_PUBLIC_HEADERS};${CKPT_MPI_PUBLIC_HEADERS}")
file(WRITE ${PROJECT_BINARY_DIR}/package/public_headers.txt "${_ckpt_headers}\n")

# Everything the install rules above (and python/) install, and nothing else:
# `make install` builds this target, not the tests and benches (ALL).
add_custom_target(ckpt_products)
add_dependencies(ckpt_products ckpt ckpt_shared ckpt_static ckpt_mpi_shared ckpt_mpi_static ckpt_h5zstd)
if(TARGET ckpt_python)
  add_dependencies(ckpt_products ckpt_python)
endif()
