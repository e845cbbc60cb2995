// Dialect registration and the generated op definitions (kept in their own file: they are the
// slow part of the dialect's build).
#include "compiler/dialect/kiln_dialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"

#include "compiler/dialect/kiln_dialect.cc.inc"
#include "compiler/dialect/kiln_enums.cc.inc"

#define GET_OP_CLASSES
#include "compiler/dialect/kiln_ops.cc.inc"

namespace kiln::compiler {

void KilnDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "compiler/dialect/kiln_ops.cc.inc"
      >();
}

} // namespace kiln::compiler
