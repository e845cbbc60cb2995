// Single-thread encode throughput of kiln's tokenizer on the test corpus repeated to ~10 MB, cut
// into ~4 KB documents (the same documents bench_hf.py encodes with HF tokenizers).
// Usage: bench_tokenizer TOKENIZER_DIR CORPUS_GOLDENS_JSON [MEGABYTES] [REPEATS]
// Prints one JSON line: bytes, docs, tokens, id checksum, best seconds, MB/s.
#include "runtime/base/file.h"
#include "runtime/text/tokenizer.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

using kiln::rt::Tokenizer;

// Same construction as bench_hf.py: corpus texts joined by "\n", repeated, split every ~4096 bytes
// at the next newline.
std::vector<std::string> makeDocs(const nlohmann::json &goldens, size_t targetBytes) {
  std::string block;
  for (const auto &c : goldens["cases"])
    block += c["text"].get<std::string>() + "\n";
  std::vector<std::string> docs;
  std::string doc;
  size_t total = 0;
  while (total < targetBytes) {
    for (size_t pos = 0; pos < block.size();) {
      size_t nl = block.find('\n', pos);
      size_t end = nl == std::string::npos ? block.size() : nl + 1;
      doc.append(block, pos, end - pos);
      pos = end;
      if (doc.size() >= 4096) {
        total += doc.size();
        docs.push_back(std::move(doc));
        doc.clear();
      }
    }
  }
  return docs;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TOKENIZER_DIR GOLDENS_JSON [MEGABYTES] [REPEATS]\n", argv[0]);
    return 2;
  }
  double megabytes = argc > 3 ? std::atof(argv[3]) : 10.0;
  int repeats = argc > 4 ? std::atoi(argv[4]) : 3;
  auto loadStart = std::chrono::steady_clock::now();
  auto tok = Tokenizer::fromDirectory(argv[1]);
  double loadSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - loadStart).count();
  if (!tok.isOk()) {
    std::fprintf(stderr, "%s\n", tok.status().toString().c_str());
    return 1;
  }
  auto text = kiln::readFile(argv[2]);
  if (!text.isOk()) {
    std::fprintf(stderr, "%s\n", text.status().toString().c_str());
    return 1;
  }
  std::vector<std::string> docs =
      makeDocs(nlohmann::json::parse(*text), static_cast<size_t>(megabytes * 1e6));
  size_t bytes = 0;
  for (const auto &d : docs)
    bytes += d.size();
  double best = 1e30;
  size_t tokens = 0;
  uint64_t checksum = 0;
  for (int r = 0; r < repeats; ++r) {
    tokens = 0;
    checksum = 0;
    auto start = std::chrono::steady_clock::now();
    for (const auto &d : docs) {
      std::vector<int32_t> ids = tok->encode(d, false);
      tokens += ids.size();
      for (int32_t id : ids)
        checksum = checksum * 1000003u + static_cast<uint32_t>(id);
    }
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::printf("{\"impl\":\"kiln\",\"bytes\":%zu,\"docs\":%zu,\"tokens\":%zu,\"checksum\":%llu,"
              "\"seconds\":%.4f,"
              "\"mb_per_s\":%.2f,\"load_seconds\":%.3f}\n",
              bytes, docs.size(), tokens, static_cast<unsigned long long>(checksum), best,
              bytes / best / 1e6, loadSeconds);
  return 0;
}
