// Embeddings from a generating model, computed in its engine's steps beside generation requests
// (runtime/engine/request.h Request::embed): each input is a prefill-only request whose prompt's
// last final hidden state (the lm_head's input) is its embedding, last-token pooled and
// normalized (L2), as the decoder embedding models kiln compiles pool and normalize
// (tests/data/README.md "Decoder embedding fixture"). The engine batches them with whatever else
// it runs, in chunks of its token budget; nothing else holds the model.
#pragma once

#include "runtime/embed/embedding_service.h"
#include "runtime/engine/engine.h"

namespace kiln::rt {

class EngineEmbeddings final : public Embeddings {
public:
  // `engine` outlives this; `width` its plan's hidden width (RunnerLimits::hiddenWidth, > 0).
  EngineEmbeddings(Engine &engine, int32_t width);

  const EmbeddingModelInfo &info() const override { return info_; }
  // Token types are refused (a decoder takes none); an input the engine refuses fails the call,
  // naming it.
  Result<std::vector<Embedding>> embed(std::vector<std::vector<int32_t>> inputs,
                                       std::vector<std::vector<int32_t>> tokenTypes = {}) override;

private:
  Engine &engine_;
  EmbeddingModelInfo info_;
};

} // namespace kiln::rt
