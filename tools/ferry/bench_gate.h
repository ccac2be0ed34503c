// A barrier across processes of one host: `ferry bench --gate DIR:N` makes
// the timed phases of N separate bench processes start (and end) together, so
// that their rates add up to what the links carried at once (a whole node,
// one process per GPU pair). Each pass of each process creates
// DIR/<round>.<pid>; a pass returns once N files of its round exist.
#pragma once

#include <cstdint>
#include <string>

#include "ferry/status.h"
#include "ferry/transfer.h"

namespace ferry::cli {

class FileGate {
 public:
  // "DIR:N" with N >= 1; DIR must exist.
  static Result<FileGate> parse(const std::string& spec);

  // Waits for the other N-1 processes to arrive at this round, or until
  // `deadline` (kDeadlineExceeded, naming how many arrived).
  Status pass(Deadline deadline);

  const std::string& dir() const { return dir_; }
  int count() const { return count_; }

 private:
  std::string dir_;
  int count_ = 1;
  uint64_t round_ = 0;
};

}  // namespace ferry::cli
