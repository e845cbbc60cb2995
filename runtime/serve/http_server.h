// The HTTP front end: OpenAI (/v1/*), TGI (/generate, /generate_stream), SageMaker (/ping,
// /invocations), /health and /metrics over one ServeModel. cpp-httplib serves each connection on
// a pool thread; handlers only submit to the engine, cancel, and read output streams.
//
//   HttpServer server(config);
//   KILN_ASSIGN_OR_RETURN(int port, server.bind());
//   std::thread t([&] { server.serve(); });
//   server.setModel(&model);   // /ping turns 200
//   ...
//   server.drain();            // SIGTERM: stop accepting, close idle and slow connections,
//                              // finish the requests in flight
//   t.join();
#pragma once

#include "runtime/base/status.h"
#include "runtime/serve/serve_model.h"
#include "runtime/serve/sse.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

namespace kiln::rt::serve {

// A connection holds a pool thread for its whole life, so this bounds concurrent connections.
inline constexpr size_t kDefaultMaxHttpThreads = 2048;

// What /invocations answers for an encoder (option.task): its hidden states (feature-extraction,
// the default) or its pooled vectors (text-embedding).
enum class InvocationOutput { kHiddenStates, kPooled };

struct HttpServerConfig {
  std::string host = "127.0.0.1";
  int port = 0;                   // 0: any free port (bind() returns it)
  std::string apiKey;             // empty: no authentication
  size_t maxBodyBytes = 4u << 20; // larger bodies get 413
  // Generation requests in flight (running plus waiting) before 503: max batch + this.
  int64_t maxWaiting = 512;
  int64_t maxConcurrentRequests = 0; // overrides max batch + max waiting when > 0
  int httpThreads = 0;               // most connections served at once; 0: kDefaultMaxHttpThreads
  int listenBacklog = 1024;
  int keepAliveSeconds = 5;
  // However slowly the bytes trickle in, a request's line and headers must arrive within
  // headerTimeout of its first byte and its body within bodyTimeout of the headers; a miss gets
  // 408 and the connection closes, freeing its thread (runtime/serve/connection_server.h).
  std::chrono::milliseconds headerTimeout{30000};
  std::chrono::milliseconds bodyTimeout{60000};
  size_t maxHeaderBytes = 32u << 10; // request line plus headers; more gets 431
  Framing sageMakerStreamFormat = Framing::kJsonLines;
  InvocationOutput invocationOutput = InvocationOutput::kHiddenStates; // an encoder's /invocations
  // Receives one line per request a handler failed on unexpectedly (an exception); the client
  // gets only a generic 500. Null: not logged.
  std::function<void(const std::string &)> log;
};

class HttpServer {
public:
  explicit HttpServer(HttpServerConfig config);
  ~HttpServer();
  HttpServer(const HttpServer &) = delete;
  HttpServer &operator=(const HttpServer &) = delete;

  // Binds and starts listening (connections queue until serve()); returns the port.
  Result<int> bind();
  // The model is ready: generation routes open and /ping answers 200. `maxBatch` sizes the
  // admission limit. Not owned; must outlive serve(). Call before or while serve() runs.
  void setModel(ServeModel *model);
  // Accepts and serves until drain() or stop(); blocks. Returns once every connection is closed.
  Status serve();
  // Stops accepting connections and rejects new requests with 503; requests in flight finish.
  // Idle keep-alive connections and those still sending a request close at once. Safe from any
  // thread.
  void drain();
  bool draining() const;

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

} // namespace kiln::rt::serve
