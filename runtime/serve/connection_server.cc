#include "runtime/serve/connection_server.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <unordered_set>

namespace kiln::rt::serve {
namespace {

using Clock = std::chrono::steady_clock;

// After a 408/431 the client may still be sending; how long its bytes are read and dropped before
// the socket closes (see lingerClose).
constexpr std::chrono::milliseconds kLinger{1000};

enum class Phase {
  kIdle,     // waiting for a request (keep-alive), or lingering before the close
  kHeaders,  // reading the request line and headers
  kBody,     // reading the body
  kHandling, // a handler runs or the response is written: drain lets it finish
};

// One accepted socket, on the pool thread that serves it.
struct Connection {
  Connection(int fd, ConnectionRegistry &registry, const ConnectionLimits &limits)
      : fd(fd), registry(registry), limits(limits) {}

  const int fd;
  ConnectionRegistry &registry;
  const ConnectionLimits &limits;
  // Written under the registry's mutex by this connection's thread only; drain reads them.
  Phase phase = Phase::kIdle;
  bool shutByDrain = false;
  // This connection's thread only.
  Clock::time_point deadline;
  size_t headerBytes = 0;
  size_t lineBytes = 0;
  bool requestLineRead = false;
  RequestFailure failure = RequestFailure::kNone;
};

thread_local Connection *tConnection = nullptr;

int pollOne(int fd, short events, std::chrono::milliseconds wait) {
  pollfd p{fd, events, 0};
  int timeout = static_cast<int>(std::max<int64_t>(0, wait.count()));
  int ready;
  do {
    ready = ::poll(&p, 1, timeout);
  } while (ready < 0 && errno == EINTR);
  return ready;
}

std::chrono::milliseconds roundUp(Clock::duration d) {
  return std::chrono::ceil<std::chrono::milliseconds>(d);
}

std::string describe(std::chrono::milliseconds d) {
  return d.count() % 1000 == 0 ? std::to_string(d.count() / 1000) + " s"
                               : std::to_string(d.count()) + " ms";
}

} // namespace

// The live connections, for drain; guards their phases.
class ConnectionRegistry {
public:
  // False once draining: a connection accepted before the drain but served after it closes.
  bool add(Connection &c) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (draining_)
      return false;
    live_.insert(&c);
    return true;
  }
  void remove(Connection &c) {
    std::lock_guard<std::mutex> lock(mutex_);
    live_.erase(&c);
  }
  // False when the connection became idle during a drain: it should close now.
  bool enter(Connection &c, Phase phase) {
    std::lock_guard<std::mutex> lock(mutex_);
    c.phase = phase;
    return !(draining_ && phase == Phase::kIdle);
  }
  bool shutByDrain(const Connection &c) {
    std::lock_guard<std::mutex> lock(mutex_);
    return c.shutByDrain;
  }
  bool draining() {
    std::lock_guard<std::mutex> lock(mutex_);
    return draining_;
  }
  // Shutting a socket down wakes its thread from poll/recv with end-of-file; the fd stays open
  // (only remove() followed by close() ends it), so it cannot be reused meanwhile.
  void drain() {
    std::lock_guard<std::mutex> lock(mutex_);
    draining_ = true;
    for (Connection *c : live_) {
      if (c->phase == Phase::kHandling || c->shutByDrain)
        continue;
      ::shutdown(c->fd, SHUT_RDWR);
      c->shutByDrain = true;
    }
  }

private:
  std::mutex mutex_;
  std::unordered_set<Connection *> live_;
  bool draining_ = false;
};

namespace {

// httplib's view of the socket: buffered reads that fail past the phase's deadline or the header
// cap (recording why in the connection), and writes like httplib's own socket stream (each checks
// the peer is still there, which is how streams notice a client's FIN).
class DeadlineStream : public httplib::Stream {
public:
  DeadlineStream(Connection &c, std::chrono::milliseconds writeTimeout)
      : c_(c), writeTimeout_(writeTimeout) {}

  bool is_readable() const override { return begin_ < end_ || waitReadable(); }
  bool is_writable() const override {
    return pollOne(c_.fd, POLLOUT, writeTimeout_) > 0 && peerOpen();
  }
  ssize_t read(char *ptr, size_t size) override;
  ssize_t write(const char *ptr, size_t size) override;
  using httplib::Stream::write;
  void get_remote_ip_and_port(std::string &ip, int &port) const override {
    endpoint(true, ip, port);
  }
  void get_local_ip_and_port(std::string &ip, int &port) const override {
    endpoint(false, ip, port);
  }
  socket_t socket() const override { return c_.fd; }

  // Waits for the next request's first byte (false: keep-alive timeout, close, drain).
  bool awaitRequest(std::chrono::milliseconds keepAlive) const {
    return begin_ < end_ || pollOne(c_.fd, POLLIN, keepAlive) > 0;
  }
  // Whether httplib tried to answer the current request (a failed write counts: the response
  // was counted, and a second one would not get through either).
  bool answered() const { return answered_; }
  void startRequest() { answered_ = false; }

private:
  bool readingRequest() const { return c_.phase == Phase::kHeaders || c_.phase == Phase::kBody; }
  RequestFailure timeout() const {
    return c_.phase == Phase::kHeaders ? RequestFailure::kHeaderTimeout
                                       : RequestFailure::kBodyTimeout;
  }
  bool waitReadable() const;
  bool countHeaderBytes(const char *data, size_t n);
  bool peerOpen() const;
  void endpoint(bool peer, std::string &ip, int &port) const;

  Connection &c_;
  std::chrono::milliseconds writeTimeout_;
  std::array<char, 16384> buffer_;
  size_t begin_ = 0, end_ = 0;
  bool answered_ = false;
};

// While a request is read, only its deadline bounds the wait: a client may pause, but the whole
// request must arrive in time. Otherwise (no caller in kiln reads then) httplib's 5 s applies.
bool DeadlineStream::waitReadable() const {
  std::chrono::milliseconds wait{CPPHTTPLIB_READ_TIMEOUT_SECOND * 1000};
  if (readingRequest()) {
    Clock::duration left = c_.deadline - Clock::now();
    if (left <= Clock::duration::zero()) {
      c_.failure = timeout();
      return false;
    }
    wait = roundUp(left);
  }
  int ready = pollOne(c_.fd, POLLIN, wait);
  if (ready == 0 && readingRequest())
    c_.failure = timeout();
  return ready > 0;
}

// The request line may be as long as httplib allows (it answers 414 beyond); each header line
// is held to httplib's own per-line limit, which would otherwise answer a bare 400.
bool DeadlineStream::countHeaderBytes(const char *data, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    ++c_.headerBytes;
    ++c_.lineBytes;
    if (c_.headerBytes > c_.limits.maxHeaderBytes ||
        (c_.requestLineRead && c_.lineBytes > CPPHTTPLIB_HEADER_MAX_LENGTH)) {
      c_.failure = RequestFailure::kHeadersTooLarge;
      return false;
    }
    if (data[i] == '\n') {
      c_.requestLineRead = true;
      c_.lineBytes = 0;
    }
  }
  return true;
}

ssize_t DeadlineStream::read(char *ptr, size_t size) {
  if (c_.failure != RequestFailure::kNone)
    return -1;
  if (begin_ == end_) {
    if (!waitReadable())
      return -1;
    ssize_t got;
    do {
      got = ::recv(c_.fd, buffer_.data(), buffer_.size(), 0);
    } while (got < 0 && errno == EINTR);
    if (got <= 0) {
      // End of file or a reset while a request is read: httplib would answer (and count) a 400
      // that no one receives.
      if (!readingRequest())
        return got;
      bool drained = c_.registry.shutByDrain(c_);
      c_.failure = drained ? RequestFailure::kDrained : RequestFailure::kClientClosed;
      return drained ? -1 : got;
    }
    begin_ = 0;
    end_ = static_cast<size_t>(got);
  }
  size_t n = std::min(size, end_ - begin_);
  if (c_.phase == Phase::kHeaders && !countHeaderBytes(buffer_.data() + begin_, n))
    return -1;
  std::memcpy(ptr, buffer_.data() + begin_, n);
  begin_ += n;
  return static_cast<ssize_t>(n);
}

ssize_t DeadlineStream::write(const char *ptr, size_t size) {
  answered_ = true;
  if (!is_writable())
    return -1;
  ssize_t sent;
  do {
    sent = ::send(c_.fd, ptr, size, MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  return sent;
}

// Readable with nothing to peek means the peer sent its FIN (or the connection broke).
bool DeadlineStream::peerOpen() const {
  if (pollOne(c_.fd, POLLIN, std::chrono::milliseconds(0)) == 0)
    return true;
  char byte;
  return ::recv(c_.fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
}

void DeadlineStream::endpoint(bool peer, std::string &ip, int &port) const {
  sockaddr_storage addr{};
  socklen_t length = sizeof(addr);
  auto *raw = reinterpret_cast<sockaddr *>(&addr);
  if ((peer ? ::getpeername(c_.fd, raw, &length) : ::getsockname(c_.fd, raw, &length)) != 0)
    return;
  char host[NI_MAXHOST], service[NI_MAXSERV];
  if (::getnameinfo(raw, length, host, sizeof(host), service, sizeof(service),
                    NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
    ip = host;
    port = std::atoi(service);
  }
}

// For a request that failed before httplib parsed its request line (httplib answers nothing
// then): the whole response, best effort.
void writeErrorResponse(int fd, const ApiError &error, std::chrono::milliseconds writeTimeout) {
  std::string body = openAiErrorBody(error);
  std::string text =
      "HTTP/1.1 " + std::to_string(error.httpStatus) +
      (error.httpStatus == 408 ? " Request Timeout" : " Request Header Fields Too Large") +
      "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\nConnection: close\r\n\r\n" + body;
  size_t done = 0;
  while (done < text.size() && pollOne(fd, POLLOUT, writeTimeout) > 0) {
    ssize_t sent = ::send(fd, text.data() + done, text.size() - done, MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR)
      continue;
    if (sent <= 0)
      return;
    done += static_cast<size_t>(sent);
  }
}

// Closing a socket with unread bytes makes the kernel answer with a reset, which can destroy the
// error response before the client reads it: so half-close, then drop what the client still
// sends until it closes, for at most kLinger.
void lingerClose(int fd) {
  ::shutdown(fd, SHUT_WR);
  std::array<char, 4096> sink;
  Clock::time_point end = Clock::now() + kLinger;
  for (Clock::duration left = kLinger; left > Clock::duration::zero(); left = end - Clock::now()) {
    if (pollOne(fd, POLLIN, roundUp(left)) <= 0 || ::recv(fd, sink.data(), sink.size(), 0) <= 0)
      return;
  }
}

// Answers (when httplib did not) and closes a connection whose request failed to arrive.
void closeFailed(Connection &c, const DeadlineStream &stream,
                 std::chrono::milliseconds writeTimeout,
                 const std::function<void(int)> &countResponse) {
  if (!stream.answered()) {
    ApiError error = requestReadError(c.failure, c.limits);
    writeErrorResponse(c.fd, error, writeTimeout);
    if (countResponse)
      countResponse(error.httpStatus);
  }
  if (c.registry.enter(c, Phase::kIdle)) // draining: close at once
    lingerClose(c.fd);
}

} // namespace

ApiError requestReadError(RequestFailure failure, const ConnectionLimits &limits) {
  ApiError error;
  switch (failure) {
  case RequestFailure::kHeaderTimeout:
    error.httpStatus = 408;
    error.message = "the request line and headers did not arrive within " +
                    describe(limits.headerTimeout) + "; the connection is closed";
    break;
  case RequestFailure::kBodyTimeout:
    error.httpStatus = 408;
    error.message = "the request body did not arrive within " + describe(limits.bodyTimeout) +
                    " of the headers; the connection is closed";
    break;
  case RequestFailure::kHeadersTooLarge:
    error.httpStatus = 431;
    error.message = "the request line and headers are over " +
                    std::to_string(limits.maxHeaderBytes) + " bytes, or a header line is over " +
                    std::to_string(CPPHTTPLIB_HEADER_MAX_LENGTH) + "; the connection is closed";
    break;
  case RequestFailure::kClientClosed:
    error.httpStatus = 400;
    error.message = "the client closed the connection before its request arrived whole";
    break;
  case RequestFailure::kDrained:
  case RequestFailure::kNone:
    error = serverShuttingDown();
    break;
  }
  return error;
}

ConnectionServer::ConnectionServer() : registry_(std::make_unique<ConnectionRegistry>()) {}

ConnectionServer::~ConnectionServer() = default;

void ConnectionServer::drainConnections() {
  registry_->drain();
}

RequestFailure ConnectionServer::currentFailure() {
  return tConnection ? tConnection->failure : RequestFailure::kNone;
}

void ConnectionServer::markHandling() {
  if (tConnection)
    tConnection->registry.enter(*tConnection, Phase::kHandling);
}

// httplib's keep-alive loop (detail::process_server_socket), reading through DeadlineStream.
bool ConnectionServer::process_and_close_socket(socket_t sock) {
  ConnectionRegistry &registry = *registry_;
  Connection conn(sock, registry, limits_);
  if (!registry.add(conn)) {
    ::close(sock);
    return false;
  }
  tConnection = &conn;
  const std::chrono::milliseconds writeTimeout{write_timeout_sec_ * 1000 +
                                               write_timeout_usec_ / 1000};
  DeadlineStream stream(conn, writeTimeout);
  bool ok = false;
  for (size_t left = keep_alive_max_count_; left > 0; --left) {
    if (!stream.awaitRequest(std::chrono::seconds(keep_alive_timeout_sec_)))
      break;
    conn.deadline = Clock::now() + limits_.headerTimeout;
    conn.headerBytes = conn.lineBytes = 0;
    conn.requestLineRead = false;
    stream.startRequest();
    registry.enter(conn, Phase::kHeaders);
    bool clientCloses = false;
    ok = process_request(stream, left == 1 || registry.draining(), clientCloses,
                         [&conn](httplib::Request &) {
                           conn.deadline = Clock::now() + conn.limits.bodyTimeout;
                           conn.registry.enter(conn, Phase::kBody);
                         });
    if (conn.failure != RequestFailure::kNone || !ok || clientCloses ||
        !registry.enter(conn, Phase::kIdle))
      break;
  }
  if (conn.failure != RequestFailure::kNone && conn.failure != RequestFailure::kDrained &&
      conn.failure != RequestFailure::kClientClosed)
    closeFailed(conn, stream, writeTimeout, countResponse);
  registry.remove(conn);
  tConnection = nullptr;
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ok;
}

} // namespace kiln::rt::serve
