// SafetensorsCheckpoint::open on a hostile model directory: the 8-byte header length, the JSON
// header (dtypes, shapes, data_offsets, __metadata__ aliases) and model.safetensors.index.json.
//
// Input: one file is model.safetensors; two or more are model.safetensors.index.json followed by
// shards written as model-0000<i>-of-0000<n>.safetensors (fuzz_util.h separates them). Every
// tensor of an opened checkpoint must read back inside its file with shape x dtype bytes, and
// through readF32 when its dtype is a float one (I32 and F8_E4M3 are refused by name).
#include "compiler/import/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

#include <string>

namespace {

using kiln::compiler::SafetensorsCheckpoint;
using kiln::compiler::TensorInfo;

constexpr int64_t kMaxElementsToConvert = int64_t(1) << 20;

std::string shardName(size_t index, size_t count) {
  return "model-" + std::to_string(100000 + index).substr(1) + "-of-" +
         std::to_string(100000 + count).substr(1) + ".safetensors";
}

void checkTensor(const SafetensorsCheckpoint &checkpoint, const std::string &name) {
  auto info = checkpoint.info(name);
  KILN_FUZZ_CHECK(info.isOk(), "a listed tensor has no info: " + name);
  const TensorInfo &tensor = **info;
  auto bytes = checkpoint.rawBytes(name);
  KILN_FUZZ_CHECK(bytes.isOk(), "rawBytes failed for " + name);
  KILN_FUZZ_CHECK(bytes->size() == tensor.size, "rawBytes size differs from the header: " + name);
  const uint64_t elements = static_cast<uint64_t>(tensor.numElements());
  KILN_FUZZ_CHECK(elements * kiln::compiler::tensorDTypeSize(tensor.dtype) == tensor.size,
                  "shape x dtype differs from the stored size: " + name);
  if (tensor.numElements() > kMaxElementsToConvert)
    return;
  auto values = checkpoint.readF32(name);
  // I32 (packed quantized words) and F8_E4M3 (values that need their scales) are no weights on
  // their own: readF32 refuses them, naming the tensor; every float dtype reads back.
  if (tensor.dtype == kiln::compiler::TensorDType::kI32 ||
      tensor.dtype == kiln::compiler::TensorDType::kF8E4M3) {
    KILN_FUZZ_CHECK(!values.isOk() &&
                        values.status().message().find("'" + name + "'") != std::string::npos,
                    "readF32 took a non-float tensor, or its error does not name it: " + name);
    return;
  }
  KILN_FUZZ_CHECK(values.isOk() && values->size() == elements, "readF32 failed for " + name);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const kiln::fuzz::ScratchDir dir;
  const std::vector<std::string_view> files = kiln::fuzz::splitFiles(data, size);
  dir.reset();
  if (files.size() == 1) {
    dir.write("model.safetensors", files[0]);
  } else {
    dir.write("model.safetensors.index.json", files[0]);
    for (size_t i = 1; i < files.size(); ++i)
      dir.write(shardName(i, files.size() - 1), files[i]);
  }
  auto checkpoint = SafetensorsCheckpoint::open(dir.path());
  if (!checkpoint.isOk())
    return 0;
  for (const std::string &name : checkpoint->names())
    checkTensor(*checkpoint, name);
  return 0;
}
