// The GGUF front end of kiln compile on hostile bytes: GgufFile::parse (header, metadata, tensor
// table), dequantization of every tensor kiln reads, the metadata as config.json
// (ggufHfConfig -> parseHfModelConfig), the tensors under HF names (GgufCheckpoint, with the q/k
// row permutation), and the tokenizer conversion (convertGgufTokenizer -> Tokenizer::fromJson).
// tests/compiler/import/gguf_fuzz_test.cc runs fixed mutations of the same reader in CTest.
//
// Invariants: every tensor lies inside the buffer; a tensor the reader accepts dequantizes; a
// converted tokenizer.json loads in kiln's own tokenizer.
#include "compiler/import/gguf_checkpoint.h"
#include "compiler/import/gguf_config.h"
#include "compiler/import/gguf_dequant.h"
#include "compiler/import/gguf_file.h"
#include "compiler/import/gguf_tokenizer.h"
#include "compiler/import/hf_config.h"
#include "runtime/text/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

#include <memory>
#include <vector>

namespace {

using namespace kiln::compiler;

constexpr int64_t kMaxElementsToRead = int64_t(1) << 20;

void checkTensors(const GgufFile &file, std::span<const uint8_t> buffer) {
  for (const GgufTensor &tensor : file.tensors()) {
    const std::span<const uint8_t> bytes = file.tensorBytes(tensor);
    KILN_FUZZ_CHECK(bytes.size() == tensor.size, "tensorBytes size differs: " + tensor.name);
    KILN_FUZZ_CHECK(bytes.empty() || (bytes.data() >= buffer.data() &&
                                      bytes.data() + bytes.size() <= buffer.data() + buffer.size()),
                    "tensor bytes outside the file: " + tensor.name);
    const GgmlTypeTraits *traits = ggmlTypeTraits(tensor.type);
    if (!traits || !traits->dequantizable || tensor.numElements() > kMaxElementsToRead)
      continue;
    std::vector<float> out(static_cast<size_t>(tensor.numElements()));
    kiln::Status status = dequantizeGgml(tensor.type, bytes, tensor.numElements(), out.data());
    KILN_FUZZ_CHECK(status.isOk(), tensor.name + ": " + status.toString());
  }
}

// What kiln compile does next with a parsed file's config and tensors.
void importModel(const std::shared_ptr<const GgufFile> &file) {
  auto arch = ggufArchitecture(*file);
  auto files = ggufHfConfig(*file);
  if (!arch.isOk() || !files.isOk())
    return;
  auto config = parseHfModelConfig(files->configJson, files->generationConfigJson);
  if (!config.isOk())
    return;
  auto checkpoint = GgufCheckpoint::create(file, **arch, config->numHeads, config->numKvHeads);
  if (!checkpoint.isOk())
    return;
  for (const std::string &name : (*checkpoint)->names()) {
    auto info = (*checkpoint)->info(name);
    KILN_FUZZ_CHECK(info.isOk(), "a listed tensor has no info: " + name);
    if ((*info)->numElements() > kMaxElementsToRead)
      continue;
    auto values = (*checkpoint)->readF32(name);
    KILN_FUZZ_CHECK(!values.isOk() || values->size() == static_cast<size_t>((*info)->numElements()),
                    "readF32 returned another element count: " + name);
  }
}

void convertTokenizer(const GgufFile &file) {
  auto converted = convertGgufTokenizer(file);
  if (!converted.isOk())
    return;
  auto tokenizer =
      kiln::rt::Tokenizer::fromJson(converted->tokenizerJson, converted->tokenizerConfigJson);
  KILN_FUZZ_CHECK(tokenizer.isOk(),
                  "a converted tokenizer does not load: " + tokenizer.status().toString());
  const std::vector<int32_t> ids = tokenizer->encode("Hello world \xe4\xbd\xa0", true);
  (void)tokenizer->decode(ids, false);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // A heap copy of exactly the input, so that ASan sees a read one byte past the end.
  std::shared_ptr<uint8_t[]> copy(new uint8_t[size ? size : 1]);
  std::copy(data, data + size, copy.get());
  const std::span<const uint8_t> buffer(copy.get(), size);
  auto parsed = GgufFile::parse(buffer, "fuzz.gguf", copy);
  if (!parsed.isOk())
    return 0;
  auto file = std::make_shared<const GgufFile>(std::move(parsed).value());
  checkTensors(*file, buffer);
  importModel(file);
  convertTokenizer(*file);
  return 0;
}
