// One response in progress: pulls a request's outputs from its OutputStreams (one engine request
// per prompt; a /v1/completions batch has several) on the HTTP thread, formats them
// (StreamFormatter: OpenAI SSE, TGI SSE, LMI JSON lines, or one whole JSON body at the end) and
// writes them out. The engine is reached only through its output streams and Engine::cancel
// (docs/conventions.md rule 6): a client that goes away cancels every prompt's request, so their KV
// blocks are freed at the engine's next step.
#pragma once

#include "runtime/engine/engine.h"
#include "runtime/serve/api_error.h"
#include "runtime/serve/generation.h"

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace kiln::rt::serve {

class StreamFormatter {
public:
  virtual ~StreamFormatter() = default;
  // Written before the first output (e.g. the chat role chunk).
  virtual std::string begin() { return {}; }
  // Called after `output`, an output of prompt `prompt`, was folded into `soFar` (that prompt's
  // result so far).
  virtual std::string output(size_t prompt, const RequestOutput &output,
                             const GenerationResult &soFar) = 0;
  // After the last output of every prompt: usage chunk, [DONE], or the whole body.
  virtual std::string end(const std::vector<GenerationResult> &results) = 0;
};

// Writes bytes to the client; false once the client is gone.
using StreamWriter = std::function<bool(std::string_view)>;
// Whether the client is still connected (checked while no output is ready).
using LivenessCheck = std::function<bool()>;

class StreamSession {
public:
  enum class Pump { kMore, kDone, kClientGone };

  // `handles` and `promptIds` hold one entry per prompt, in the request's order.
  StreamSession(Engine &engine, std::vector<RequestHandle> handles,
                std::unique_ptr<StreamFormatter> formatter,
                std::vector<std::vector<int32_t>> promptIds, int32_t n);
  // Cancels the requests that have not finished (a handler torn down mid-stream).
  ~StreamSession();

  // Waits up to `poll` for the next output and writes it. kDone after the last output was written;
  // kClientGone when a write failed or the client disconnected (the requests are then cancelled).
  // `beforeLastWrite` runs once every request has ended, just before the final bytes are written.
  Pump pump(const StreamWriter &write, const LivenessCheck &alive,
            const std::function<void()> &beforeLastWrite = nullptr,
            std::chrono::milliseconds poll = std::chrono::milliseconds(50));
  // The client went away while nothing was being pumped (a failed heartbeat): cancels like pump.
  void abandon() { (void)cancelAll(); }

  const std::vector<GenerationResult> &results() const { return results_; }
  bool done() const { return done_; }
  bool clientGone() const { return clientGone_; }
  // Called once when the response ends (finished or cancelled), for metrics.
  using FinishedCallback =
      std::function<void(const std::vector<GenerationResult> &, bool clientGone)>;
  void setOnFinished(FinishedCallback callback) { onFinished_ = std::move(callback); }

private:
  Pump cancelAll();
  void finish();
  // Everything has ended: the formatter's closing bytes, then done.
  Pump end(std::string chunk, const StreamWriter &write,
           const std::function<void()> &beforeLastWrite);

  Engine &engine_;
  std::vector<RequestHandle> handles_;
  OutputMerger outputs_;
  std::unique_ptr<StreamFormatter> formatter_;
  std::vector<GenerationResult> results_;
  size_t unfinished_ = 0;
  bool begun_ = false;
  bool done_ = false;
  bool clientGone_ = false;
  FinishedCallback onFinished_;
};

} // namespace kiln::rt::serve
