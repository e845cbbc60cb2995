#include "runtime/service/engine_embeddings.h"

namespace kiln::rt {

EngineEmbeddings::EngineEmbeddings(Engine &engine, int32_t width) : engine_(engine) {
  info_.width = width;
  info_.maxInputTokens = engine.limits().maxSeqLen;
  info_.pooling = PoolingMode::kLastToken;
  info_.normalize = true;
}

Result<std::vector<Embedding>>
EngineEmbeddings::embed(std::vector<std::vector<int32_t>> inputs,
                        std::vector<std::vector<int32_t>> tokenTypes) {
  for (const auto &types : tokenTypes)
    for (int32_t type : types)
      if (type != 0)
        return invalidArgument("this model takes no token types (text pairs)");
  // Every input submitted first, so the engine can put them in the same steps.
  std::vector<RequestHandle> handles;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Request request;
    request.promptIds = inputs[i];
    request.embed = true;
    Result<RequestHandle> handle = engine_.submit(std::move(request));
    if (!handle.isOk()) {
      for (const RequestHandle &h : handles)
        (void)engine_.cancel(h.id);
      return handle.status().withContext("input " + std::to_string(i));
    }
    handles.push_back(std::move(*handle));
  }
  std::vector<Embedding> out(inputs.size());
  Status failed;
  for (size_t i = 0; i < handles.size(); ++i) {
    while (std::optional<RequestOutput> output = handles[i].stream->next()) {
      if (output->finishReason == FinishReason::kError && failed.isOk())
        failed = output->error.withContext("input " + std::to_string(i));
      else if (output->finishReason == FinishReason::kAbort && failed.isOk())
        failed = unavailable("input " + std::to_string(i) + " was aborted: the server is stopping");
      if (!output->embedding.empty())
        out[i].pooled = std::move(output->embedding);
    }
    out[i].numTokens = static_cast<int32_t>(inputs[i].size());
  }
  if (!failed.isOk())
    return failed;
  return out;
}

} // namespace kiln::rt
