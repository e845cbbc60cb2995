// The GGUF front end of `kiln compile`: a .gguf file (or a directory holding one, or the first
// part of a split model) as the inputs the Hugging Face path reads. The config
// (gguf_config.h), the tokenizer (gguf_tokenizer.h: tokenizer.json + tokenizer_config.json) and
// generation_config.json are written into a staging directory that the compile reads like a HF
// model directory and copies into the artifact; the tensors are a GgufCheckpoint. The staging
// directory is removed with the object.
#pragma once

#include "compiler/import/checkpoint.h"
#include "compiler/import/gguf_file.h"

#include <memory>
#include <string>

namespace kiln::compiler {

class GgufModel {
public:
  // `progress` (may be null) receives one line per stage.
  static Result<std::unique_ptr<GgufModel>> open(const std::string &path,
                                                 std::ostream *progress = nullptr);
  ~GgufModel();
  GgufModel(const GgufModel &) = delete;
  GgufModel &operator=(const GgufModel &) = delete;

  const std::string &stagingDir() const { return stagingDir_; }
  std::shared_ptr<const Checkpoint> checkpoint() const { return checkpoint_; }
  const GgufFile &file() const { return *gguf_; }

private:
  GgufModel() = default;
  std::shared_ptr<const GgufFile> gguf_;
  std::shared_ptr<const Checkpoint> checkpoint_;
  std::string stagingDir_;
};

} // namespace kiln::compiler
