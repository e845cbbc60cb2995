// One streaming response: pulls a request's outputs from its OutputStream on the HTTP thread,
// formats them (StreamFormatter: OpenAI SSE, TGI SSE, LMI JSON lines) and writes them out. The
// engine is reached only through its output stream and Engine::cancel (STYLE.md rule 6): a client
// that goes away cancels the request, so its KV blocks are freed at the engine's next step.
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
  // Called after `output` was folded into `soFar`.
  virtual std::string output(const RequestOutput &output, const GenerationResult &soFar) = 0;
  // After the request's last output: usage chunk, [DONE].
  virtual std::string end(const GenerationResult &result) = 0;
};

// Writes bytes to the client; false once the client is gone.
using StreamWriter = std::function<bool(std::string_view)>;
// Whether the client is still connected (checked while no output is ready).
using LivenessCheck = std::function<bool()>;

class StreamSession {
public:
  enum class Pump { kMore, kDone, kClientGone };

  StreamSession(Engine &engine, RequestHandle handle, std::unique_ptr<StreamFormatter> formatter,
                std::vector<int32_t> promptIds, int32_t n);
  // Cancels the request if it has not finished (a handler torn down mid-stream).
  ~StreamSession();

  // Waits up to `poll` for the next output and writes it. kDone after the last output was written;
  // kClientGone when a write failed or the client disconnected (the request is then cancelled).
  // `beforeLastWrite` runs once the request has ended, just before its final bytes are written.
  Pump pump(const StreamWriter &write, const LivenessCheck &alive,
            const std::function<void()> &beforeLastWrite = nullptr,
            std::chrono::milliseconds poll = std::chrono::milliseconds(50));

  const GenerationResult &result() const { return result_; }
  bool clientGone() const { return clientGone_; }
  // Called once when the request ends (finished or cancelled), for metrics.
  void setOnFinished(std::function<void(const GenerationResult &, bool clientGone)> callback) {
    onFinished_ = std::move(callback);
  }

private:
  Pump clientGone();
  void finish();

  Engine &engine_;
  RequestHandle handle_;
  std::unique_ptr<StreamFormatter> formatter_;
  GenerationResult result_;
  bool begun_ = false;
  bool done_ = false;
  bool clientGone_ = false;
  std::function<void(const GenerationResult &, bool)> onFinished_;
};

} // namespace kiln::rt::serve
