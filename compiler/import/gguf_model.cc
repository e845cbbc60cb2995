#include "compiler/import/gguf_model.h"

#include "compiler/import/config_fields.h"
#include "compiler/import/gguf_checkpoint.h"
#include "compiler/import/gguf_config.h"
#include "compiler/import/gguf_dequant.h"
#include "compiler/import/gguf_packed.h"
#include "compiler/import/gguf_tokenizer.h"
#include "runtime/base/file.h"

#include <cstdlib>
#include <filesystem>
#include <map>
#include <ostream>

namespace kiln::compiler {
namespace {

Result<std::string> makeStagingDir() {
  std::error_code error;
  std::filesystem::path base = std::filesystem::temp_directory_path(error);
  if (error)
    base = "/tmp";
  std::string pattern = (base / "kiln-gguf-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr)
    return internalError("cannot create a staging directory under " + base.string());
  return pattern;
}

} // namespace

GgufModel::~GgufModel() {
  if (!stagingDir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(stagingDir_, ignored);
  }
}

namespace {

// " (F32 7, Q5_1 8)": the tensors per stored type; and "; Q5_1 blocks are dequantized (...)" for
// the quantized types kiln does not keep packed, so a user sees why the artifact is larger.
struct StoredTypesNote {
  std::string counts, dequantized;
};
StoredTypesNote storedTypesNote(const GgufFile &gguf) {
  std::map<std::string, int> counts;
  std::map<std::string, bool> unpacked;
  for (const GgufTensor &t : gguf.tensors()) {
    const std::string name = ggmlTypeName(t.type);
    ++counts[name];
    const bool plain = name == "F32" || name == "F16" || name == "BF16";
    const std::vector<int64_t> shape = t.shape();
    if (!plain && (shape.size() != 2 || !ggmlPackedForm(t.type, shape.back())))
      unpacked[name] = true;
  }
  StoredTypesNote note;
  for (const auto &[name, count] : counts)
    note.counts += (note.counts.empty() ? " (" : ", ") + name + " " + std::to_string(count);
  if (!note.counts.empty())
    note.counts += ")";
  for (const auto &[name, yes] : unpacked)
    note.dequantized += (note.dequantized.empty() ? "; " : ", ") + name;
  if (!note.dequantized.empty())
    note.dequantized += " blocks are dequantized (kiln keeps Q8_0, Q4_0 and Q4_1 matrices packed)";
  return note;
}

} // namespace

Result<std::unique_ptr<GgufModel>> GgufModel::open(const std::string &path,
                                                   std::ostream *progress) {
  auto model = std::unique_ptr<GgufModel>(new GgufModel());
  KILN_ASSIGN_OR_RETURN(GgufFile file, GgufFile::open(path));
  model->gguf_ = std::make_shared<const GgufFile>(std::move(file));
  const GgufFile &gguf = *model->gguf_;
  KILN_ASSIGN_OR_RETURN(const GgufArchitecture *arch, ggufArchitecture(gguf));
  KILN_ASSIGN_OR_RETURN(GgufHfConfig config, ggufHfConfig(gguf));
  KILN_ASSIGN_OR_RETURN(ConfigFields fields, ConfigFields::parse(config.configJson, path));
  int64_t heads = 0, kvHeads = 0;
  KILN_RETURN_IF_ERROR(fields.readPositiveInt("num_attention_heads", heads, true));
  KILN_RETURN_IF_ERROR(fields.readPositiveInt("num_key_value_heads", kvHeads, true));
  KILN_ASSIGN_OR_RETURN(model->checkpoint_,
                        GgufCheckpoint::create(model->gguf_, *arch, heads, kvHeads));
  KILN_ASSIGN_OR_RETURN(model->stagingDir_, makeStagingDir());
  const std::string &dir = model->stagingDir_;
  KILN_RETURN_IF_ERROR(writeFileAtomic(dir + "/config.json", config.configJson));
  KILN_RETURN_IF_ERROR(
      writeFileAtomic(dir + "/generation_config.json", config.generationConfigJson));
  std::string tokenizerNote = "no tokenizer metadata";
  if (gguf.find("tokenizer.ggml.model") != nullptr) {
    KILN_ASSIGN_OR_RETURN(GgufTokenizerFiles tokenizer, convertGgufTokenizer(gguf));
    KILN_RETURN_IF_ERROR(writeFileAtomic(dir + "/tokenizer.json", tokenizer.tokenizerJson));
    KILN_RETURN_IF_ERROR(
        writeFileAtomic(dir + "/tokenizer_config.json", tokenizer.tokenizerConfigJson));
    tokenizerNote = "tokenizer " + gguf.getStringOr("tokenizer.ggml.model", "?") +
                    (gguf.find("tokenizer.ggml.pre")
                         ? " (pre " + gguf.getStringOr("tokenizer.ggml.pre", "") + ")"
                         : "");
  }
  if (progress) {
    const StoredTypesNote types = storedTypesNote(gguf);
    *progress << "gguf: " << path << ": " << arch->name << ", " << gguf.tensors().size()
              << " tensors" << types.counts << ", " << tokenizerNote << types.dequantized << "\n";
  }
  return model;
}

} // namespace kiln::compiler
