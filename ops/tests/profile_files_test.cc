// ferry profile's writers and their parsers: CSV (with escaping), execution
// log, drift, temperatures, reference rows, Chrome traces, metadata YAML.
#include <gtest/gtest.h>

#include "profile/csv.h"
#include "profile/run_files.h"
#include "profile/stats.h"
#include "profile/trace.h"
#include "profile/yaml.h"

namespace ferry::profile {
namespace {

TEST(ProfileCsv, EscapesWhatNeedsIt) {
  EXPECT_EQ(csv_escape("plain"), "plain");
  EXPECT_EQ(csv_escape("a,b"), "\"a,b\"");
  EXPECT_EQ(csv_escape("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(csv_escape("two\nlines"), "\"two\nlines\"");
  EXPECT_EQ(csv_escape(" padded"), "\" padded\"");
  EXPECT_EQ(csv_line({"a", "", "c"}), "a,,c\n");
}

TEST(ProfileCsv, ParserReadsBackWhatTheWriterWrote) {
  std::vector<std::vector<std::string>> rows = {
      {"name", "note", "n"}, {"x", "comma, inside", "1"}, {"y", "quote \" and \"\"", "2"},
      {"z", "new\nline\r\nand CRLF", "3"}, {"", "", ""}, {" lead", "trail ", "-4"}};
  std::string text;
  for (const auto& r : rows) text += csv_line(r);
  auto t = parse_csv(text);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->header, rows[0]);
  ASSERT_EQ(t->rows.size(), rows.size() - 1);
  for (size_t i = 1; i < rows.size(); ++i) EXPECT_EQ(t->rows[i - 1], rows[i]) << i;
  EXPECT_EQ(t->column("note"), 1);
  EXPECT_EQ(t->column("missing"), -1);
}

TEST(ProfileCsv, RejectsMalformedText) {
  EXPECT_EQ(parse_csv("a,b\n1\n").status().code(), Code::kDataLoss);
  EXPECT_EQ(parse_csv("a,b\n\"open,2\n").status().code(), Code::kDataLoss);
  EXPECT_EQ(parse_csv("a,b\n\"x\"y,2\n").status().code(), Code::kDataLoss);
  auto no_newline = parse_csv("a,b\n1,2");
  ASSERT_TRUE(no_newline.ok());
  EXPECT_EQ(no_newline->rows.size(), 1u);
}

TEST(ProfileRunFiles, ExecutionLogRoundTripsAndMerges) {
  ExecutionRow a{42, 0, 1, 1048576, 3, 1000, 5000, 4000, 3100, 1, "recv", 1, 1763000000000000123};
  ExecutionRow b{42, 0, 1, 1048576, 3, 900, 5100, 4200, 3900, 0, "send", 0, 1763000000000000001};
  std::string text = execution_log_header() + execution_row_line(a) + execution_row_line(b);
  EXPECT_EQ(text.substr(0, text.find('\n')),
            "config_id,src,dst,size,repetition,start_ns,end_ns,duration_ns,device_ns,rank,role,gpu,gpu_start_ns");
  auto rows = parse_execution_log(text);
  ASSERT_TRUE(rows.ok()) << rows.status().to_string();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0], a);
  EXPECT_EQ((*rows)[1], b);
  auto merged = merge_execution_logs({{a}, {b}});
  ASSERT_EQ(merged.size(), 2u);
  EXPECT_EQ(merged[0], b);  // earlier start first
  EXPECT_EQ(merged[1], a);
}

TEST(ProfileRunFiles, ExecutionLogErrorsNameLineAndColumn) {
  auto missing = parse_execution_log("config_id,src\n1,2\n");
  EXPECT_EQ(missing.status().code(), Code::kDataLoss);
  std::string text = execution_log_header() + execution_row_line(ExecutionRow{}) ;
  text.replace(text.find("\n0,") + 1, 1, "x");
  auto bad = parse_execution_log(text);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("line 2"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("config_id"), std::string::npos) << bad.status().message();
}

TEST(ProfileRunFiles, DriftTemperatureReferenceRoundTrip) {
  DriftRow d{1, 1, "end", ClockFit{123456789, 1763000000000000000, -1.25, 40.5, 3000, 29.9}};
  auto drift = parse_drift(drift_header() + drift_row_line(d));
  ASSERT_TRUE(drift.ok()) << drift.status().to_string();
  ASSERT_EQ(drift->size(), 1u);
  EXPECT_EQ((*drift)[0], d);
  EXPECT_DOUBLE_EQ((*drift)[0].fit.ppm, -1.25);

  TemperatureRow t{5000000000, 1, 47, 123.456, 1980, 3201};
  auto temps = parse_temperatures(temperature_header() + temperature_row_line(t));
  ASSERT_TRUE(temps.ok());
  EXPECT_EQ((*temps)[0].temperature_c, 47);
  EXPECT_DOUBLE_EQ((*temps)[0].power_w, 123.456);
  EXPECT_EQ((*temps)[0].sm_clock_mhz, 1980);

  ReferenceRow r{0, 1, 1ull << 28, 2, 16, 10900000};
  auto ref = parse_reference(reference_header() + reference_row_line(r));
  ASSERT_TRUE(ref.ok());
  EXPECT_EQ((*ref)[0].device_ns, r.device_ns);
  EXPECT_NEAR((*ref)[0].gbps(), 16.0 * (1ull << 28) / 10900000.0, 1e-9);
}

TEST(ProfileStats, ReceiverTimesMediansAndCv) {
  std::vector<ExecutionRow> rows;
  const int64_t times[] = {1000, 1100, 900, 1000, 5000};
  for (int r = 0; r < 5; ++r) {
    rows.push_back({7, 0, 1, 1000, r, 0, 0, 2000, times[r], 1, "recv", 1, 0});
    rows.push_back({7, 0, 1, 1000, r, 0, 0, 2000, 99999, 0, "send", 0, 0});  // ignored: the sender's view
  }
  auto stats = config_stats(rows);
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].repetitions, 5);
  EXPECT_DOUBLE_EQ(stats[0].median_device_ns, 1000);
  EXPECT_DOUBLE_EQ(stats[0].gbps(), 1.0);
  EXPECT_NEAR(coefficient_of_variation({1000, 1100, 900, 1000, 5000}), stats[0].cv, 1e-12);
  EXPECT_DOUBLE_EQ(median({3, 1, 2, 4}), 2.5);
  EXPECT_DOUBLE_EQ(coefficient_of_variation({5}), 0);
}

TEST(ProfileTrace, WriterAndParserAgreeIncludingEscapes) {
  Trace t;
  t.pid = 1;
  t.process_name = "rank 1 (nccl) \"quoted\" \\ back";
  t.thread_names = {{0, "host"}, {2, "gpu 1\ttab"}};
  t.other_data = {{"backend", std::string("nccl")}, {"world", int64_t{2}}, {"ratio", 0.5}};
  TraceEvent e{"p2p_cfg0042_s0d1_sz1048576_r0", "device", 1763000000000000123, 2690, 1, 2,
               {{"config_id", int64_t{42}}, {"role", std::string("recv\n")}, {"gbps", 389.5}}};
  t.events = {e, TraceEvent{"p2p_cfg0001_s1d0_sz1_r9", "host", 1000, 1, 1, 0, {}}};
  std::string json = trace_to_json(t);
  EXPECT_NE(json.find("\"traceEvents\""), std::string::npos);
  EXPECT_NE(json.find("\"ph\":\"X\""), std::string::npos);
  auto back = parse_trace(json);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back.value(), t);
  // The exact nanoseconds survive, though "ts" (microseconds, a double) cannot hold them.
  EXPECT_EQ(back->events[0].start_ns, 1763000000000000123);
  ASSERT_NE(back->events[0].arg("role"), nullptr);
  EXPECT_EQ(std::get<std::string>(*back->events[0].arg("role")), "recv\n");
}

TEST(ProfileTrace, ParsesForeignTracesAndRejectsGarbage) {
  auto t = parse_trace(R"([{"name":"k","ph":"X","ts":1.5,"dur":2,"pid":3,"tid":4},{"ph":"B","name":"skip"}])");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_EQ(t->events.size(), 1u);
  EXPECT_EQ(t->events[0].start_ns, 1500);
  EXPECT_EQ(t->events[0].duration_ns, 2000);
  EXPECT_EQ(parse_trace("{not json").status().code(), Code::kDataLoss);
  EXPECT_EQ(parse_trace(R"({"events":[]})").status().code(), Code::kDataLoss);
  EXPECT_EQ(parse_trace(R"({"traceEvents":[{"ph":"X","ts":1}]})").status().code(), Code::kDataLoss);
}

TEST(ProfileYaml, RoundTripsNestedMapsListsAndAwkwardScalars) {
  YamlNode root = YamlNode::map();
  root.set("ferry_version", YamlNode::scalar("0.1.0"));
  root.set("command_line", YamlNode::scalar("ferry profile --sizes 1:1G:x2 --out \"a b\" # not a comment"));
  root.set("empty", YamlNode::scalar(""));
  root.set("word", YamlNode::scalar("true"));
  root.set("multi", YamlNode::scalar("line one\nline two\ttab \\ back"));
  root.set("colon", YamlNode::scalar("key: value"));
  root.set("dash", YamlNode::scalar("- not a list"));
  root.set("none", YamlNode::map());
  root.set("nothing", YamlNode::list());
  YamlNode gpus = YamlNode::list();
  for (int i = 0; i < 2; ++i) {
    YamlNode g = YamlNode::map();
    g.set("index", YamlNode::scalar(std::to_string(i)));
    g.set("name", YamlNode::scalar("NVIDIA H200"));
    YamlNode clocks = YamlNode::map();
    clocks.set("sm_mhz", YamlNode::scalar("1980"));
    g.set("clocks", clocks);
    gpus.push(g);
  }
  root.set("gpus", gpus);
  YamlNode warnings = YamlNode::list();
  warnings.push(YamlNode::scalar("GPU 0: clocks are not locked (SM 345 MHz now, max 1980 MHz)"));
  warnings.push(YamlNode::scalar("[brackets]"));
  root.set("warnings", warnings);
  YamlNode topo = YamlNode::map();
  YamlNode row = YamlNode::map();
  row.set("gpu0", YamlNode::scalar("X"));
  row.set("gpu1", YamlNode::scalar("NV18 (peer access)"));
  topo.set("gpu0", row);
  root.set("topology", topo);
  root.set("odd key: #", YamlNode::scalar("v"));

  std::string text = to_yaml(root, "ferry profile: what rank 0 ran on");
  EXPECT_EQ(text.rfind("# ferry profile", 0), 0u);
  auto back = parse_yaml(text);
  ASSERT_TRUE(back.ok()) << back.status().to_string() << "\n" << text;
  EXPECT_EQ(back.value(), root) << text;
  EXPECT_EQ(back->find("gpus")->items()[1].find("clocks")->find("sm_mhz")->text(), "1980");
}

TEST(ProfileYaml, ReadsHandWrittenVariantsAndRejectsOthers) {
  auto y = parse_yaml("a: 1  # comment\nlist:\n- x\n- \"y\"\nmap:\n  - k: v\n    j: w\n");
  ASSERT_TRUE(y.ok()) << y.status().to_string();
  EXPECT_EQ(y->find("a")->text(), "1");
  EXPECT_EQ(y->find("list")->items().size(), 2u);
  EXPECT_EQ(y->find("map")->items()[0].find("j")->text(), "w");
  EXPECT_EQ(parse_yaml("a:\n\tb: 1\n").status().code(), Code::kDataLoss);
  EXPECT_EQ(parse_yaml("a: {b: 1}\n").status().code(), Code::kDataLoss);
  EXPECT_EQ(parse_yaml("a: \"unterminated\n").status().code(), Code::kDataLoss);
  EXPECT_EQ(parse_yaml("a: 1\n    b: 2\n").status().code(), Code::kDataLoss);
}

}  // namespace
}  // namespace ferry::profile
