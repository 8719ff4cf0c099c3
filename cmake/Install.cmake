# `cmake --install build --prefix P`: the libraries, their headers, the attend program, a
# CMake package (find_package(attend CONFIG): attend::attend, or one room such as
# attend::nn) and a pkg-config file (attend.pc).
#
# Headers go to P/include/attend/<room>/ and the umbrella to P/include/attend/attend.h;
# both P/include (for <attend/...>) and P/include/attend (for the headers' own
# "tensor/..." includes) are on the targets' include path. The internal headers listed in
# cmake/internal_headers.txt (kernels, the regex engine, HDF5's wrapper, ...) are not
# installed; the install test checks that and that every installed header compiles alone.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(ATTEND_ROOMS tensor autograd nn data io convert infer train viz)
file(STRINGS ${PROJECT_SOURCE_DIR}/cmake/internal_headers.txt ATTEND_INTERNAL_HEADERS REGEX "^[^#]")
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/cmake/internal_headers.txt)
add_library(attend_all INTERFACE)
foreach(room IN LISTS ATTEND_ROOMS)
  # Hidden unless a header says otherwise: the shared libraries export the API (the
  # declarations inside the headers' `#pragma GCC visibility push(default)`), not the
  # helpers, template instances and the standard library's code compiled into them.
  set_target_properties(attend_${room} PROPERTIES EXPORT_NAME ${room} CXX_VISIBILITY_PRESET hidden)
  target_link_libraries(attend_all INTERFACE attend_${room})
  file(GLOB headers RELATIVE ${PROJECT_SOURCE_DIR} CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${room}/*.h)
  list(REMOVE_ITEM headers ${ATTEND_INTERNAL_HEADERS})
  install(FILES ${headers} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/attend/${room})
endforeach()
set_target_properties(attend_all PROPERTIES EXPORT_NAME attend)
add_library(attend::attend ALIAS attend_all)
install(FILES ${PROJECT_SOURCE_DIR}/attend/attend.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/attend)

# A shared build (-DBUILD_SHARED_LIBS=ON) finds its libraries from where it is installed:
# the program in ../lib, each library beside the others (no LD_LIBRARY_PATH needed).
set_target_properties(attend PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
foreach(room IN LISTS ATTEND_ROOMS)
  set_target_properties(attend_${room} PROPERTIES INSTALL_RPATH "$ORIGIN")
endforeach()

install(TARGETS attend_tensor attend_autograd attend_nn attend_data attend_io attend_convert attend_infer
                attend_train attend_viz attend_all
        EXPORT attendTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS attend RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT attendTargets NAMESPACE attend:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/attend)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/attendConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/attendConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/attend)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/attendConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/attendConfig.cmake ${PROJECT_BINARY_DIR}/attendConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/attend)

# pkg-config: the libraries in link order, what they need, the two include roots.
set(ATTEND_PC_LIBS "-lattend_viz -lattend_train -lattend_infer -lattend_convert -lattend_io -lattend_nn -lattend_autograd -lattend_data -lattend_tensor")
set(ATTEND_PC_PRIVATE "")
foreach(lib IN LISTS HDF5_C_LIBRARIES)
  string(APPEND ATTEND_PC_PRIVATE " ${lib}")
endforeach()
set(ATTEND_PC_REQUIRES "spdlog")
if(ATTEND_MPI)
  string(APPEND ATTEND_PC_REQUIRES " ompi-c")
endif()
file(RELATIVE_PATH ATTEND_PC_UP "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")  # ../.. or deeper
configure_file(${PROJECT_SOURCE_DIR}/cmake/attend.pc.in ${PROJECT_BINARY_DIR}/attend.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/attend.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# A Debian package of all of it: `cpack -G DEB` in the build folder writes
# attend_<version>_<arch>.deb (/usr/bin/attend, the libraries, headers, CMake package and
# attend.pc), depending on the -dev packages the CMake package and the static libraries
# need.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME attend)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "small transformer language models on CPUs: tensors, autograd, modules, training")
set(CPACK_PACKAGE_CONTACT "attend developers <attend@localhost>")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_DEPENDS
    "libgomp1, libhdf5-dev, libspdlog-dev, nlohmann-json3-dev, cmake (>= 3.25) | pkg-config")
if(ATTEND_MPI)
  string(APPEND CPACK_DEBIAN_PACKAGE_DEPENDS ", libopenmpi-dev")
endif()
include(CPack)
