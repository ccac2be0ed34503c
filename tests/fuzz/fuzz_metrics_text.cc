// Feeds arbitrary bytes to what `ferry top` reads from whatever answers at
// the address it was given: the HTTP answer's checks, then the metrics-text
// reader. Every sample it accepts must format back to a line that reads as
// the same sample; the rates between two such scrapes must be finite; and
// the table drawn from them must hold no control byte but newlines (label
// values are the answerer's, and the table goes to a terminal).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "top/http_get.h"
#include "top/metrics_text.h"
#include "top/top_view.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ferry::top;
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  (void)http_response_body(bytes, "fuzz");
  auto samples = parse_metrics_text(bytes);
  if (!samples.ok()) return 0;
  for (const Sample& s : *samples) {
    std::string line = format_sample(s);
    auto again = parse_metrics_text(line);
    if (!again.ok() || again->size() != 1 || format_sample((*again)[0]) != line) std::abort();
  }
  Scrape before{{}, ferry::Clock::time_point{}};
  Scrape after{*samples, ferry::Clock::time_point{} + std::chrono::seconds(1)};
  TopView v = make_view(before, after);
  if (!std::isfinite(v.bytes_per_s) || !std::isfinite(v.transfers_per_s)) std::abort();
  std::string text = render_text(v, "fuzz", 5);
  for (char c : text) {
    if ((static_cast<unsigned char>(c) < ' ' && c != '\n') || c == 0x7f) std::abort();
  }
  return 0;
}
