#include "runtime/engine/engine.h"

namespace kiln::rt {

Result<std::unique_ptr<Engine>> Engine::create(const EngineConfig &config) {
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<EngineCore> core, EngineCore::create(config));
  std::unique_ptr<Engine> engine(new Engine(std::move(core)));
  engine->thread_ = std::thread([e = engine.get()] { e->run(); });
  return engine;
}

Engine::~Engine() {
  shutdown();
}

Result<RequestHandle> Engine::submit(Request request) {
  KILN_RETURN_IF_ERROR(core_->validate(request));
  RequestHandle handle;
  handle.stream = std::make_shared<OutputStream>();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (draining_)
      return unavailable("engine is shutting down and accepts no new requests");
    handle.id = nextId_++;
    inbox_.push_back({handle.id, std::move(request), handle.stream, EngineCore::Clock::now()});
    live_.insert(handle.id);
  }
  wake_.notify_one();
  return handle;
}

Status Engine::cancel(RequestId id) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!live_.count(id))
      return notFound("request " + std::to_string(id) + " is unknown or already finished");
    cancels_.push_back(id);
  }
  wake_.notify_one();
  return okStatus();
}

void Engine::stop(bool abortInFlight) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    draining_ = true;
    abortInFlight_ = abortInFlight_ || abortInFlight;
  }
  wake_.notify_one();
  if (thread_.joinable() && std::this_thread::get_id() != thread_.get_id())
    thread_.join();
}

void Engine::shutdown() {
  stop(false);
}
void Engine::shutdownNow() {
  stop(true);
}

void Engine::route(std::vector<RequestOutput> outputs) {
  for (RequestOutput &out : outputs) {
    auto it = streams_.find(out.requestId);
    if (it == streams_.end())
      continue;
    if (!out.requestFinished) {
      it->second->push(std::move(out));
      continue;
    }
    // Forget the id before the caller can see the stream close, so cancel() after the last
    // output reliably says NOT_FOUND.
    {
      std::lock_guard<std::mutex> lock(mutex_);
      live_.erase(it->first);
    }
    it->second->push(std::move(out));
    it->second->close();
    streams_.erase(it);
  }
}

void Engine::run() {
  for (;;) {
    std::vector<Pending> inbox;
    std::vector<RequestId> cancels;
    bool draining = false, abortAll = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] {
        return !inbox_.empty() || !cancels_.empty() || draining_ || core_->hasWork();
      });
      inbox.swap(inbox_);
      cancels.swap(cancels_);
      draining = draining_;
      abortAll = abortInFlight_;
    }
    for (Pending &p : inbox) {
      streams_[p.id] = p.stream;
      core_->addRequest(p.id, std::move(p.request), p.arrival);
    }
    for (RequestId id : cancels)
      core_->abortRequest(id);
    if (abortAll) {
      std::vector<RequestId> ids;
      for (const auto &[id, stream] : streams_)
        ids.push_back(id);
      for (RequestId id : ids)
        core_->abortRequest(id);
    }
    route(core_->takeOutputs());
    if (core_->hasWork()) {
      core_->step();
      route(core_->takeOutputs());
      continue;
    }
    if (draining) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (inbox_.empty())
        return;
    }
  }
}

} // namespace kiln::rt
