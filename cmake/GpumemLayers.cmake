# The library's layers as targets, each seeing only the headers of what it depends on.
#
# Public headers stay in include/gpumem/ (installed as they are; detail/ is not installed). In the
# build, each layer sees a folder of its own under ${PROJECT_BINARY_DIR}/layers/<target>/ holding
# links to its headers only, so a layer that includes a header of a layer it does not depend on
# fails to compile ("No such file or directory"), and internal headers, beside their sources in
# src/<layer>/, are reached only by the layer itself and by the targets that name that folder.

set(GPUMEM_LAYER_STAGE ${PROJECT_BINARY_DIR}/layers)
set_property(GLOBAL PROPERTY GPUMEM_LAYER_HEADERS "")

# gpumem_layer_headers(<target> <header>...): headers relative to include/gpumem/, made visible to
# <target> and to whatever links it; installed unless under detail/ (only when <target> is).
function(gpumem_layer_headers target)
  set(stage ${GPUMEM_LAYER_STAGE}/${target})
  file(REMOVE_RECURSE ${stage})
  foreach(header IN LISTS ARGN)
    set(source ${PROJECT_SOURCE_DIR}/include/gpumem/${header})
    if(NOT EXISTS ${source})
      message(FATAL_ERROR "gpumem_layer_headers(${target}): include/gpumem/${header} does not exist")
    endif()
    get_filename_component(dir ${stage}/gpumem/${header} DIRECTORY)
    file(MAKE_DIRECTORY ${dir})
    file(CREATE_LINK ${source} ${stage}/gpumem/${header} SYMBOLIC)
    if(NOT header MATCHES "^detail/")
      get_filename_component(subdir ${header} DIRECTORY)
      install(FILES ${source} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/gpumem/${subdir})
    endif()
  endforeach()
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${stage}> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  set_property(TARGET ${target} PROPERTY GPUMEM_HEADER_STAGE ${stage})
endfunction()

# gpumem_check_headers(<header>...): every header in include/gpumem/ is one of the layers' (the
# list names them all, built or not), so a new header cannot be left out of every layer unseen.
function(gpumem_check_headers)
  file(GLOB_RECURSE present RELATIVE ${PROJECT_SOURCE_DIR}/include/gpumem CONFIGURE_DEPENDS
       ${PROJECT_SOURCE_DIR}/include/gpumem/*)
  foreach(header IN LISTS present)
    if(NOT header IN_LIST ARGN)
      message(FATAL_ERROR "include/gpumem/${header} belongs to no layer: add it to a layer's header "
                          "list in CMakeLists.txt (GPUMEM_<LAYER>_HEADERS)")
    endif()
  endforeach()
endfunction()

# gpumem_layer(<target> <folder> [CUDA]): a static library of src/<folder>/*.cpp (and *.cu with
# CUDA), exported as gpumem::<folder>, its internal headers beside its sources.
function(gpumem_layer target folder)
  set(globs ${PROJECT_SOURCE_DIR}/src/${folder}/*.cpp)
  if(ARGN STREQUAL "CUDA")
    list(APPEND globs ${PROJECT_SOURCE_DIR}/src/${folder}/*.cu)
  endif()
  file(GLOB sources CONFIGURE_DEPENDS ${globs})
  add_library(${target} STATIC ${sources})
  add_library(gpumem::${folder} ALIAS ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${folder})
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/src/${folder})
  # The headers need C++20 (concepts, defaulted comparisons): a find_package user gets it too.
  target_compile_features(${target} PUBLIC cxx_std_20)
  # fmt is header-only and used inside the sources only: nothing of it reaches the export.
  target_link_libraries(${target} PRIVATE $<BUILD_INTERFACE:fmt::fmt-header-only>)
  gpumem_warnings(${target})
endfunction()
