// The serving side of an encoder: one worker thread owns the Embedder (as the engine thread owns a
// generating model's state); callers on any thread hand it their inputs and block until theirs
// are done. Requests waiting together are embedded together, packed by the Embedder into steps
// of the compiled token budget, so concurrent requests share steps. A request's inputs are
// checked on the caller's thread first: a bad one fails alone, before it is queued.
#pragma once

#include "runtime/embed/embedder.h"

#include <condition_variable>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

namespace kiln::rt {

struct EmbeddingModelInfo {
  int32_t width = 0;          // the hidden size: each hidden state's and pooled vector's length
  int32_t maxInputTokens = 0; // Embedder::maxInputTokens
  PoolingMode pooling = PoolingMode::kNone;
  bool normalize = false; // the model's own: a Normalize module follows its pooling
  // The token types the model takes (RunnerLimits::typeVocabSize): a text pair's type ids reach
  // only a model of two or more, as transformers passes token_type_ids only to models that take
  // them; -1 (an artifact compiled before kiln took token types) refuses pairs.
  int32_t typeVocabSize = 0;
};

// What serves embeddings: an encoder's EmbeddingService, or a generating model's engine taking
// embedding requests into its steps (runtime/service/engine_embeddings.h).
class Embeddings {
public:
  virtual ~Embeddings() = default;
  virtual const EmbeddingModelInfo &info() const = 0;
  // Thread-safe. One Embedding per input, in order (tokenTypes as Embedder::embed's); an error
  // names the bad input.
  virtual Result<std::vector<Embedding>>
  embed(std::vector<std::vector<int32_t>> inputs,
        std::vector<std::vector<int32_t>> tokenTypes = {}) = 0;
};

class EmbeddingService final : public Embeddings {
public:
  static Result<std::unique_ptr<EmbeddingService>> start(const EmbedderConfig &config,
                                                         bool normalize);
  ~EmbeddingService(); // shutdown()
  EmbeddingService(const EmbeddingService &) = delete;
  EmbeddingService &operator=(const EmbeddingService &) = delete;

  const EmbeddingModelInfo &info() const override { return info_; }
  // After shutdown(): unavailable.
  Result<std::vector<Embedding>> embed(std::vector<std::vector<int32_t>> inputs,
                                       std::vector<std::vector<int32_t>> tokenTypes = {}) override;
  // Finishes the queued requests, refuses new ones, joins the worker. Idempotent.
  void shutdown();

private:
  struct Pending {
    std::vector<std::vector<int32_t>> inputs;
    std::vector<std::vector<int32_t>> tokenTypes; // empty, or one list per input
    std::promise<Result<std::vector<Embedding>>> done;
  };

  explicit EmbeddingService(Embedder embedder) : embedder_(std::move(embedder)) {}
  void run();
  // Every waiting request, embedded in one call; each gets its own slice of the results.
  void serve(std::deque<Pending> &batch);

  Embedder embedder_;
  EmbeddingModelInfo info_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Pending> queue_;
  bool stopping_ = false;
  std::thread worker_;
};

} // namespace kiln::rt
