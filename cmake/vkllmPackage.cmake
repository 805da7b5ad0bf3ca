# The installed package: headers, libvkllm.a and/or libvkllm.so, vkllmConfig.cmake,
# vkllmConfigVersion.cmake; the imported target vkllm::vkllm (docs/library.md).
#
# Both libraries are built from the same objects. Their third-party libraries are private: the
# shared library links them itself (they never reach a consumer's link line); the static library
# cannot, so its exported target names them and vkllmConfig.cmake finds exactly those, derived
# here from what vkllm_lib links in this build (no curl or OpenSSL in a VKLLM_WITH_CURL=OFF build).
include(CMakePackageConfigHelpers)

set(VKLLM_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/vkllm)

# How a consumer finds each library the static library links. A new dependency must be added
# here, or configuring fails: a consumer must never meet an unresolved target.
set(VKLLM_PKGCONFIG_MODULES PCRE2=libpcre2-8 UTF8PROC=libutf8proc)
function(vkllm_dependency_code lib out)
  set(code "")
  if(lib STREQUAL "Threads::Threads")
    set(code "find_dependency(Threads)")
  elseif(lib STREQUAL "CURL::libcurl")
    set(code "find_dependency(CURL)")
  elseif(lib STREQUAL "OpenSSL::Crypto")
    set(code "find_dependency(OpenSSL COMPONENTS Crypto)")
  elseif(lib STREQUAL "Vulkan::Vulkan")
    set(code "find_dependency(Vulkan)")
  elseif(lib MATCHES "^PkgConfig::(.+)$")
    set(prefix ${CMAKE_MATCH_1})
    foreach(entry IN LISTS VKLLM_PKGCONFIG_MODULES)
      if(entry MATCHES "^${prefix}=(.+)$")
        set(code "_vkllm_find_pkgconfig(${prefix} ${CMAKE_MATCH_1})")
      endif()
    endforeach()
  endif()
  if(NOT code)
    message(FATAL_ERROR "vkllm_lib links ${lib}: add to cmake/vkllmPackage.cmake how the package "
                        "config finds it for static consumers")
  endif()
  set(${out} "${code}" PARENT_SCOPE)
endfunction()

get_target_property(_vkllm_links vkllm_lib LINK_LIBRARIES)
set(VKLLM_PRIVATE_LIBS)
set(VKLLM_STATIC_DEPENDENCIES)
list(REMOVE_DUPLICATES _vkllm_links)
foreach(lib IN LISTS _vkllm_links)
  # Skipped: build-tree-only entries (internal headers, header-only libraries) and the markers
  # CMake adds around links made from another directory (::@(dir) ... ::@).
  if(lib MATCHES "^\\$<BUILD_INTERFACE:" OR lib MATCHES "^::@")
    continue()
  endif()
  list(APPEND VKLLM_PRIVATE_LIBS ${lib})
  vkllm_dependency_code(${lib} code)
  string(APPEND VKLLM_STATIC_DEPENDENCIES "  ${code}\n")
endforeach()

install(FILES ${PROJECT_SOURCE_DIR}/include/vkllm/vkllm.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/vkllm)

set(VKLLM_PACKAGE_KINDS)
if(VKLLM_LIB_STATIC)
  list(APPEND VKLLM_PACKAGE_KINDS static)
  install(TARGETS vkllm_lib EXPORT vkllm-static-targets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(EXPORT vkllm-static-targets NAMESPACE vkllm:: DESTINATION ${VKLLM_CMAKE_DIR})
endif()
if(VKLLM_LIB_SHARED)
  list(APPEND VKLLM_PACKAGE_KINDS shared)
  add_library(vkllm_shared SHARED $<TARGET_OBJECTS:vkllm_lib>)
  target_link_libraries(vkllm_shared PRIVATE ${VKLLM_PRIVATE_LIBS})
  target_link_options(vkllm_shared PRIVATE LINKER:--no-undefined
    LINKER:--version-script=${CMAKE_CURRENT_LIST_DIR}/vkllm.map)
  set_property(TARGET vkllm_shared APPEND PROPERTY LINK_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/vkllm.map)
  target_include_directories(vkllm_shared INTERFACE $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
                                                    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_compile_features(vkllm_shared INTERFACE cxx_std_17)
  # 0.x: a new minor version may change the ABI (vkllmConfigVersion: SameMinorVersion).
  set_target_properties(vkllm_shared PROPERTIES OUTPUT_NAME vkllm EXPORT_NAME vkllm LINKER_LANGUAGE CXX
    VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
  install(TARGETS vkllm_shared EXPORT vkllm-shared-targets
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(EXPORT vkllm-shared-targets NAMESPACE vkllm:: DESTINATION ${VKLLM_CMAKE_DIR})
endif()
if(NOT VKLLM_PACKAGE_KINDS)
  message(FATAL_ERROR "the package needs a library: VKLLM_LIB_STATIC or VKLLM_LIB_SHARED")
endif()

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/vkllmConfig.cmake.in
  ${PROJECT_BINARY_DIR}/vkllmConfig.cmake INSTALL_DESTINATION ${VKLLM_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/vkllmConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/vkllmConfig.cmake ${PROJECT_BINARY_DIR}/vkllmConfigVersion.cmake
  DESTINATION ${VKLLM_CMAKE_DIR})
if(VKLLM_BUILD_CLI)
  install(TARGETS vkllm RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
