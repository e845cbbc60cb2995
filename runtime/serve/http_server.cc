#include "runtime/serve/http_server.h"

#include "runtime/serve/api_key.h"
#include "runtime/serve/connection_server.h"
#include "runtime/serve/routes.h"
#include "runtime/serve/thread_pool.h"

#include <csignal>
#include <mutex>
#include <regex>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

namespace kiln::rt::serve {

struct HttpServer::Impl {
  // A registered route, for 405's Allow header.
  struct Route {
    std::string method;
    std::regex path;
  };

  HttpServerConfig config;
  ConnectionServer server;
  RouteContext ctx;
  std::vector<Route> routes;
  std::atomic<int> listenFd{-1};
  std::once_flag drainOnce;

  void route(const std::string &method, const std::string &path, httplib::Server::Handler handler);
  void registerRoutes();
  void registerGeneration();
  std::string allowedMethods(const std::string &path) const;
  void handleError(const httplib::Request &req, httplib::Response &res);
  bool authorized(const httplib::Request &req, httplib::Response &res, ErrorStyle style);
  httplib::Server::Handler guard(ErrorStyle style,
                                 void (*route)(RouteContext &, const httplib::Request &,
                                               httplib::Response &));
  void handleMetrics(httplib::Response &res);
  void handleException(const httplib::Request &req, httplib::Response &res,
                       std::exception_ptr thrown);
};

HttpServer::HttpServer(HttpServerConfig config) : impl_(std::make_unique<Impl>()) {
  impl_->config = std::move(config);
  impl_->ctx.maxBodyBytes = impl_->config.maxBodyBytes;
  impl_->ctx.sageMakerStreamFormat = impl_->config.sageMakerStreamFormat;
  impl_->ctx.invocationOutput = impl_->config.invocationOutput;
  impl_->ctx.admission = std::make_unique<Admission>(INT64_MAX);
  impl_->registerRoutes();
}

HttpServer::~HttpServer() = default;

bool HttpServer::Impl::authorized(const httplib::Request &req, httplib::Response &res,
                                  ErrorStyle style) {
  if (config.apiKey.empty() || bearerMatches(req.get_header_value("Authorization"), config.apiKey))
    return true;
  ApiError error;
  error.httpStatus = 401;
  error.type = "authentication_error";
  error.code = "invalid_api_key";
  error.message = "a valid API key is required: send the header 'Authorization: Bearer <key>'";
  res.set_header("WWW-Authenticate", "Bearer");
  sendError(res, error, style);
  return false;
}

httplib::Server::Handler HttpServer::Impl::guard(
    ErrorStyle style, void (*route)(RouteContext &, const httplib::Request &, httplib::Response &)) {
  return [this, style, route](const httplib::Request &req, httplib::Response &res) {
    if (authorized(req, res, style))
      route(ctx, req, res);
  };
}

void HttpServer::Impl::handleMetrics(httplib::Response &res) {
  ServeModel *model = ctx.model.load();
  MetricsSnapshot engine = model ? model->engine().metrics() : MetricsSnapshot{};
  ServerMetricsSnapshot server = ctx.metrics.snapshot();
  server.inFlight = ctx.admission->inFlight();
  res.set_content(renderPrometheus(engine, server, model ? model->name() : ""),
                  "text/plain; version=0.0.4; charset=utf-8");
}

namespace {

std::string describeException(std::exception_ptr thrown) {
  try {
    std::rethrow_exception(thrown);
  } catch (const std::exception &e) {
    return e.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

} // namespace

// Without this handler httplib answers a throwing handler with a 500 whose EXCEPTION_WHAT header
// carries the exception's text to the client. Whatever the handler had set is dropped.
void HttpServer::Impl::handleException(const httplib::Request &req, httplib::Response &res,
                                       std::exception_ptr thrown) {
  if (config.log)
    config.log("internal error answering " + req.method + " " + req.path + ": " +
               describeException(thrown));
  res = httplib::Response();
  bool tgi = req.path == "/generate" || req.path == "/generate_stream" ||
             req.path == "/invocations" || req.path == "/" || req.path == "/info";
  sendError(res, unexpectedServerError(), tgi ? ErrorStyle::kTgi : ErrorStyle::kOpenAi);
}

// Registers a GET or POST route. Every handler first tells the connection its request is read,
// so drain lets it finish.
void HttpServer::Impl::route(const std::string &method, const std::string &path,
                             httplib::Server::Handler handler) {
  auto marked = [handler = std::move(handler)](const httplib::Request &req,
                                               httplib::Response &res) {
    ConnectionServer::markHandling();
    handler(req, res);
  };
  if (method == "GET")
    server.Get(path, std::move(marked));
  else
    server.Post(path, std::move(marked));
  routes.push_back({method, std::regex(path)});
}

void HttpServer::Impl::registerGeneration() {
  route("POST", "/v1/completions", guard(ErrorStyle::kOpenAi, handleCompletions));
  route("POST", "/v1/chat/completions", guard(ErrorStyle::kOpenAi, handleChatCompletions));
  route("GET", "/v1/models", guard(ErrorStyle::kOpenAi, handleModels));
  // The id may hold '/' ("org/model"), as served names copied from hub ids do.
  route("GET", R"(/v1/models/(.+))", guard(ErrorStyle::kOpenAi, handleModel));
  route("POST", "/generate", guard(ErrorStyle::kTgi, handleTgiGenerate));
  route("POST", "/generate_stream", guard(ErrorStyle::kTgi, handleTgiGenerateStream));
  route("POST", "/", guard(ErrorStyle::kTgi, handleTgiCompat));
  route("GET", "/info", guard(ErrorStyle::kTgi, handleTgiInfo));
  route("POST", "/invocations", guard(ErrorStyle::kTgi, handleInvocations));
  route("POST", "/v1/embeddings", guard(ErrorStyle::kOpenAi, handleEmbeddings));
  route("POST", "/embed", guard(ErrorStyle::kTgi, handleTeiEmbed));
}

// "GET, HEAD" (httplib answers HEAD from the GET handler), "POST", ...; "" for an unknown path.
std::string HttpServer::Impl::allowedMethods(const std::string &path) const {
  std::string allowed;
  for (const Route &r : routes) {
    std::string methods = r.method == "GET" ? "GET, HEAD" : r.method;
    if (std::regex_match(path, r.path) && allowed.find(methods) == std::string::npos)
      allowed += (allowed.empty() ? "" : ", ") + methods;
  }
  return allowed;
}

// httplib calls this for every status >= 400 before writing it.
void HttpServer::Impl::handleError(const httplib::Request &req, httplib::Response &res) {
  RequestFailure failure = ConnectionServer::currentFailure();
  if (failure != RequestFailure::kNone) {
    // httplib answers a request it could not finish reading with a bare 400; say why instead.
    sendError(res, requestReadError(failure, server.limits()), ErrorStyle::kOpenAi);
    return;
  }
  if (!res.body.empty())
    return;
  ApiError error;
  error.httpStatus = res.status;
  error.type = res.status == 404 ? "NotFoundError" : "invalid_request_error";
  error.message = res.status == 404   ? "no route for " + req.method + " " + req.path
                  : res.status == 413 ? "the request body is over the size limit"
                                      : "the request could not be handled";
  std::string allowed = res.status == 404 ? allowedMethods(req.path) : "";
  if (!allowed.empty()) {
    error.httpStatus = 405;
    error.type = "invalid_request_error";
    error.message = req.path + " does not take " + req.method + "; it takes " + allowed;
    res.set_header("Allow", allowed);
  }
  sendError(res, error, ErrorStyle::kOpenAi);
}

void HttpServer::Impl::registerRoutes() {
  registerGeneration();
  // Health endpoints stay open without a key: load balancers and SageMaker probe them.
  route("GET", "/ping", [this](const httplib::Request &, httplib::Response &res) {
    bool ready = ctx.model.load() && !ctx.draining.load();
    res.status = ready ? 200 : 503;
    res.set_content(ready ? "{\"status\":\"healthy\"}" : "{\"status\":\"loading\"}",
                    "application/json");
  });
  route("GET", "/health", [this](const httplib::Request &, httplib::Response &res) {
    res.status = ctx.model.load() && !ctx.draining.load() ? 200 : 503;
  });
  route("GET", "/metrics", [this](const httplib::Request &req, httplib::Response &res) {
    if (authorized(req, res, ErrorStyle::kOpenAi))
      handleMetrics(res);
  });
  server.set_error_handler(
      [this](const httplib::Request &req, httplib::Response &res) { handleError(req, res); });
  server.set_exception_handler(
      [this](const httplib::Request &req, httplib::Response &res, std::exception_ptr thrown) {
        handleException(req, res, thrown);
      });
  // After a failed read, and while draining, the connection closes after this response; httplib
  // chose its Connection / Keep-Alive headers without knowing.
  server.set_post_routing_handler([this](const httplib::Request &, httplib::Response &res) {
    RequestFailure failure = ConnectionServer::currentFailure();
    if (failure != RequestFailure::kNone || ctx.draining.load()) {
      res.headers.erase("Connection");
      res.headers.erase("Keep-Alive");
      res.set_header("Connection", "close");
    }
    if (failure != RequestFailure::kClientClosed) // its client is gone: nothing is sent
      ctx.metrics.countResponse(res.status);
  });
  server.countResponse = [this](int status) { ctx.metrics.countResponse(status); };
}

Result<int> HttpServer::bind() {
  Impl &impl = *impl_;
  impl.server.set_tcp_nodelay(true); // small SSE chunks must not wait for Nagle
  impl.server.set_payload_max_length(impl.config.maxBodyBytes);
  impl.server.set_keep_alive_timeout(impl.config.keepAliveSeconds);
  impl.server.setLimits(
      {impl.config.headerTimeout, impl.config.bodyTimeout, impl.config.maxHeaderBytes});
  // httplib's listen backlog is a compile-time 5, too small for a burst of clients; the socket
  // options hook is the one place that sees the listening socket, so remember it and re-listen.
  impl.server.set_socket_options([&impl](int fd) {
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    impl.listenFd.store(fd);
  });
  int port = impl.config.port;
  bool ok = port == 0 ? (port = impl.server.bind_to_any_port(impl.config.host)) > 0
                      : impl.server.bind_to_port(impl.config.host, port);
  if (!ok)
    return unavailable("cannot listen on " + impl.config.host + ":" +
                       std::to_string(impl.config.port) + " (--host/--port): in use or not "
                                                          "a local address");
  if (impl.listenFd.load() >= 0)
    ::listen(impl.listenFd.load(), impl.config.listenBacklog);
  return port;
}

void HttpServer::setModel(ServeModel *model) {
  Impl &impl = *impl_;
  int64_t limit = impl.config.maxConcurrentRequests > 0
                      ? impl.config.maxConcurrentRequests
                      : model->engine().limits().maxBatch + impl.config.maxWaiting;
  impl.ctx.admission = std::make_unique<Admission>(limit);
  impl.ctx.model.store(model);
}

Status HttpServer::serve() {
  Impl &impl = *impl_;
  std::signal(SIGPIPE, SIG_IGN); // a vanished client must fail a write, not kill the server
  size_t threads = impl.config.httpThreads > 0 ? static_cast<size_t>(impl.config.httpThreads)
                                                : kDefaultMaxHttpThreads;
  impl.server.new_task_queue = [threads] { return new GrowingThreadPool(threads); };
  if (!impl.server.listen_after_bind() && !impl.ctx.draining.load())
    return unavailable("the HTTP server stopped accepting connections unexpectedly");
  return okStatus();
}

void HttpServer::drain() {
  Impl &impl = *impl_;
  std::call_once(impl.drainOnce, [&impl] {
    impl.ctx.draining.store(true);
    // Wakes accept() with an error: httplib's accept loop ends, then it joins its pool, which
    // waits for every request in flight (streams included) to finish. Connections that run no
    // handler (idle keep-alive, a slow client still sending) close now, or they would hold it.
    int fd = impl.listenFd.load();
    if (fd >= 0)
      ::shutdown(fd, SHUT_RDWR);
    impl.server.drainConnections();
  });
}

bool HttpServer::draining() const { return impl_->ctx.draining.load(); }

} // namespace kiln::rt::serve
