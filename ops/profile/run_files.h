// The files of a `ferry profile` run directory and their rows:
//
//   execution_log.csv      one row per timed operation and rank taking part
//   clock_drift.csv        one row per GPU and drift window (start, end)
//   temperatures.csv       NVML samples of every GPU, one row per GPU and tick
//   reference.csv          the spin-gated cudaMemcpyPeerAsync loop (ce runs)
//   rank_N.trace.json      Chrome trace of rank N (trace.h)
//   metadata_rank_N.yml    what rank N ran on (yaml.h)
//
// Ranks write their rows to per-rank part files (execution_log.rank_N.csv,
// clock_drift.rank_N.csv); the parent merges them into the files above.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/status.h"
#include "profile/drift.h"

namespace ferry::profile {

inline constexpr const char* kExecutionLog = "execution_log.csv";
inline constexpr const char* kClockDrift = "clock_drift.csv";
inline constexpr const char* kTemperatures = "temperatures.csv";
inline constexpr const char* kReference = "reference.csv";
std::string trace_file(int rank);             // "rank_3.trace.json"
std::string metadata_file(int rank);          // "metadata_rank_3.yml"
std::string execution_log_part(int rank);     // "execution_log.rank_3.csv"
std::string clock_drift_part(int rank);       // "clock_drift.rank_3.csv"

// One operation as one rank saw it. Host times are CLOCK_MONOTONIC (the same
// clock in every process of a host); device_ns is the span between CUDA events
// around the operation on `gpu`'s stream; gpu_start_ns places it on that
// GPU's timer (0 when unknown).
struct ExecutionRow {
  int config_id = 0;
  int src = 0;
  int dst = 0;
  uint64_t size = 0;
  int repetition = 0;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  int64_t duration_ns = 0;
  int64_t device_ns = 0;
  int rank = 0;
  std::string role;  // "copy" (one process drives both GPUs), "send", "recv"
  int gpu = 0;
  int64_t gpu_start_ns = 0;
  friend bool operator==(const ExecutionRow&, const ExecutionRow&) = default;
};

std::string execution_log_header();
std::string execution_row_line(const ExecutionRow& row);
// kDataLoss naming the line and column for a missing column or a bad number.
Result<std::vector<ExecutionRow>> parse_execution_log(std::string_view text);
// All rows of all ranks, ordered by start time, then rank.
std::vector<ExecutionRow> merge_execution_logs(std::vector<std::vector<ExecutionRow>> parts);

// One drift window of one GPU.
struct DriftRow {
  int rank = 0;
  int gpu = 0;
  std::string phase;  // "start" or "end"
  ClockFit fit;
  friend bool operator==(const DriftRow& a, const DriftRow& b) {
    return a.rank == b.rank && a.gpu == b.gpu && a.phase == b.phase && a.fit.host_ref_ns == b.fit.host_ref_ns &&
           a.fit.gpu_ref_ns == b.fit.gpu_ref_ns && a.fit.samples == b.fit.samples;
  }
};

std::string drift_header();
std::string drift_row_line(const DriftRow& row);
Result<std::vector<DriftRow>> parse_drift(std::string_view text);

// One NVML sample.
struct TemperatureRow {
  int64_t host_ns = 0;
  int gpu = 0;
  int temperature_c = 0;
  double power_w = 0;
  int sm_clock_mhz = 0;
  int mem_clock_mhz = 0;
};

std::string temperature_header();
std::string temperature_row_line(const TemperatureRow& row);
Result<std::vector<TemperatureRow>> parse_temperatures(std::string_view text);

// One sample of the reference loop: `copies` copies queued behind a spin
// kernel, timed by events around them all.
struct ReferenceRow {
  int src = 0;
  int dst = 0;
  uint64_t size = 0;
  int sample = 0;
  int copies = 0;
  int64_t device_ns = 0;
  double gbps() const { return device_ns > 0 ? static_cast<double>(size) * copies / static_cast<double>(device_ns) : 0; }
};

std::string reference_header();
std::string reference_row_line(const ReferenceRow& row);
Result<std::vector<ReferenceRow>> parse_reference(std::string_view text);

// Whole-file helpers. Writes go to PATH.tmp, then rename.
Status write_file(const std::string& path, std::string_view content);
Result<std::string> read_file(const std::string& path);

}  // namespace ferry::profile
