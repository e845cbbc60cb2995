#include "runtime/store/s3_client.h"

#include "runtime/base/sha256.h"

#include <curl/curl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

namespace kiln::rt {

struct S3Client::Request {
  std::string method = "GET"; // GET | PUT | POST | DELETE
  std::string bucket;
  std::string key;
  std::string query; // canonical: parameters sorted, values encoded ("partNumber=1&uploadId=x")
  std::span<const uint8_t> body;
  std::vector<std::string> headers;
  int fd = -1; // GET: successful bodies go here (pwrite) instead of Response::body
  uint64_t fileOffset = 0;
  int64_t expectBytes = -1; // a shorter successful body is a failed (retried) attempt
  ByteCounter *counter = nullptr;
};

struct S3Client::Response {
  long status = 0;
  int64_t contentLength = -1;
  std::string body;
  std::string etag;
  uint64_t bytesToFile = 0;
};

namespace {

void initCurlOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// One handle per thread: curl keeps that thread's connections open between requests.
struct ThreadCurl {
  CURL *handle = nullptr;
  ~ThreadCurl() {
    if (handle)
      curl_easy_cleanup(handle);
  }
};

CURL *threadHandle() {
  thread_local ThreadCurl curl;
  if (!curl.handle) {
    initCurlOnce();
    curl.handle = curl_easy_init();
  } else {
    curl_easy_reset(curl.handle);
  }
  return curl.handle;
}

std::string base64(const unsigned char *data, size_t size) {
  std::string out(4 * ((size + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char *>(out.data()), data, int(size));
  out.resize(n > 0 ? size_t(n) : 0);
  return out;
}

std::string md5Base64(std::span<const uint8_t> bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest, &length, EVP_md5(), nullptr) != 1)
    return "";
  return base64(digest, length);
}

struct TransferState {
  const S3Client::Request *request;
  S3Client::Response *response;
  CURL *curl;
  size_t readPos = 0;
  bool writeFailed = false;
  const std::atomic<bool> *cancelled;
  uint64_t *counted; // bytes this attempt added to request->counter
};

size_t readBody(char *buffer, size_t size, size_t count, void *user) {
  auto *state = static_cast<TransferState *>(user);
  std::span<const uint8_t> body = state->request->body;
  size_t n = std::min(size * count, body.size() - state->readPos);
  std::memcpy(buffer, body.data() + state->readPos, n);
  state->readPos += n;
  if (state->request->counter) {
    *state->request->counter += n;
    *state->counted += n;
  }
  return n;
}

size_t writeBody(char *data, size_t size, size_t count, void *user) {
  auto *state = static_cast<TransferState *>(user);
  size_t n = size * count;
  long status = 0;
  curl_easy_getinfo(state->curl, CURLINFO_RESPONSE_CODE, &status);
  const S3Client::Request &request = *state->request;
  if (request.fd < 0 || status < 200 || status >= 300) {
    state->response->body.append(data, n);
    return n;
  }
  uint64_t at = request.fileOffset + state->response->bytesToFile;
  if (request.expectBytes >= 0 &&
      state->response->bytesToFile + n > static_cast<uint64_t>(request.expectBytes)) {
    state->writeFailed = true; // more bytes than asked for: never write past our range
    return 0;
  }
  size_t done = 0;
  while (done < n) {
    ssize_t w = ::pwrite(request.fd, data + done, n - done, off_t(at + done));
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0) {
      state->writeFailed = true;
      return 0;
    }
    done += size_t(w);
  }
  state->response->bytesToFile += n;
  if (request.counter) {
    *request.counter += n;
    *state->counted += n;
  }
  return n;
}

size_t readHeader(char *data, size_t size, size_t count, void *user) {
  auto *state = static_cast<TransferState *>(user);
  std::string line(data, size * count);
  if (line.size() > 5 && strncasecmp(line.c_str(), "etag:", 5) == 0) {
    std::string value = line.substr(5);
    size_t b = value.find_first_not_of(" \t"), e = value.find_last_not_of(" \t\r\n");
    state->response->etag = b == std::string::npos ? "" : value.substr(b, e - b + 1);
  }
  return size * count;
}

int onProgress(void *user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto *state = static_cast<TransferState *>(user);
  return state->cancelled->load() ? 1 : 0;
}

bool retryableCurlError(CURLcode code) {
  switch (code) {
  case CURLE_URL_MALFORMAT:
  case CURLE_UNSUPPORTED_PROTOCOL:
  case CURLE_ABORTED_BY_CALLBACK:
  case CURLE_WRITE_ERROR:
  case CURLE_OUT_OF_MEMORY:
  case CURLE_BAD_FUNCTION_ARGUMENT:
    return false;
  default:
    return true;
  }
}

bool retryableHttp(long status, const std::string &code) {
  return status >= 500 || status == 429 || code == "RequestTimeout" || code == "SlowDown";
}

} // namespace

std::string uriEncode(const std::string &text, bool encodeSlash) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
        (c == '/' && !encodeSlash)) {
      out.push_back(char(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

std::string S3Location::key(const std::string &name) const {
  if (prefix.empty())
    return name;
  return name.empty() ? prefix : prefix + "/" + name;
}

std::string S3Location::url(const std::string &name) const {
  std::string k = key(name);
  return "s3://" + bucket + (k.empty() ? "" : "/" + k);
}

std::string S3Location::artifactName() const {
  std::string name = prefix.empty() ? bucket : prefix.substr(prefix.rfind('/') + 1);
  for (const char *suffix : {".tar.gz", ".tgz", ".tar"}) {
    std::string s = suffix;
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0)
      return name.substr(0, name.size() - s.size());
  }
  return name;
}

Result<S3Location> parseS3Url(const std::string &url) {
  const std::string kScheme = "s3://";
  if (url.rfind(kScheme, 0) != 0)
    return invalidArgument("'" + url + "' is not an S3 URL: expected s3://BUCKET/PREFIX");
  std::string rest = url.substr(kScheme.size());
  size_t slash = rest.find('/');
  S3Location location;
  location.bucket = rest.substr(0, slash);
  if (location.bucket.empty())
    return invalidArgument("S3 URL '" + url + "' has no bucket: expected s3://BUCKET/PREFIX");
  for (char c : location.bucket)
    if (!(std::islower(static_cast<unsigned char>(c)) ||
          std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '.'))
      return invalidArgument("S3 URL '" + url + "': bucket name '" + location.bucket +
                             "' may hold only lower-case letters, digits, '-' and '.'");
  std::string prefix = slash == std::string::npos ? "" : rest.substr(slash + 1);
  while (!prefix.empty() && prefix.back() == '/')
    prefix.pop_back();
  if (prefix.find("//") != std::string::npos)
    return invalidArgument("S3 URL '" + url + "' has an empty path segment ('//')");
  location.prefix = prefix;
  return location;
}

S3Client::S3Client(AwsConfig config, S3ClientOptions options)
    : config_(std::move(config)), options_(std::move(options)) {
  initCurlOnce();
}

std::string S3Client::objectUrl(const std::string &bucket, const std::string &key) const {
  std::string path = uriEncode(key, /*encodeSlash=*/false);
  // Dotted bucket names break virtual-hosted TLS names; S3-compatible stores want path style.
  if (!config_.endpointUrl.empty())
    return config_.endpointUrl + "/" + bucket + "/" + path;
  if (bucket.find('.') != std::string::npos)
    return "https://s3." + config_.region + ".amazonaws.com/" + bucket + "/" + path;
  return "https://" + bucket + ".s3." + config_.region + ".amazonaws.com/" + path;
}

Result<S3Client::Response> S3Client::attempt(const Request &request, uint64_t &counted) {
  CURL *curl = threadHandle();
  if (!curl)
    return internalError("cannot create a curl handle");
  Response response;
  TransferState state{&request, &response, curl, 0, false, &cancelled_, &counted};
  std::string url = objectUrl(request.bucket, request.key);
  if (!request.query.empty())
    url += "?" + request.query;
  std::string sigv4 = "aws:amz:" + config_.region + ":s3";
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_AWS_SIGV4, sigv4.c_str());
  curl_easy_setopt(curl, CURLOPT_USERNAME, config_.accessKeyId.c_str());
  curl_easy_setopt(curl, CURLOPT_PASSWORD, config_.secretAccessKey.c_str());
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, options_.connectTimeoutSeconds);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, options_.stallTimeoutSeconds);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, writeBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &state);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, readHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &state);
  curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, onProgress);
  curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &state);

  std::vector<std::string> headers = request.headers;
  // The payload hash is signed, so the server can reject a body altered in transit.
  headers.push_back("x-amz-content-sha256: " + sha256Hex(request.body.data(), request.body.size()));
  if (!config_.sessionToken.empty())
    headers.push_back("x-amz-security-token: " + config_.sessionToken);
  // No "Expect:" override: curl 7.88 signs an empty header it then does not send, which breaks
  // the signature. curl's own Expect: 100-continue for large PUTs is added after signing.
  if (request.method == "PUT") {
    if (!request.body.empty()) // a copy's PUT has no body to check
      headers.push_back("Content-MD5: " + md5Base64(request.body));
    curl_easy_setopt(curl, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(curl, CURLOPT_READFUNCTION, readBody);
    curl_easy_setopt(curl, CURLOPT_READDATA, &state);
    curl_easy_setopt(curl, CURLOPT_INFILESIZE_LARGE, curl_off_t(request.body.size()));
  } else if (request.method == "POST") {
    curl_easy_setopt(curl, CURLOPT_POST, 1L);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, request.body.data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(request.body.size()));
  } else if (request.method == "HEAD") {
    curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  } else if (request.method != "GET") {
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, request.method.c_str());
  }
  curl_slist *list = nullptr;
  for (const std::string &header : headers)
    list = curl_slist_append(list, header.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, list);
  CURLcode code = curl_easy_perform(curl);
  curl_slist_free_all(list);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.status);
  curl_off_t length = -1;
  if (curl_easy_getinfo(curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length) == CURLE_OK)
    response.contentLength = length;
  if (cancelled_)
    return cancelled("cancelled: another part of the transfer failed");
  if (state.writeFailed)
    return unavailable(std::string("cannot write the downloaded bytes: ") +
                       (errno ? std::strerror(errno) : "server sent more bytes than requested"));
  if (code != CURLE_OK)
    return Status(retryableCurlError(code) ? StatusCode::kUnavailable : StatusCode::kInternal,
                  curl_easy_strerror(code));
  return response;
}

namespace {

// An object shorter than the range asked for (HTTP 416, or a short complete response).
Status shortObject(const std::string &what, const std::string &detail) {
  return dataLoss("S3 " + what + ": the object is shorter than the bytes asked for (" + detail +
                  "): it was replaced or truncated, or manifest.json lists a larger size than "
                  "what was uploaded; push the artifact again");
}

} // namespace

Result<S3Client::Response> S3Client::perform(const Request &request) {
  std::string what = request.method + " " + "s3://" + request.bucket + "/" + request.key;
  const RetryPolicy &retry = options_.retry;
  std::mt19937_64 rng(std::random_device{}());
  Status last;
  for (int attemptNo = 1; attemptNo <= retry.maxAttempts; ++attemptNo) {
    uint64_t counted = 0;
    Result<Response> response = attempt(request, counted);
    bool retryable = false;
    if (!response.isOk()) {
      if (response.status().code() != StatusCode::kUnavailable)
        return response.status().withContext("S3 " + what);
      last = unavailable(
          response.status().message() +
          (config_.endpointUrl.empty() ? "" : " (endpoint " + config_.endpointUrl + ")"));
      retryable = true;
    } else if (response->status >= 200 && response->status < 300) {
      if (request.expectBytes < 0 || response->bytesToFile == uint64_t(request.expectBytes))
        return response;
      // A complete response (its Content-Length all delivered) that is short: the object holds
      // fewer bytes than asked for, which no retry changes.
      if (response->contentLength >= 0 && response->bytesToFile == uint64_t(response->contentLength))
        return shortObject(what, std::to_string(response->bytesToFile) + " of " +
                                     std::to_string(request.expectBytes) + " bytes sent");
      last = unavailable("connection closed after " + std::to_string(response->bytesToFile) +
                         " of " + std::to_string(request.expectBytes) + " bytes");
      retryable = true;
    } else {
      std::string code = xmlValue(response->body, "Code");
      std::string message = xmlValue(response->body, "Message");
      std::string detail = "HTTP " + std::to_string(response->status) +
                           (code.empty() ? "" : " " + code) +
                           (message.empty() ? "" : ": " + message);
      if (response->status == 403 || response->status == 401)
        return failedPrecondition("S3 " + what + " was refused: " + detail + " (credentials " +
                                  config_.accessKeyId.substr(0, 4) + "... from " +
                                  config_.credentialSource + ", region " + config_.region + ")");
      if (response->status == 404)
        return notFound("S3 " + what + ": " + detail);
      if (response->status == 416)
        return shortObject(what, detail);
      if (!retryableHttp(response->status, code))
        return failedPrecondition("S3 " + what + ": " + detail);
      last = unavailable(detail);
      retryable = true;
    }
    if (request.counter) // the bytes of a failed attempt move again
      *request.counter -= counted;
    if (!retryable || attemptNo == retry.maxAttempts)
      break;
    int64_t backoff =
        std::min<int64_t>(int64_t(retry.initialBackoffMs) << (attemptNo - 1), retry.maxBackoffMs);
    backoff = backoff / 2 + int64_t(rng() % uint64_t(backoff / 2 + 1));
    if (options_.log)
      options_.log("S3 " + what + " failed (" + last.message() + "); retrying in " +
                   std::to_string(backoff) + " ms (attempt " + std::to_string(attemptNo + 1) +
                   " of " + std::to_string(retry.maxAttempts) + ")");
    std::this_thread::sleep_for(std::chrono::milliseconds(backoff));
    if (cancelled_)
      return cancelled("cancelled: another part of the transfer failed");
  }
  return unavailable("S3 " + what + " failed after " + std::to_string(retry.maxAttempts) +
                     " attempt(s): " + last.message());
}

Result<std::string> S3Client::getObject(const std::string &bucket, const std::string &key) {
  Request request;
  request.bucket = bucket;
  request.key = key;
  KILN_ASSIGN_OR_RETURN(Response response, perform(request));
  return std::move(response.body);
}

Result<uint64_t> S3Client::objectSize(const std::string &bucket, const std::string &key) {
  Request request;
  request.method = "HEAD";
  request.bucket = bucket;
  request.key = key;
  KILN_ASSIGN_OR_RETURN(Response response, perform(request));
  if (response.contentLength < 0)
    return dataLoss("S3 HEAD s3://" + bucket + "/" + key + ": no Content-Length in the response");
  return uint64_t(response.contentLength);
}

Status S3Client::getObjectRange(const std::string &bucket, const std::string &key, uint64_t offset,
                                uint64_t length, int fd, uint64_t fileOffset,
                                ByteCounter *counter) {
  if (length == 0)
    return okStatus();
  Request request;
  request.bucket = bucket;
  request.key = key;
  request.fd = fd;
  request.fileOffset = fileOffset;
  request.expectBytes = int64_t(length);
  request.counter = counter;
  request.headers.push_back("Range: bytes=" + std::to_string(offset) + "-" +
                            std::to_string(offset + length - 1));
  KILN_ASSIGN_OR_RETURN(Response response, perform(request));
  if (response.status != 206 && !(response.status == 200 && offset == 0))
    return dataLoss("S3 GET s3://" + bucket + "/" + key + ": the server ignored the byte range");
  return okStatus();
}

Status S3Client::putObject(const std::string &bucket, const std::string &key,
                           std::span<const uint8_t> body, ByteCounter *counter) {
  Request request;
  request.method = "PUT";
  request.bucket = bucket;
  request.key = key;
  request.body = body;
  request.counter = counter;
  request.headers.push_back("Content-Type: application/octet-stream");
  return perform(request).status();
}

Result<std::vector<S3Object>> S3Client::listObjects(const std::string &bucket,
                                                    const std::string &prefix) {
  std::vector<S3Object> objects;
  std::string token;
  do {
    Request request;
    request.bucket = bucket;
    request.query = (token.empty() ? "" : "continuation-token=" + uriEncode(token, true) + "&") +
                    "list-type=2&prefix=" + uriEncode(prefix, true);
    KILN_ASSIGN_OR_RETURN(Response response, perform(request));
    Result<S3ListPage> page = parseListObjectsPage(response.body);
    if (!page.isOk())
      return page.status().withContext("listing s3://" + bucket + "/" + prefix);
    objects.insert(objects.end(), page->objects.begin(), page->objects.end());
    // A server that hands back the token it was given would keep this loop going forever.
    if (!page->continuationToken.empty() && page->continuationToken == token)
      return dataLoss("listing s3://" + bucket + "/" + prefix +
                      ": S3 returned the same continuation token twice");
    token = std::move(page->continuationToken);
  } while (!token.empty());
  return objects;
}

Result<std::string> S3Client::createMultipartUpload(const std::string &bucket,
                                                    const std::string &key) {
  Request request;
  request.method = "POST";
  request.bucket = bucket;
  request.key = key;
  request.query = "uploads=";
  request.headers.push_back("Content-Type: application/octet-stream");
  KILN_ASSIGN_OR_RETURN(Response response, perform(request));
  std::string uploadId = xmlValue(response.body, "UploadId");
  if (uploadId.empty())
    return dataLoss("S3 CreateMultipartUpload s3://" + bucket + "/" + key +
                    ": the response has no UploadId");
  return uploadId;
}

Result<std::string> S3Client::uploadPart(const std::string &bucket, const std::string &key,
                                         const std::string &uploadId, int partNumber,
                                         std::span<const uint8_t> body, ByteCounter *counter) {
  Request request;
  request.method = "PUT";
  request.bucket = bucket;
  request.key = key;
  request.query =
      "partNumber=" + std::to_string(partNumber) + "&uploadId=" + uriEncode(uploadId, true);
  request.body = body;
  request.counter = counter;
  KILN_ASSIGN_OR_RETURN(Response response, perform(request));
  if (response.etag.empty())
    return dataLoss("S3 UploadPart " + std::to_string(partNumber) + " of s3://" + bucket + "/" +
                    key + ": the response has no ETag");
  return response.etag;
}

namespace {

// CompleteMultipartUpload and CopyObject can fail late: HTTP 200 with an <Error> body.
Status lateError(const std::string &body, const std::string &what) {
  if (body.find("<Error>") == std::string::npos)
    return okStatus();
  return unavailable("S3 " + what + ": " + xmlValue(body, "Code") + " " +
                     xmlValue(body, "Message"));
}

} // namespace

Status S3Client::completeMultipartUpload(const std::string &bucket, const std::string &key,
                                         const std::string &uploadId,
                                         const std::vector<std::string> &etags) {
  std::string xml = "<CompleteMultipartUpload>";
  for (size_t i = 0; i < etags.size(); ++i)
    xml += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>" + etags[i] +
           "</ETag></Part>";
  xml += "</CompleteMultipartUpload>";
  Request request;
  request.method = "POST";
  request.bucket = bucket;
  request.key = key;
  request.query = "uploadId=" + uriEncode(uploadId, true);
  request.body = {reinterpret_cast<const uint8_t *>(xml.data()), xml.size()};
  request.headers.push_back("Content-Type: application/xml");
  KILN_ASSIGN_OR_RETURN(Response response, perform(request));
  return lateError(response.body, "CompleteMultipartUpload s3://" + bucket + "/" + key);
}

Status S3Client::abortMultipartUpload(const std::string &bucket, const std::string &key,
                                      const std::string &uploadId) {
  Request request;
  request.method = "DELETE";
  request.bucket = bucket;
  request.key = key;
  request.query = "uploadId=" + uriEncode(uploadId, true);
  return perform(request).status();
}

namespace {

// x-amz-copy-source: the source's bucket and key, percent-encoded like a path.
std::string copySourceHeader(const std::string &bucket, const std::string &key) {
  return "x-amz-copy-source: /" + bucket + "/" + uriEncode(key, /*encodeSlash=*/false);
}

} // namespace

Status S3Client::copyObject(const std::string &bucket, const std::string &fromKey,
                            const std::string &toKey) {
  Request request;
  request.method = "PUT";
  request.bucket = bucket;
  request.key = toKey;
  request.headers.push_back(copySourceHeader(bucket, fromKey));
  KILN_ASSIGN_OR_RETURN(Response response, perform(request));
  return lateError(response.body, "CopyObject s3://" + bucket + "/" + fromKey + " to " + toKey);
}

Result<std::string> S3Client::uploadPartCopy(const std::string &bucket, const std::string &key,
                                             const std::string &uploadId, int partNumber,
                                             const std::string &fromKey, uint64_t offset,
                                             uint64_t length) {
  Request request;
  request.method = "PUT";
  request.bucket = bucket;
  request.key = key;
  request.query =
      "partNumber=" + std::to_string(partNumber) + "&uploadId=" + uriEncode(uploadId, true);
  request.headers.push_back(copySourceHeader(bucket, fromKey));
  request.headers.push_back("x-amz-copy-source-range: bytes=" + std::to_string(offset) + "-" +
                            std::to_string(offset + length - 1));
  KILN_ASSIGN_OR_RETURN(Response response, perform(request));
  std::string etag = xmlValue(response.body, "ETag"); // in the CopyPartResult body
  if (etag.empty())
    return dataLoss("S3 UploadPartCopy " + std::to_string(partNumber) + " of s3://" + bucket +
                    "/" + key + ": the response has no ETag" +
                    (response.body.find("<Error>") != std::string::npos
                         ? " (" + xmlValue(response.body, "Code") + ")"
                         : ""));
  return etag;
}

Status S3Client::deleteObject(const std::string &bucket, const std::string &key) {
  Request request;
  request.method = "DELETE";
  request.bucket = bucket;
  request.key = key;
  return perform(request).status();
}

} // namespace kiln::rt
