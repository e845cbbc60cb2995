// A kiln.weight source is a checkpoint tensor name, optionally with a slice of it, written into
// the source string itself ("model.norm.weight", "...q_proj.weight|rows=64:128|cols=0:32"), and
// "|plus_one" when the weight is 1 + the tensor (Gemma's RMSNorm scales by 1 + w), "|add_row=T@R"
// when row R of tensor T is added to each row ("|sub_row=T@R": subtracted). Tensor
// parallelism shards weights this way; keeping the slice inside the string means the fusion passes,
// which concatenate the parts' sources, carry shards along without knowing about them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::compiler {

struct SourceSlice {
  std::string tensor;
  // Half-open ranges over dim 0 (rows) and dim 1 (cols); end -1 is "to the end". Rows past the
  // tensor's last row are zeros (the padding of a vocab shard); cols must lie inside the tensor.
  int64_t rowBegin = 0, rowEnd = -1;
  int64_t colBegin = 0, colEnd = -1;
  bool plusOne = false; // the weight is 1 + each value, computed in fp32
  // Non-empty: row `addRow` of this other tensor is added to every row, in fp32 (an encoder's
  // token type 0 folded into its word embeddings): "|add_row=TENSOR@ROW"; with subtractRow it is
  // subtracted instead (the token types' table less type 0's row): "|sub_row=TENSOR@ROW".
  std::string addRowTensor;
  int64_t addRow = 0;
  bool subtractRow = false;
  bool transformed() const { return plusOne || !addRowTensor.empty(); }

  bool sliced() const { return rowBegin != 0 || rowEnd != -1 || colBegin != 0 || colEnd != -1; }
};

// "tensor|rows=a:b|cols=c:d|plus_one" (only the parts that differ from the whole tensor).
std::string formatSourceSlice(const SourceSlice &slice);
// nullopt on a malformed spec (unknown key, bad numbers, begin > end).
std::optional<SourceSlice> parseSourceSlice(std::string_view spec);

// `inner` (a slice of the tensor `outer` selects, relative to it) as one slice of outer's
// tensor: how a tensor-parallel shard of a part of a fused checkpoint tensor (Phi-3's q rows of
// qkv_proj) reads the checkpoint. nullopt when inner does not fit in outer's ranges (an inner
// range "to the end" takes outer's end).
std::optional<SourceSlice> composeSourceSlices(const SourceSlice &outer, const SourceSlice &inner);

// The slice's shape for a tensor of `shape`, or nullopt (with `error` set) when the slice does not
// fit: cols outside the tensor, a column slice of a rank-1 tensor, or a negative extent.
std::optional<std::vector<int64_t>>
slicedShape(const SourceSlice &slice, const std::vector<int64_t> &shape, std::string &error);

} // namespace kiln::compiler
