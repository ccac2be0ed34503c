// Rows of the run-directory CSVs: formatting, parsing, merging.
#include "profile/run_files.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "profile/csv.h"

namespace ferry::profile {
namespace {

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

// Reads typed columns of a parsed CSV, failing with line and column names.
class Columns {
 public:
  Columns(const CsvTable& t, std::string what) : t_(t), what_(std::move(what)) {}

  Status need(std::initializer_list<const char*> names) {
    for (const char* n : names) {
      if (t_.column(n) < 0) return Status(Code::kDataLoss, what_ + ": no column \"" + n + "\"");
    }
    return Status();
  }

  template <typename T>
  Status get(size_t row, const char* name, T& out) const {
    const std::string& s = t_.rows[row][static_cast<size_t>(t_.column(name))];
    if constexpr (std::is_same_v<T, std::string>) {
      out = s;
      return Status();
    } else if constexpr (std::is_floating_point_v<T>) {
      char* end = nullptr;
      out = std::strtod(s.c_str(), &end);
      if (s.empty() || end != s.c_str() + s.size()) return bad(row, name, s);
      return Status();
    } else {
      auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
      if (ec != std::errc() || p != s.data() + s.size()) return bad(row, name, s);
      return Status();
    }
  }

 private:
  Status bad(size_t row, const char* name, const std::string& s) const {
    return Status(Code::kDataLoss,
                  what_ + " line " + std::to_string(row + 2) + ": column " + name + ": bad number \"" + s + "\"");
  }
  const CsvTable& t_;
  std::string what_;
};

}  // namespace

std::string trace_file(int rank) { return "rank_" + std::to_string(rank) + ".trace.json"; }
std::string metadata_file(int rank) { return "metadata_rank_" + std::to_string(rank) + ".yml"; }
std::string execution_log_part(int rank) { return "execution_log.rank_" + std::to_string(rank) + ".csv"; }
std::string clock_drift_part(int rank) { return "clock_drift.rank_" + std::to_string(rank) + ".csv"; }

std::string execution_log_header() {
  return csv_line({"config_id", "src", "dst", "size", "repetition", "start_ns", "end_ns", "duration_ns", "device_ns",
                   "rank", "role", "gpu", "gpu_start_ns"});
}

std::string execution_row_line(const ExecutionRow& r) {
  return csv_line({std::to_string(r.config_id), std::to_string(r.src), std::to_string(r.dst), std::to_string(r.size),
                   std::to_string(r.repetition), std::to_string(r.start_ns), std::to_string(r.end_ns),
                   std::to_string(r.duration_ns), std::to_string(r.device_ns), std::to_string(r.rank), r.role,
                   std::to_string(r.gpu), std::to_string(r.gpu_start_ns)});
}

Result<std::vector<ExecutionRow>> parse_execution_log(std::string_view text) {
  FERRY_ASSIGN_OR_RETURN(CsvTable t, parse_csv(text));
  Columns c(t, kExecutionLog);
  FERRY_RETURN_IF_ERROR(c.need({"config_id", "src", "dst", "size", "repetition", "start_ns", "end_ns", "duration_ns",
                                "device_ns", "rank", "role", "gpu", "gpu_start_ns"}));
  std::vector<ExecutionRow> out(t.rows.size());
  for (size_t i = 0; i < t.rows.size(); ++i) {
    ExecutionRow& r = out[i];
    FERRY_RETURN_IF_ERROR(c.get(i, "config_id", r.config_id));
    FERRY_RETURN_IF_ERROR(c.get(i, "src", r.src));
    FERRY_RETURN_IF_ERROR(c.get(i, "dst", r.dst));
    FERRY_RETURN_IF_ERROR(c.get(i, "size", r.size));
    FERRY_RETURN_IF_ERROR(c.get(i, "repetition", r.repetition));
    FERRY_RETURN_IF_ERROR(c.get(i, "start_ns", r.start_ns));
    FERRY_RETURN_IF_ERROR(c.get(i, "end_ns", r.end_ns));
    FERRY_RETURN_IF_ERROR(c.get(i, "duration_ns", r.duration_ns));
    FERRY_RETURN_IF_ERROR(c.get(i, "device_ns", r.device_ns));
    FERRY_RETURN_IF_ERROR(c.get(i, "rank", r.rank));
    FERRY_RETURN_IF_ERROR(c.get(i, "role", r.role));
    FERRY_RETURN_IF_ERROR(c.get(i, "gpu", r.gpu));
    FERRY_RETURN_IF_ERROR(c.get(i, "gpu_start_ns", r.gpu_start_ns));
  }
  return out;
}

std::vector<ExecutionRow> merge_execution_logs(std::vector<std::vector<ExecutionRow>> parts) {
  std::vector<ExecutionRow> out;
  for (auto& p : parts) out.insert(out.end(), std::make_move_iterator(p.begin()), std::make_move_iterator(p.end()));
  std::stable_sort(out.begin(), out.end(), [](const ExecutionRow& a, const ExecutionRow& b) {
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    return a.rank < b.rank;
  });
  return out;
}

std::string drift_header() {
  return csv_line({"rank", "gpu", "phase", "host_ref_ns", "gpu_ref_ns", "ppm", "residual_ns", "samples", "span_s"});
}

std::string drift_row_line(const DriftRow& r) {
  char ppm[64];
  std::snprintf(ppm, sizeof(ppm), "%.4f", r.fit.ppm);
  return csv_line({std::to_string(r.rank), std::to_string(r.gpu), r.phase, std::to_string(r.fit.host_ref_ns),
                   std::to_string(r.fit.gpu_ref_ns), ppm, num(r.fit.residual_ns), std::to_string(r.fit.samples),
                   num(r.fit.span_s)});
}

Result<std::vector<DriftRow>> parse_drift(std::string_view text) {
  FERRY_ASSIGN_OR_RETURN(CsvTable t, parse_csv(text));
  Columns c(t, kClockDrift);
  FERRY_RETURN_IF_ERROR(
      c.need({"rank", "gpu", "phase", "host_ref_ns", "gpu_ref_ns", "ppm", "residual_ns", "samples", "span_s"}));
  std::vector<DriftRow> out(t.rows.size());
  for (size_t i = 0; i < t.rows.size(); ++i) {
    DriftRow& r = out[i];
    FERRY_RETURN_IF_ERROR(c.get(i, "rank", r.rank));
    FERRY_RETURN_IF_ERROR(c.get(i, "gpu", r.gpu));
    FERRY_RETURN_IF_ERROR(c.get(i, "phase", r.phase));
    FERRY_RETURN_IF_ERROR(c.get(i, "host_ref_ns", r.fit.host_ref_ns));
    FERRY_RETURN_IF_ERROR(c.get(i, "gpu_ref_ns", r.fit.gpu_ref_ns));
    FERRY_RETURN_IF_ERROR(c.get(i, "ppm", r.fit.ppm));
    FERRY_RETURN_IF_ERROR(c.get(i, "residual_ns", r.fit.residual_ns));
    FERRY_RETURN_IF_ERROR(c.get(i, "samples", r.fit.samples));
    FERRY_RETURN_IF_ERROR(c.get(i, "span_s", r.fit.span_s));
  }
  return out;
}

std::string temperature_header() {
  return csv_line({"host_ns", "gpu", "temperature_c", "power_w", "sm_clock_mhz", "mem_clock_mhz"});
}

std::string temperature_row_line(const TemperatureRow& r) {
  char power[32];
  std::snprintf(power, sizeof(power), "%.3f", r.power_w);
  return csv_line({std::to_string(r.host_ns), std::to_string(r.gpu), std::to_string(r.temperature_c), power,
                   std::to_string(r.sm_clock_mhz), std::to_string(r.mem_clock_mhz)});
}

Result<std::vector<TemperatureRow>> parse_temperatures(std::string_view text) {
  FERRY_ASSIGN_OR_RETURN(CsvTable t, parse_csv(text));
  Columns c(t, kTemperatures);
  FERRY_RETURN_IF_ERROR(c.need({"host_ns", "gpu", "temperature_c", "power_w", "sm_clock_mhz", "mem_clock_mhz"}));
  std::vector<TemperatureRow> out(t.rows.size());
  for (size_t i = 0; i < t.rows.size(); ++i) {
    TemperatureRow& r = out[i];
    FERRY_RETURN_IF_ERROR(c.get(i, "host_ns", r.host_ns));
    FERRY_RETURN_IF_ERROR(c.get(i, "gpu", r.gpu));
    FERRY_RETURN_IF_ERROR(c.get(i, "temperature_c", r.temperature_c));
    FERRY_RETURN_IF_ERROR(c.get(i, "power_w", r.power_w));
    FERRY_RETURN_IF_ERROR(c.get(i, "sm_clock_mhz", r.sm_clock_mhz));
    FERRY_RETURN_IF_ERROR(c.get(i, "mem_clock_mhz", r.mem_clock_mhz));
  }
  return out;
}

std::string reference_header() { return csv_line({"src", "dst", "size", "sample", "copies", "device_ns", "gbps"}); }

std::string reference_row_line(const ReferenceRow& r) {
  char gbps[32];
  std::snprintf(gbps, sizeof(gbps), "%.3f", r.gbps());
  return csv_line({std::to_string(r.src), std::to_string(r.dst), std::to_string(r.size), std::to_string(r.sample),
                   std::to_string(r.copies), std::to_string(r.device_ns), gbps});
}

Result<std::vector<ReferenceRow>> parse_reference(std::string_view text) {
  FERRY_ASSIGN_OR_RETURN(CsvTable t, parse_csv(text));
  Columns c(t, kReference);
  FERRY_RETURN_IF_ERROR(c.need({"src", "dst", "size", "sample", "copies", "device_ns"}));
  std::vector<ReferenceRow> out(t.rows.size());
  for (size_t i = 0; i < t.rows.size(); ++i) {
    ReferenceRow& r = out[i];
    FERRY_RETURN_IF_ERROR(c.get(i, "src", r.src));
    FERRY_RETURN_IF_ERROR(c.get(i, "dst", r.dst));
    FERRY_RETURN_IF_ERROR(c.get(i, "size", r.size));
    FERRY_RETURN_IF_ERROR(c.get(i, "sample", r.sample));
    FERRY_RETURN_IF_ERROR(c.get(i, "copies", r.copies));
    FERRY_RETURN_IF_ERROR(c.get(i, "device_ns", r.device_ns));
  }
  return out;
}

Status write_file(const std::string& path, std::string_view content) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return Status(Code::kUnavailable, "cannot write " + tmp);
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    if (!out) return Status(Code::kResourceExhausted, "writing " + tmp + " failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return Status(Code::kUnavailable, "cannot rename " + tmp);
  return Status();
}

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status(Code::kNotFound, "cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace ferry::profile
