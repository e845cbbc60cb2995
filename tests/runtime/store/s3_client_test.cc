// S3Client's retries that end in success, against a local stand-in for S3 (cpp-httplib on
// loopback) that fails the first attempts of an operation as S3 does under load (503 SlowDown,
// 500 InternalError) or drops the connection mid-body, then serves it: a single PUT, a multipart
// part and GETs (whole and ranged) each succeed with exactly the right bytes, the retries are
// logged, and the progress counter does not count the bytes of failed attempts. Retries that run
// out are tested against moto in tests/e2e/ship/test_ship.py.
#include "runtime/store/s3_client.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <regex>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace kiln::rt {
namespace {

// An injected failure: an HTTP error with S3's XML body, or (status 0) a response that promises
// the whole body and closes the connection halfway through it.
struct Fault {
  int status = 0;
  std::string code;
};
const Fault kSlowDown{503, "SlowDown"};
const Fault kInternalError{500, "InternalError"};
const Fault kDropMidBody{0, ""};

// Path-style S3 (/BUCKET/KEY) with just what the client's calls need. Each operation
// ("PutObject", "UploadPart", "GetObject", ...) fails its next attempts with the faults queued
// for it, then succeeds.
class FlakyS3 {
public:
  FlakyS3() {
    const std::string path = R"(/([^/]+)/(.+))";
    server_.Put(path,
                [this](const httplib::Request &req, httplib::Response &res) { put(req, res); });
    server_.Post(path,
                 [this](const httplib::Request &req, httplib::Response &res) { post(req, res); });
    server_.Get(path,
                [this](const httplib::Request &req, httplib::Response &res) { get(req, res); });
    // A connection per request, so no worker thread outlives a test waiting on a kept-alive one.
    server_.set_keep_alive_max_count(1);
    // Listening from here on: a request made before the accept loop runs waits in the backlog.
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~FlakyS3() {
    server_.stop();
    thread_.join();
  }

  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  void failNext(const std::string &operation, std::vector<Fault> faults) {
    std::lock_guard<std::mutex> lock(mutex_);
    faults_[operation].insert(faults_[operation].end(), faults.begin(), faults.end());
  }
  int attempts(const std::string &operation) {
    std::lock_guard<std::mutex> lock(mutex_);
    return attempts_[operation];
  }
  std::string object(const std::string &key) {
    std::lock_guard<std::mutex> lock(mutex_);
    return objects_[key];
  }
  void setObject(const std::string &key, std::string bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    objects_[key] = std::move(bytes);
  }

private:
  // Counts the attempt; true (with `res` filled) when it must fail.
  bool injectFault(const std::string &operation, const httplib::Request &req,
                   httplib::Response &res) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++attempts_[operation];
    std::deque<Fault> &queued = faults_[operation];
    if (queued.empty())
      return false;
    Fault fault = queued.front();
    queued.pop_front();
    if (fault.status == 0) {
      std::string bytes = objects_[req.matches[2]];
      res.set_content_provider(
          bytes.size(), "application/octet-stream",
          [bytes](size_t offset, size_t length, httplib::DataSink &sink) {
            sink.write(bytes.data() + offset, length / 2);
            return false; // the connection closes with half of the promised bytes sent
          });
      return true;
    }
    res.status = fault.status;
    res.set_content("<Error><Code>" + fault.code + "</Code><Message>injected</Message></Error>",
                    "application/xml");
    return true;
  }

  void put(const httplib::Request &req, httplib::Response &res) {
    const bool part = req.has_param("partNumber");
    if (injectFault(part ? "UploadPart" : "PutObject", req, res))
      return;
    std::lock_guard<std::mutex> lock(mutex_);
    if (!part) {
      objects_[req.matches[2]] = req.body;
      res.set_header("ETag", "\"object\"");
      return;
    }
    int number = std::stoi(req.get_param_value("partNumber"));
    std::string etag = "\"part-" + std::to_string(number) + "-" +
                       std::to_string(std::hash<std::string>{}(req.body)) + "\"";
    parts_[number] = {etag, req.body};
    res.set_header("ETag", etag);
  }

  void post(const httplib::Request &req, httplib::Response &res) {
    if (req.has_param("uploads")) {
      if (!injectFault("CreateMultipartUpload", req, res))
        res.set_content("<InitiateMultipartUploadResult><UploadId>upload-1</UploadId>"
                        "</InitiateMultipartUploadResult>",
                        "application/xml");
      return;
    }
    if (injectFault("CompleteMultipartUpload", req, res))
      return;
    // The object is the listed parts in order, each named by the ETag its upload returned.
    std::lock_guard<std::mutex> lock(mutex_);
    static const std::regex kPart(
        "<Part><PartNumber>(\\d+)</PartNumber><ETag>([^<]*)</ETag></Part>");
    std::string assembled;
    for (std::sregex_iterator it(req.body.begin(), req.body.end(), kPart), end; it != end; ++it) {
      auto found = parts_.find(std::stoi((*it)[1]));
      if (found == parts_.end() || found->second.first != (*it)[2]) {
        res.status = 400;
        res.set_content("<Error><Code>InvalidPart</Code></Error>", "application/xml");
        return;
      }
      assembled += found->second.second;
    }
    objects_[req.matches[2]] = assembled;
    res.set_content("<CompleteMultipartUploadResult/>", "application/xml");
  }

  // cpp-httplib answers a Range header itself (206 with that slice of the body set here).
  void get(const httplib::Request &req, httplib::Response &res) {
    if (injectFault("GetObject", req, res))
      return;
    std::lock_guard<std::mutex> lock(mutex_);
    res.set_content(objects_[req.matches[2]], "application/octet-stream");
  }

  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mutex_;
  std::map<std::string, std::deque<Fault>> faults_;
  std::map<std::string, int> attempts_;
  std::map<std::string, std::string> objects_;
  std::map<int, std::pair<std::string, std::string>> parts_; // number -> (ETag, bytes)
};

// Distinct bytes at every position, so a misplaced or repeated chunk shows.
std::string patternBytes(size_t size, unsigned seed) {
  std::string bytes(size, '\0');
  for (size_t i = 0; i < size; ++i)
    bytes[i] = static_cast<char>((i * 131 + seed * 7 + i / 251) & 0xff);
  return bytes;
}

std::span<const uint8_t> asSpan(const std::string &bytes) {
  return {reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size()};
}

class S3ClientRetryTest : public ::testing::Test {
protected:
  S3Client makeClient() {
    AwsConfig config;
    config.accessKeyId = "AKIDTEST";
    config.secretAccessKey = "secret";
    config.endpointUrl = s3_.endpoint();
    config.credentialSource = "test";
    S3ClientOptions options;
    options.retry = {/*maxAttempts=*/4, /*initialBackoffMs=*/1, /*maxBackoffMs=*/4};
    options.log = [this](const std::string &line) {
      std::lock_guard<std::mutex> lock(logMutex_);
      log_.push_back(line);
    };
    return S3Client(config, options);
  }
  // The retry notices, checked to name the failure each retry followed.
  void expectRetriesLogged(const std::vector<std::string> &failures) {
    std::lock_guard<std::mutex> lock(logMutex_);
    ASSERT_EQ(log_.size(), failures.size());
    for (size_t i = 0; i < failures.size(); ++i) {
      EXPECT_NE(log_[i].find(failures[i]), std::string::npos) << log_[i];
      EXPECT_NE(log_[i].find("(attempt " + std::to_string(i + 2) + " of 4)"), std::string::npos)
          << log_[i];
    }
  }

  FlakyS3 s3_;
  std::mutex logMutex_;
  std::vector<std::string> log_;
};

TEST_F(S3ClientRetryTest, APutThatFailsTwiceSucceedsOnItsThirdAttempt) {
  S3Client client = makeClient();
  s3_.failNext("PutObject", {kSlowDown, kInternalError});
  const std::string body = patternBytes(300000, 1);
  S3Client::ByteCounter counter{0};
  Status status = client.putObject("bucket", "models/a/weights.bin", asSpan(body), &counter);
  ASSERT_TRUE(status.isOk()) << status.toString();
  EXPECT_EQ(s3_.attempts("PutObject"), 3);
  EXPECT_EQ(s3_.object("models/a/weights.bin"), body);
  EXPECT_EQ(counter.load(), body.size()); // the failed attempts' bytes were taken back
  expectRetriesLogged({"HTTP 503 SlowDown", "HTTP 500 InternalError"});
}

TEST_F(S3ClientRetryTest, AMultipartPartThatFailsOnceSucceedsAndTheUploadCompletes) {
  S3Client client = makeClient();
  s3_.failNext("UploadPart", {kInternalError});
  const std::string first = patternBytes(200000, 2), second = patternBytes(70000, 3);
  Result<std::string> uploadId = client.createMultipartUpload("bucket", "big.bin");
  ASSERT_TRUE(uploadId.isOk()) << uploadId.status().toString();
  S3Client::ByteCounter counter{0};
  Result<std::string> etag1 =
      client.uploadPart("bucket", "big.bin", *uploadId, 1, asSpan(first), &counter);
  ASSERT_TRUE(etag1.isOk()) << etag1.status().toString();
  EXPECT_EQ(s3_.attempts("UploadPart"), 2);
  Result<std::string> etag2 =
      client.uploadPart("bucket", "big.bin", *uploadId, 2, asSpan(second), &counter);
  ASSERT_TRUE(etag2.isOk()) << etag2.status().toString();
  EXPECT_EQ(s3_.attempts("UploadPart"), 3);
  EXPECT_EQ(counter.load(), first.size() + second.size());
  Status completed =
      client.completeMultipartUpload("bucket", "big.bin", *uploadId, {*etag1, *etag2});
  ASSERT_TRUE(completed.isOk()) << completed.toString();
  EXPECT_EQ(s3_.object("big.bin"), first + second);
  expectRetriesLogged({"HTTP 500 InternalError"});
}

TEST_F(S3ClientRetryTest, AGetThatFailsTwiceReturnsTheObjectOnItsThirdAttempt) {
  S3Client client = makeClient();
  const std::string object = patternBytes(50000, 4);
  s3_.setObject("manifest.json", object);
  s3_.failNext("GetObject", {kInternalError, kSlowDown});
  Result<std::string> got = client.getObject("bucket", "manifest.json");
  ASSERT_TRUE(got.isOk()) << got.status().toString();
  EXPECT_EQ(*got, object);
  EXPECT_EQ(s3_.attempts("GetObject"), 3);
  expectRetriesLogged({"HTTP 500 InternalError", "HTTP 503 SlowDown"});
}

// A ranged GET into a file: the first two answers break off halfway (after writing their bytes at
// the right place); the third rewrites the range whole, and the bytes around it in the file stay
// untouched. (HTTP errors are the whole-object GET's: cpp-httplib would cut an error body to the
// range asked for.)
TEST_F(S3ClientRetryTest, ARangedGetCutOffMidBodyIsRetriedAndWritesTheRightBytes) {
  S3Client client = makeClient();
  const std::string object = patternBytes(400000, 5);
  s3_.setObject("weights.bin", object);
  s3_.failNext("GetObject", {kDropMidBody, kDropMidBody});
  std::FILE *file = std::tmpfile();
  ASSERT_NE(file, nullptr);
  const std::string around(1000, 'z');
  ASSERT_EQ(::pwrite(fileno(file), around.data(), around.size(), 0), ssize_t(around.size()));
  const uint64_t offset = 12345, length = 300000, fileOffset = 100;
  S3Client::ByteCounter counter{0};
  Status status = client.getObjectRange("bucket", "weights.bin", offset, length, fileno(file),
                                        fileOffset, &counter);
  ASSERT_TRUE(status.isOk()) << status.toString();
  EXPECT_EQ(s3_.attempts("GetObject"), 3);
  EXPECT_EQ(counter.load(), length);
  std::string written(fileOffset + length, '\0');
  ASSERT_EQ(::pread(fileno(file), written.data(), written.size(), 0), ssize_t(written.size()));
  std::fclose(file);
  EXPECT_EQ(written.substr(0, fileOffset), around.substr(0, fileOffset));
  EXPECT_TRUE(written.substr(fileOffset) == object.substr(offset, length))
      << "the file does not hold bytes [" << offset << ", " << offset + length << ") of the object";
  expectRetriesLogged({"Transferred a partial file", "Transferred a partial file"}); // curl's words
}

} // namespace
} // namespace kiln::rt
