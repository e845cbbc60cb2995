// The JSON and the table of `kiln profile` (step_profiler.h).
#include "runtime/service/step_profiler.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace kiln::rt {
namespace {

using Json = nlohmann::ordered_json;

struct Group {
  std::string name, kind, impl; // impl: its ops' when they agree, else "mixed"
  int ops = 0;
  double micros = 0;
  OpCost cost;
};

// Groups in order of first appearance in the program.
std::vector<Group> groupOps(const ProfileReport &report) {
  std::vector<Group> groups;
  std::map<std::string, size_t> index;
  for (const OpProfile &op : report.ops) {
    auto [it, added] = index.emplace(op.group, groups.size());
    if (added)
      groups.push_back({op.group, op.kind, op.impl});
    Group &g = groups[it->second];
    if (g.impl != op.impl)
      g.impl = "mixed";
    ++g.ops;
    g.micros += op.micros;
    g.cost.bytesRead += op.cost.bytesRead;
    g.cost.bytesWritten += op.cost.bytesWritten;
    g.cost.flops += op.cost.flops;
    g.cost.weightBytes += op.cost.weightBytes;
  }
  return groups;
}

double sumMicros(const ProfileReport &report) {
  double sum = 0;
  for (const OpProfile &op : report.ops)
    sum += op.micros;
  return sum;
}

double perSecond(double units, double micros) {
  return micros > 0 ? units / (micros * 1e-6) : 0;
}

// A fraction of a ceiling, or null where the ceiling or the time is unknown.
Json fraction(double rate, double ceiling) {
  return ceiling > 0 && rate > 0 ? Json(rate / ceiling) : Json(nullptr);
}

Json rates(const OpCost &cost, double micros, const Ceilings &ceilings) {
  const double bytesPerS = perSecond(double(cost.bytes()), micros);
  const double flopsPerS = perSecond(double(cost.flops), micros);
  Json j;
  j["us"] = micros;
  j["bytes_read"] = cost.bytesRead;
  j["bytes_written"] = cost.bytesWritten;
  j["weight_bytes"] = cost.weightBytes;
  j["flops"] = cost.flops;
  j["bytes_per_s"] = bytesPerS;
  j["flops_per_s"] = flopsPerS;
  j["hbm_fraction"] = fraction(bytesPerS, ceilings.hbmBytesPerS);
  j["peak_fraction"] = fraction(flopsPerS, ceilings.flopsPerS);
  return j;
}

std::string format(const char *pattern, auto... values) {
  char line[512];
  std::snprintf(line, sizeof(line), pattern, values...);
  return line;
}

std::string bytesText(uint64_t bytes) {
  return bytes >= 1000000000 ? format("%.3f GB", bytes / 1e9) : format("%.3f MB", bytes / 1e6);
}

std::string percent(double rate, double ceiling) {
  return ceiling > 0 ? format("%5.1f%%", 100 * rate / ceiling) : std::string("     -");
}

std::string groupLine(const std::string &name, const std::string &kind, int ops, double micros,
                      double stepSum, const OpCost &cost, const Ceilings &ceilings) {
  const double bytesPerS = perSecond(double(cost.bytes()), micros);
  const double flopsPerS = perSecond(double(cost.flops), micros);
  return format("%-28.28s %-20.20s %4d %11.1f %s %9.1f %s %9.2f %s\n", name.c_str(), kind.c_str(),
                ops, micros, percent(micros, stepSum).c_str(), bytesPerS / 1e9,
                percent(bytesPerS, ceilings.hbmBytesPerS).c_str(), flopsPerS / 1e12,
                percent(flopsPerS, ceilings.flopsPerS).c_str());
}

// "Linear cublasLt 2/8": the kind and, when the device had a choice, what it runs.
std::string kindText(const std::string &kind, const std::string &impl) {
  return impl.empty() ? kind : kind + " " + impl;
}

std::string header(const char *first) {
  return format("%-28s %-20s %4s %11s %6s %9s %6s %9s %6s\n", first, "kind", "ops", "us", "step",
                "GB/s", "HBM", "TFLOP/s", "peak");
}

} // namespace

Json profileJson(const ProfileReport &report, const Ceilings &ceilings) {
  Json j;
  j["mode"] = report.mode;
  j["batch"] = report.batch;
  j["context"] = report.context;
  j["new_tokens"] = report.newTokens;
  j["repeats"] = report.repeats;
  Json step = rates(report.total, report.stepMicros(), ceilings);
  step["eager_us"] = report.step.eagerMicros;
  step["sum_of_ops_us"] = sumMicros(report);
  step["graph_us"] = report.step.graphMicros > 0 ? Json(report.step.graphMicros) : Json(nullptr);
  step["graph_batch"] = report.step.graphBatch;
  j["step"] = std::move(step);
  j["ceilings"] = {{"device_name", ceilings.deviceName},
                   {"hbm_bytes_per_s", ceilings.hbmBytesPerS},
                   {"bf16_flops_per_s", ceilings.flopsPerS}};
  Json groups = Json::array();
  for (const Group &g : groupOps(report)) {
    Json row = {{"group", g.name}, {"kind", g.kind}, {"impl", g.impl}, {"ops", g.ops}};
    row.update(rates(g.cost, g.micros, ceilings));
    groups.push_back(std::move(row));
  }
  j["groups"] = std::move(groups);
  Json ops = Json::array();
  for (const OpProfile &op : report.ops) {
    Json row = {{"name", op.name}, {"kind", op.kind}, {"impl", op.impl}};
    row.update(rates(op.cost, op.micros, ceilings));
    ops.push_back(std::move(row));
  }
  j["ops"] = std::move(ops);
  return j;
}

std::string profileTable(const ProfileReport &report, const Ceilings &ceilings, size_t topOps) {
  const double stepSum = sumMicros(report);
  std::string out =
      format("%s step: batch %d, %d new token(s) per sequence, context %d; "
             "medians of %d runs\n\n",
             report.mode.c_str(), report.batch, report.newTokens, report.context, report.repeats);
  out += header("op group");
  for (const Group &g : groupOps(report))
    out += groupLine(g.name, kindText(g.kind, g.impl), g.ops, g.micros, stepSum, g.cost, ceilings);
  std::vector<const OpProfile *> slowest;
  for (const OpProfile &op : report.ops)
    slowest.push_back(&op);
  std::sort(slowest.begin(), slowest.end(),
            [](const OpProfile *a, const OpProfile *b) { return a->micros > b->micros; });
  slowest.resize(std::min(topOps, slowest.size()));
  if (!slowest.empty())
    out += "\n" + header("slowest ops");
  for (const OpProfile *op : slowest)
    out += groupLine(op->name, kindText(op->kind, op->impl), 1, op->micros, stepSum, op->cost,
                     ceilings);
  // The step lines leave the share column empty: they are the whole.
  out += "\n" + groupLine("step, op by op", "", int(report.ops.size()), report.step.eagerMicros, 0,
                          report.total, ceilings);
  if (report.step.graphMicros > 0)
    out += groupLine("step, graph (batch " + std::to_string(report.step.graphBatch) + ")", "",
                     int(report.ops.size()), report.step.graphMicros, 0, report.total, ceilings);
  out += "\nthe step moves at least " + bytesText(report.total.bytes()) + " (weights " +
         bytesText(report.total.weightBytes) + ") and does " +
         format("%.3f GFLOP", report.total.flops / 1e9);
  if (ceilings.hbmBytesPerS > 0 || ceilings.flopsPerS > 0)
    out += format("; ceilings%s%s: HBM %.1f GB/s, bf16 %.1f TFLOP/s",
                  ceilings.deviceName.empty() ? "" : " of ", ceilings.deviceName.c_str(),
                  ceilings.hbmBytesPerS / 1e9, ceilings.flopsPerS / 1e12);
  return out + "\n";
}

} // namespace kiln::rt
