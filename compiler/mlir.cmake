# The MLIR part of the compiler: kiln dialect, model builders (models/), passes, plan emission and
# the compileModel() driver. MLIR is found here only so no MLIR target is visible to the runtime
# (docs/toolchain.md). Link the shared libMLIR/libLLVM (unless KILN_STATIC_MLIR, below): the static
# archives take minutes to link.
find_package(MLIR 19.1 REQUIRED CONFIG)
list(APPEND CMAKE_MODULE_PATH ${MLIR_CMAKE_DIR} ${LLVM_CMAKE_DIR})
include(TableGen)
include(AddLLVM)
include(AddMLIR)
# Not HandleLLVMOptions: it rewrites global flags. mlir-tblgen reads -I from the directory property.
include_directories(SYSTEM ${LLVM_INCLUDE_DIRS} ${MLIR_INCLUDE_DIRS})
include_directories(${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})

set(KILN_DIALECT_DIR ${CMAKE_CURRENT_SOURCE_DIR}/dialect)
file(MAKE_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/dialect)
set(LLVM_TARGET_DEFINITIONS ${KILN_DIALECT_DIR}/kiln_ops.td)
mlir_tablegen(dialect/kiln_dialect.h.inc -gen-dialect-decls -dialect=kiln)
mlir_tablegen(dialect/kiln_dialect.cc.inc -gen-dialect-defs -dialect=kiln)
mlir_tablegen(dialect/kiln_ops.h.inc -gen-op-decls)
mlir_tablegen(dialect/kiln_ops.cc.inc -gen-op-defs)
mlir_tablegen(dialect/kiln_enums.h.inc -gen-enum-decls)
mlir_tablegen(dialect/kiln_enums.cc.inc -gen-enum-defs)
add_public_tablegen_target(kiln_dialect_gen)

# KILN_STATIC_MLIR: link the static libMLIR*.a / libLLVM*.a archives instead, so the binaries need
# neither libMLIR.so (66 MB) nor libLLVM.so at run time (the GPU kit carries them to a machine
# without our build deps; scripts/gpu-kit.sh). Off by default: static links take much longer.
option(KILN_STATIC_MLIR "Link MLIR/LLVM statically (self-contained binaries for the GPU kit)" OFF)

# Links `target` PUBLIC with the static archives behind the imported MLIR targets `roots` and
# everything their link interfaces reach. Debian exports them with LLVM_LINK_LLVM_DYLIB=ON, so
# each interface names the shared `LLVM` target: it is replaced by LLVM's component archives
# (Support pulls Demangle). libz3 is dropped: only LLVM's SMT solver uses it, which kiln never
# references, so no archive member that needs it is pulled in.
function(kiln_static_mlir_link target)
  set(pending ${ARGN})
  set(seen "")
  set(archives "")
  set(others "")
  while(pending)
    list(POP_FRONT pending item)
    if(item IN_LIST seen)
      continue()
    endif()
    list(APPEND seen ${item})
    if(item STREQUAL "LLVM" OR item STREQUAL "MLIR")
      list(APPEND pending LLVMSupport)
    elseif(item MATCHES "libz3")
    elseif(TARGET ${item} AND item MATCHES "^(MLIR|LLVM)")
      get_target_property(type ${item} TYPE)
      if(NOT type STREQUAL "STATIC_LIBRARY")
        message(FATAL_ERROR "KILN_STATIC_MLIR: ${item} is ${type}, not a static archive")
      endif()
      get_target_property(location ${item} LOCATION)
      list(APPEND archives ${location})
      get_target_property(deps ${item} INTERFACE_LINK_LIBRARIES)
      if(deps)
        list(APPEND pending ${deps})
      endif()
    else()
      list(APPEND others ${item})
    endif()
  endwhile()
  list(LENGTH archives count)
  message(STATUS "KILN_STATIC_MLIR: ${count} static MLIR/LLVM archives; also links: ${others}")
  # The archives depend on each other in cycles: one rescanned group resolves them in any order.
  string(REPLACE ";" "," group "${archives}")
  target_link_libraries(${target} PUBLIC "$<LINK_GROUP:RESCAN,${group}>" ${others})
endfunction()

# Consumers outside compiler/ (tests) see MLIR's headers through these targets.
set(KILN_MLIR_INCLUDES ${LLVM_INCLUDE_DIRS} ${MLIR_INCLUDE_DIRS})

file(GLOB KILN_DIALECT_SOURCES CONFIGURE_DEPENDS ${KILN_DIALECT_DIR}/*.cc)
add_library(kiln_dialect ${KILN_DIALECT_SOURCES})
add_dependencies(kiln_dialect kiln_dialect_gen)
target_include_directories(kiln_dialect SYSTEM PUBLIC ${KILN_MLIR_INCLUDES})
target_include_directories(kiln_dialect PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
if(KILN_STATIC_MLIR)
  kiln_static_mlir_link(kiln_dialect MLIRFuncDialect MLIRIR MLIRParser MLIRPass MLIRTransforms
                        MLIRTransformUtils MLIRSideEffectInterfaces MLIRSupport)
else()
  target_link_libraries(kiln_dialect PUBLIC MLIR LLVM)
endif()

file(GLOB KILN_MODEL_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/models/*.cc)
add_library(kiln_models ${KILN_MODEL_SOURCES})
target_link_libraries(kiln_models PUBLIC kiln_dialect kiln_import)

file(GLOB KILN_TRANSFORM_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/transforms/*.cc)
add_library(kiln_transforms ${KILN_TRANSFORM_SOURCES})
target_link_libraries(kiln_transforms PUBLIC kiln_dialect kiln_import)

file(GLOB KILN_EMIT_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/emit/*.cc)
add_library(kiln_emit ${KILN_EMIT_SOURCES})
target_link_libraries(kiln_emit PUBLIC kiln_dialect kiln_import kiln_artifact kiln_schema
                      PRIVATE nlohmann_json::nlohmann_json)

file(GLOB KILN_DRIVER_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/driver/*.cc)
add_library(kiln_compiler ${KILN_DRIVER_SOURCES})
target_link_libraries(kiln_compiler PUBLIC kiln_base
                      PRIVATE kiln_models kiln_transforms kiln_emit kiln_import)
# NVRTC codegen (KILN_ENABLE_CUDA): kernels/cuda adds kiln_codegen before this file. Public, so
# tests know whether SM targets compile or are refused.
if(TARGET kiln_codegen)
  target_link_libraries(kiln_compiler PRIVATE kiln_codegen)
  target_compile_definitions(kiln_compiler PUBLIC KILN_HAVE_CODEGEN=1)
endif()
