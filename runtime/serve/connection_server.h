// cpp-httplib's server with whole-request deadlines, a header size cap and a drain that closes
// idle and slow connections.
//
// Debian's cpp-httplib 0.11.4 (a compiled library) reads a request with a per-recv timeout only:
// a client that drips a byte a second holds its connection, and the pool thread serving it,
// forever, and its keep-alive loop outlives a drain. ConnectionServer replaces that loop (httplib's
// virtual process_and_close_socket) with its own, which reads through a stream that enforces
//  - an overall deadline for the request line and headers, and another for the body, however the
//    bytes trickle in: a miss answers 408 and closes the connection (within them a client may
//    pause as it likes: no per-recv timeout applies while a request is read);
//  - a cap on the bytes of the request line plus headers (and httplib's per-line limit): over it
//    answers 431 and closes;
// and drainConnections(), which shuts down every connection that is not running a handler (idle
// keep-alive, still sending its request), so no client can hold the process after SIGTERM, while
// requests whose handlers run (generations, streams) finish first.
#pragma once

#include "runtime/serve/api_error.h"

#include <httplib.h>

#include <chrono>
#include <functional>
#include <memory>

namespace kiln::rt::serve {

struct ConnectionLimits {
  std::chrono::milliseconds headerTimeout{30000}; // request line + headers, from the first byte
  std::chrono::milliseconds bodyTimeout{60000};   // the body, from the end of the headers
  size_t maxHeaderBytes = 32u << 10;              // request line + headers
};

// Why reading the request failed, when it did.
enum class RequestFailure {
  kNone,
  kHeaderTimeout,   // 408
  kBodyTimeout,     // 408
  kHeadersTooLarge, // 431
  kDrained,         // drain() closed the connection mid-request: 503 (the write fails)
  kClientClosed,    // the client closed or reset the connection mid-request: no one to answer,
                    // so no response is counted
};

// The error a request whose reading failed gets.
ApiError requestReadError(RequestFailure failure, const ConnectionLimits &limits);

class ConnectionRegistry;

class ConnectionServer : public httplib::Server {
public:
  ConnectionServer();
  ~ConnectionServer() override;

  // Call before listening.
  void setLimits(const ConnectionLimits &limits) { limits_ = limits; }
  const ConnectionLimits &limits() const { return limits_; }
  // Shuts down every connection that is idle or still sending its request; the ones running a
  // handler close once their response is written. Connections accepted later close unserved.
  // Safe from any thread.
  void drainConnections();

  // Why reading the calling thread's current request failed; kNone off a connection thread.
  static RequestFailure currentFailure();
  // The calling thread's request is read and its handler runs: drain lets it finish. Handlers
  // call this first.
  static void markHandling();

  // Called with the status of each response the server writes itself (408/431 before httplib
  // parsed a request line), for the metrics.
  std::function<void(int status)> countResponse;

private:
  // httplib's accept loop calls this (virtually) on a pool thread for each connection.
  bool process_and_close_socket(socket_t sock) override;

  ConnectionLimits limits_;
  std::unique_ptr<ConnectionRegistry> registry_;
};

} // namespace kiln::rt::serve
