#include "runtime/service/step_profiler.h"

#include "runtime/base/file.h"

#include <algorithm>
#include <random>

namespace kiln::rt {
namespace {

using Ids = std::vector<int32_t>;

int32_t ceilDiv(int64_t a, int64_t b) {
  return static_cast<int32_t>((a + b - 1) / b);
}

Status checkShape(const ProfileRequest &r, const RunnerLimits &limits) {
  if (r.batch < 1 || r.batch > limits.maxBatch)
    return outOfRange("--batch " + std::to_string(r.batch) + " is outside 1.." +
                      std::to_string(limits.maxBatch) + " (the compiled --max-batch)");
  if (r.repeats < 1 || r.repeats > 1000)
    return outOfRange("--repeats " + std::to_string(r.repeats) + " is outside 1..1000");
  if (r.prefill > 0) {
    if (r.prefill > limits.maxSeqLen)
      return outOfRange("--prefill " + std::to_string(r.prefill) + " exceeds the compiled " +
                        "--max-seq-len " + std::to_string(limits.maxSeqLen));
    const int64_t tokens = int64_t(r.batch) * r.prefill;
    if (tokens > limits.maxTokensPerStep)
      return outOfRange("--batch " + std::to_string(r.batch) + " x --prefill " +
                        std::to_string(r.prefill) + " = " + std::to_string(tokens) +
                        " tokens in one step exceeds the compiled --max-tokens-per-step " +
                        std::to_string(limits.maxTokensPerStep));
    return okStatus();
  }
  if (r.context < 1 || r.context > limits.maxSeqLen)
    return outOfRange("--context " + std::to_string(r.context) + " is outside 1.." +
                      std::to_string(limits.maxSeqLen) + " (the compiled --max-seq-len)");
  return okStatus();
}

Status checkBlocks(const ProfileRequest &r, const RunnerLimits &limits, int32_t context) {
  const int64_t needed =
      int64_t(r.batch) * ceilDiv(context, limits.blockSize) * kvGroupCount(limits);
  if (needed > limits.numKvBlocks)
    return resourceExhausted("--batch " + std::to_string(r.batch) + " sequences of " +
                             std::to_string(context) + " positions need " + std::to_string(needed) +
                             " KV blocks; the cache holds " + std::to_string(limits.numKvBlocks) +
                             " (raise --kv-cache-mb or --gpu-memory-utilization)");
  return okStatus();
}

using Tables = std::vector<std::vector<int32_t>>; // one sequence's, per KV cache group

// Sequence s owns n blocks per group from block s * n * groups on: no sharing, so every position
// is its own.
std::vector<Tables> blockTables(int32_t batch, int32_t context, const RunnerLimits &limits) {
  const int32_t n = ceilDiv(context, limits.blockSize);
  std::vector<Tables> tables;
  for (int32_t s = 0; s < batch; ++s)
    tables.push_back(ownBlockTables(limits, s * n * kvGroupCount(limits), n));
  return tables;
}

std::vector<Ids> randomIds(int32_t batch, int32_t len, int32_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> id(0, vocab - 1);
  std::vector<Ids> ids(batch, Ids(len));
  for (Ids &seq : ids)
    for (int32_t &t : seq)
      t = id(rng);
  return ids;
}

// Writes positions [0, upTo) of every sequence with prefill steps packed up to the step limits.
Status fillCache(Executor &executor, const std::vector<Ids> &ids, const std::vector<Tables> &tables,
                 int32_t upTo, const ProfileRequest &r) {
  const RunnerLimits &limits = executor.limits();
  const int64_t total = int64_t(ids.size()) * upTo;
  std::vector<int32_t> done(ids.size(), 0);
  int64_t written = 0;
  size_t next = 0;
  while (written < total) {
    StepBatch step;
    int32_t budget = limits.maxTokensPerStep;
    for (; next < ids.size() && budget > 0 &&
           static_cast<int32_t>(step.sequences.size()) < limits.maxBatch;) {
      const int32_t chunk = std::min(budget, upTo - done[next]);
      SequenceStep seq;
      seq.startPosition = done[next];
      seq.tokenIds.assign(ids[next].begin() + done[next], ids[next].begin() + done[next] + chunk);
      seq.blockTables = tables[next];
      seq.logits = LogitsWanted::kNone;
      step.sequences.push_back(std::move(seq));
      done[next] += chunk;
      budget -= chunk;
      written += chunk;
      if (done[next] == upTo)
        ++next;
    }
    KILN_RETURN_IF_ERROR(executor.execute(step).status().withContext("filling the KV cache"));
    if (r.progress)
      r.progress("kiln profile: filled " + std::to_string(written) + "/" + std::to_string(total) +
                 " cache positions");
  }
  return okStatus();
}

StepBatch profiledStep(const ProfileRequest &r, const std::vector<Ids> &ids,
                       const std::vector<Tables> &tables, int32_t context) {
  StepBatch batch;
  for (size_t s = 0; s < ids.size(); ++s) {
    SequenceStep seq;
    seq.startPosition = r.prefill > 0 ? 0 : context - 1;
    seq.tokenIds.assign(ids[s].begin() + seq.startPosition, ids[s].end());
    seq.blockTables = tables[s];
    batch.sequences.push_back(std::move(seq));
  }
  return batch;
}

void addCost(OpCost &sum, const OpCost &cost) {
  sum.bytesRead += cost.bytesRead;
  sum.bytesWritten += cost.bytesWritten;
  sum.flops += cost.flops;
  sum.weightBytes += cost.weightBytes;
}

} // namespace

std::string opGroupName(const std::string &name) {
  const std::string prefix = "layers.";
  if (name.rfind(prefix, 0) != 0)
    return name;
  const size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos || dot == prefix.size() ||
      name.find_first_not_of("0123456789", prefix.size()) != dot)
    return name;
  return prefix + "*" + name.substr(dot);
}

Result<ProfileReport> profileStep(Executor &executor, const schema::KvCacheSpec &kv,
                                  const ProfileRequest &request) {
  const RunnerLimits &limits = executor.limits();
  KILN_RETURN_IF_ERROR(checkShape(request, limits));
  const int32_t context = request.prefill > 0 ? request.prefill : request.context;
  KILN_RETURN_IF_ERROR(checkBlocks(request, limits, context));
  const std::vector<Ids> ids = randomIds(request.batch, context, limits.vocabSize, request.seed);
  const std::vector<Tables> tables = blockTables(request.batch, context, limits);
  if (request.prefill == 0 && context > 1)
    KILN_RETURN_IF_ERROR(fillCache(executor, ids, tables, context - 1, request));
  const StepBatch batch = profiledStep(request, ids, tables, context);

  ProfileReport report;
  report.mode = request.prefill > 0 ? "prefill" : "decode";
  report.batch = request.batch;
  report.context = context;
  report.newTokens = request.prefill > 0 ? request.prefill : 1;
  report.repeats = request.repeats;
  KILN_ASSIGN_OR_RETURN(report.step, executor.profile(batch, request.repeats));
  report.stepBatch = batch;
  report.sequenceIds = ids;
  const std::vector<SequenceShape> shapes = sequenceShapes(batch);
  const auto &program = *executor.rank().program();
  for (uint32_t i = 0; i < program.size(); ++i) {
    const schema::Op &op = *program.Get(i);
    OpProfile p;
    p.name = op.name() ? op.name()->str() : "op" + std::to_string(i);
    p.kind = opKindName(op.params_type());
    p.group = opGroupName(p.name);
    p.micros = report.step.opMicros[i];
    if (i < report.step.opImpls.size())
      p.impl = report.step.opImpls[i];
    p.cost = estimateOpCost(op, executor.buffers(), report.step.counts, shapes, kv);
    addCost(report.total, p.cost);
    report.ops.push_back(std::move(p));
  }
  return report;
}

Result<Ceilings> readRooflineJson(const std::string &path) {
  KILN_ASSIGN_OR_RETURN(std::string text, readFile(path));
  const nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object())
    return invalidArgument("--roofline " + path +
                           ": not a JSON object (tools/bench/roofline's "
                           "output)");
  Ceilings c;
  auto number = [&](const char *field) {
    auto it = json.find(field);
    return it != json.end() && it->is_number() ? it->get<double>() : 0.0;
  };
  c.hbmBytesPerS = number("hbm_bytes_per_s");
  c.flopsPerS = number("bf16_flops_per_s");
  if (auto it = json.find("device_name"); it != json.end() && it->is_string())
    c.deviceName = it->get<std::string>();
  if (c.hbmBytesPerS <= 0 && c.flopsPerS <= 0)
    return invalidArgument("--roofline " + path +
                           ": has neither hbm_bytes_per_s nor bf16_flops_per_s");
  return c;
}

} // namespace kiln::rt
