// Safetensors checkpoints: one model.safetensors or shards listed in model.safetensors.index.json.
// Files are memory-mapped; tensors convert to fp32 on request. Aliases recorded in a file's
// `__metadata__` (name -> stored name, as TinyStories-656K's tied embedding) resolve transparently.
#pragma once

#include "compiler/import/checkpoint.h"
#include "runtime/base/file.h"
#include "runtime/base/status.h"

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace kiln::compiler {

class SafetensorsCheckpoint final : public Checkpoint {
public:
  // Opens MODEL_DIR/model.safetensors.index.json if present, else MODEL_DIR/model.safetensors.
  // Fails on a missing shard, a header that is not JSON, offsets outside the file, a dtype other
  // than F32/F16/BF16/I32 (naming tensor and dtype), or a shape that does not match the byte size.
  static Result<SafetensorsCheckpoint> open(const std::string &modelDir);

  bool contains(const std::string &name) const override; // alias-aware
  Result<const TensorInfo *> info(const std::string &name) const override;
  std::vector<std::string> names() const override; // stored names, sorted
  Result<std::span<const uint8_t>> rawBytes(const std::string &name) const override;
  Result<std::vector<float>> readF32(const std::string &name) const override;
  // Path of the file that stores `info` (for messages).
  const std::string &filePath(const TensorInfo &info) const;
  const std::string &modelDir() const { return modelDir_; }

private:
  Status addFile(const std::string &path, std::map<std::string, std::string> &metadata);
  Status resolveAliases(const std::map<std::string, std::string> &metadata);

  std::string modelDir_;
  std::vector<std::shared_ptr<MappedFile>> files_;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> aliases_; // requested name -> stored name
};

} // namespace kiln::compiler
