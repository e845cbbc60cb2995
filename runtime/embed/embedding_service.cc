#include "runtime/embed/embedding_service.h"

namespace kiln::rt {

Result<std::unique_ptr<EmbeddingService>> EmbeddingService::start(const EmbedderConfig &config,
                                                                  bool normalize) {
  KILN_ASSIGN_OR_RETURN(Embedder embedder, Embedder::create(config));
  std::unique_ptr<EmbeddingService> service(new EmbeddingService(std::move(embedder)));
  service->info_ = {service->embedder_.width(), service->embedder_.maxInputTokens(), config.pooling,
                    normalize, service->embedder_.limits().typeVocabSize};
  service->worker_ = std::thread([s = service.get()] { s->run(); });
  return service;
}

EmbeddingService::~EmbeddingService() {
  shutdown();
}

void EmbeddingService::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (worker_.joinable())
    worker_.join();
}

Result<std::vector<Embedding>>
EmbeddingService::embed(std::vector<std::vector<int32_t>> inputs,
                        std::vector<std::vector<int32_t>> tokenTypes) {
  KILN_RETURN_IF_ERROR(embedder_.validate(inputs, tokenTypes));
  std::future<Result<std::vector<Embedding>>> result;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_)
      return unavailable("the embedding service is shutting down");
    queue_.push_back({std::move(inputs), std::move(tokenTypes), {}});
    result = queue_.back().done.get_future();
  }
  wake_.notify_one();
  return result.get();
}

void EmbeddingService::run() {
  for (;;) {
    std::deque<Pending> batch;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty())
        return; // stopping, and nothing left to finish
      batch.swap(queue_);
    }
    serve(batch);
  }
}

void EmbeddingService::serve(std::deque<Pending> &batch) {
  std::vector<std::vector<int32_t>> all, allTypes; // an empty type list: all type 0
  for (Pending &p : batch) {
    for (size_t i = 0; i < p.inputs.size(); ++i) {
      all.push_back(std::move(p.inputs[i]));
      allTypes.push_back(p.tokenTypes.empty() ? std::vector<int32_t>()
                                              : std::move(p.tokenTypes[i]));
    }
  }
  Result<std::vector<Embedding>> out = embedder_.embed(all, allTypes);
  size_t next = 0;
  for (Pending &p : batch) {
    if (!out.isOk()) {
      p.done.set_value(out.status());
      continue;
    }
    std::vector<Embedding> mine(std::make_move_iterator(out->begin() + next),
                                std::make_move_iterator(out->begin() + next + p.inputs.size()));
    next += p.inputs.size();
    p.done.set_value(std::move(mine));
  }
}

} // namespace kiln::rt
