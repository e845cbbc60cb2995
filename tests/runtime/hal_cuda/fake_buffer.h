// A BoundBuffer at a made-up device address, for host-side tests of the cuda backend's planning
// (nothing dereferences it).
#pragma once

#include "runtime/hal/device.h"

#include <cstdint>

namespace kiln::rt {

// A made-up device address.
inline void *fake(uintptr_t address) {
  return reinterpret_cast<void *>(address);
}

inline BoundBuffer fakeBuffer(uintptr_t address, schema::DType dtype, schema::RowScale rows,
                              int64_t fixedRows, int64_t width,
                              schema::BufferKind kind = schema::BufferKind::Activation) {
  BoundBuffer b;
  b.data = reinterpret_cast<void *>(address);
  b.dtype = dtype;
  b.rows = rows;
  b.fixedRows = fixedRows;
  b.width = width;
  b.kind = kind;
  return b;
}

} // namespace kiln::rt
