// Raw loopback clients for the server's slow-client tests: one that sends exactly the bytes a test
// gives and reads what comes back, and one that drips a request a byte at a time until the server
// closes the connection. Every wait has a 30 s failure guard.
#pragma once

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <string_view>
#include <thread>

namespace kiln::rt::serve::testing {

inline constexpr std::chrono::seconds kFailureGuard{30};

class RawClient {
public:
  explicit RawClient(int port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) == 0;
    timeval guard{static_cast<time_t>(kFailureGuard.count()), 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &guard, sizeof(guard));
  }
  ~RawClient() { ::close(fd_); }
  RawClient(const RawClient &) = delete;
  RawClient &operator=(const RawClient &) = delete;

  bool connected() const { return connected_; }
  bool send(std::string_view bytes) {
    while (!bytes.empty()) {
      ssize_t sent = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (sent <= 0)
        return false;
      bytes.remove_prefix(static_cast<size_t>(sent));
    }
    return true;
  }
  // Everything until the server closes the connection; `closed` says whether it did (false: the
  // failure guard passed, or the connection broke).
  std::string readToClose(bool &closed) {
    std::string got;
    char buffer[4096];
    for (;;) {
      ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
      if (n <= 0) {
        closed = n == 0;
        return got;
      }
      got.append(buffer, static_cast<size_t>(n));
    }
  }
  // One response whose body has a Content-Length (all kiln's non-streaming answers); "" when the
  // connection ends first.
  std::string readResponse() {
    std::string got;
    char byte;
    while (got.find("\r\n\r\n") == std::string::npos) {
      if (::recv(fd_, &byte, 1, 0) != 1)
        return "";
      got += byte;
    }
    size_t at = got.find("Content-Length: ");
    size_t length = at == std::string::npos ? 0 : std::stoul(got.substr(at + 16));
    std::string body(length, '\0');
    for (size_t done = 0; done < length;) {
      ssize_t n = ::recv(fd_, body.data() + done, length - done, 0);
      if (n <= 0)
        return "";
      done += static_cast<size_t>(n);
    }
    return got + body;
  }

private:
  int fd_;
  bool connected_ = false;
};

// Sends `preamble` (whole requests, whose responses it reads: proof that a server thread serves
// this connection), then `start`, then one 'a' every `interval` from a thread of its own until a
// send fails or the test reads the server's answer.
class Dripper {
public:
  Dripper(int port, const std::string &preamble, const std::string &start,
          std::chrono::milliseconds interval = std::chrono::milliseconds(20))
      : client_(port) {
    EXPECT_TRUE(client_.connected());
    if (!preamble.empty()) {
      EXPECT_TRUE(client_.send(preamble));
      EXPECT_NE(client_.readResponse().find("HTTP/1.1 200 "), std::string::npos);
    }
    EXPECT_TRUE(client_.send(start));
    thread_ = std::thread([this, interval] {
      while (!stop_.load() && client_.send("a"))
        std::this_thread::sleep_for(interval);
    });
  }
  ~Dripper() { stop(); }

  // What the server answered before it closed the connection; `closed` as in readToClose.
  std::string answer(bool &closed) {
    std::string got = client_.readToClose(closed);
    stop();
    return got;
  }
  void stop() {
    stop_.store(true);
    if (thread_.joinable())
      thread_.join();
  }

private:
  RawClient client_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// A request line and headers that never end: a dripped header value.
inline const std::string kDrippedHeaders = "GET /ping HTTP/1.1\r\nHost: x\r\nX-Slow: ";
inline const std::string kPing = "GET /ping HTTP/1.1\r\nHost: x\r\n\r\n";

} // namespace kiln::rt::serve::testing
