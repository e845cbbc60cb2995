# The MLIR part of the compiler: kiln dialect, model builders (models/), passes, plan emission and
# the compileModel() driver. MLIR is found here only so no MLIR target is visible to the runtime
# (TOOLCHAIN.md). Link the shared libMLIR/libLLVM: the static archives take minutes to link.
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

# Consumers outside compiler/ (tests) see MLIR's headers through these targets.
set(KILN_MLIR_INCLUDES ${LLVM_INCLUDE_DIRS} ${MLIR_INCLUDE_DIRS})

file(GLOB KILN_DIALECT_SOURCES CONFIGURE_DEPENDS ${KILN_DIALECT_DIR}/*.cc)
add_library(kiln_dialect ${KILN_DIALECT_SOURCES})
add_dependencies(kiln_dialect kiln_dialect_gen)
target_include_directories(kiln_dialect SYSTEM PUBLIC ${KILN_MLIR_INCLUDES})
target_include_directories(kiln_dialect PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
target_link_libraries(kiln_dialect PUBLIC MLIR LLVM)

file(GLOB KILN_MODEL_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/models/*.cc)
add_library(kiln_models ${KILN_MODEL_SOURCES})
target_link_libraries(kiln_models PUBLIC kiln_dialect kiln_import)

file(GLOB KILN_TRANSFORM_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/transforms/*.cc)
add_library(kiln_transforms ${KILN_TRANSFORM_SOURCES})
target_link_libraries(kiln_transforms PUBLIC kiln_dialect)

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
