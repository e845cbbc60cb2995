// A small S3 client over libcurl: requests are signed with AWS Signature V4 by curl itself
// (CURLOPT_AWS_SIGV4), bodies carry their SHA-256 (x-amz-content-sha256) and MD5 (Content-MD5) so
// the server rejects a corrupted upload, and transient failures (connection errors, timeouts,
// stalls, 5xx, 429 SlowDown) are retried with exponential backoff and jitter.
//
// Thread-safe: every call may run on its own thread (each thread keeps one curl handle, which
// keeps its connections alive between calls).
#pragma once

#include "runtime/base/status.h"
#include "runtime/store/aws_config.h"
#include "runtime/store/s3_xml.h" // S3Object

#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace kiln::rt {

// s3://BUCKET/PREFIX: the prefix never starts or ends with '/'.
struct S3Location {
  std::string bucket;
  std::string prefix;
  // PREFIX/name (or name when the prefix is empty).
  std::string key(const std::string &name) const;
  std::string url(const std::string &name = "") const; // "s3://bucket/prefix/name"
  // The artifact's name: the prefix's last part (the bucket when there is no prefix), without a
  // .tar.gz / .tgz / .tar suffix: "llama.kiln" for s3://b/models/llama.kiln/.
  std::string artifactName() const;
};

// Accepts s3://bucket, s3://bucket/, s3://bucket/a/b/. Errors name the URL and what is wrong.
Result<S3Location> parseS3Url(const std::string &url);

struct RetryPolicy {
  int maxAttempts = 5;        // attempts per request, the first included
  int initialBackoffMs = 200; // doubled after each failure, with jitter
  int maxBackoffMs = 10000;
};

struct S3ClientOptions {
  RetryPolicy retry;
  long connectTimeoutSeconds = 10;
  // A transfer that moves no byte for this long is a failure (and retried).
  long stallTimeoutSeconds = 60;
  // Retry notices ("retrying in 0.4 s, attempt 2 of 5"); default: none.
  std::function<void(const std::string &message)> log;
};

class S3Client {
public:
  S3Client(AwsConfig config, S3ClientOptions options = {});

  const AwsConfig &config() const { return config_; }

  // Bytes moved by a call, for progress; may be called from several threads at once.
  using ByteCounter = std::atomic<uint64_t>;

  Result<std::string> getObject(const std::string &bucket, const std::string &key);
  // HEAD: the object's size in bytes.
  Result<uint64_t> objectSize(const std::string &bucket, const std::string &key);
  // Writes bytes [offset, offset + length) of the object at `fileOffset` of `fd` (pwrite).
  Status getObjectRange(const std::string &bucket, const std::string &key, uint64_t offset,
                        uint64_t length, int fd, uint64_t fileOffset,
                        ByteCounter *counter = nullptr);
  Status putObject(const std::string &bucket, const std::string &key, std::span<const uint8_t> body,
                   ByteCounter *counter = nullptr);
  Result<std::vector<S3Object>> listObjects(const std::string &bucket, const std::string &prefix);

  // Multipart upload: create -> upload parts (any order, in parallel) -> complete with every
  // part's ETag in part order; abort releases the parts of a failed upload.
  Result<std::string> createMultipartUpload(const std::string &bucket, const std::string &key);
  Result<std::string> uploadPart(const std::string &bucket, const std::string &key,
                                 const std::string &uploadId, int partNumber,
                                 std::span<const uint8_t> body, ByteCounter *counter = nullptr);
  Status completeMultipartUpload(const std::string &bucket, const std::string &key,
                                 const std::string &uploadId,
                                 const std::vector<std::string> &etags);
  Status abortMultipartUpload(const std::string &bucket, const std::string &key,
                              const std::string &uploadId);

  // Server-side copies within a bucket (no bytes pass through the client): a whole object up to
  // 5 GiB, or bytes [offset, offset + length) of one as a part of a multipart upload.
  Status copyObject(const std::string &bucket, const std::string &fromKey,
                    const std::string &toKey);
  Result<std::string> uploadPartCopy(const std::string &bucket, const std::string &key,
                                     const std::string &uploadId, int partNumber,
                                     const std::string &fromKey, uint64_t offset,
                                     uint64_t length);
  Status deleteObject(const std::string &bucket, const std::string &key);

  // Makes every call in flight (and later ones) fail fast with CANCELLED: one failed part of a
  // transfer stops the others.
  void cancel() { cancelled_ = true; }

  struct Request;
  struct Response;

private:
  Result<Response> perform(const Request &request);
  Result<Response> attempt(const Request &request, uint64_t &counted);
  std::string objectUrl(const std::string &bucket, const std::string &key) const;

  AwsConfig config_;
  S3ClientOptions options_;
  std::atomic<bool> cancelled_{false};
};

// Percent-encodes for an S3 path (keeps '/' unless `encodeSlash`), RFC 3986 unreserved kept.
std::string uriEncode(const std::string &text, bool encodeSlash);

} // namespace kiln::rt
