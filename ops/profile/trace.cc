// Chrome trace JSON writing and parsing.
#include "profile/trace.h"

#include <nlohmann/json.hpp>

namespace ferry::profile {
namespace {

using json = nlohmann::ordered_json;

json to_json(const TraceValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return *i;
  if (const auto* d = std::get_if<double>(&v)) return *d;
  return std::get<std::string>(v);
}

TraceValue from_json(const json& j) {
  if (j.is_number_integer()) return j.get<int64_t>();
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) return j.get<std::string>();
  return j.dump();
}

json args_json(const std::vector<TraceArg>& args) {
  json out = json::object();
  for (const TraceArg& a : args) out[a.key] = to_json(a.value);
  return out;
}

}  // namespace

const TraceValue* TraceEvent::arg(std::string_view key) const {
  for (const TraceArg& a : args) {
    if (a.key == key) return &a.value;
  }
  return nullptr;
}

std::string trace_to_json(const Trace& trace) {
  json events = json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", trace.pid}, {"args", {{"name", trace.process_name}}}});
  for (const auto& [tid, name] : trace.thread_names) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", trace.pid}, {"tid", tid}, {"args", {{"name", name}}}});
  }
  for (const TraceEvent& e : trace.events) {
    json args = args_json(e.args);
    args["start_ns"] = e.start_ns;
    args["dur_ns"] = e.duration_ns;
    events.push_back({{"name", e.name},
                      {"cat", e.category},
                      {"ph", "X"},
                      {"ts", static_cast<double>(e.start_ns) / 1000.0},
                      {"dur", static_cast<double>(e.duration_ns) / 1000.0},
                      {"pid", e.pid},
                      {"tid", e.tid},
                      {"args", args}});
  }
  json doc = {{"traceEvents", events}, {"displayTimeUnit", "ns"}, {"otherData", args_json(trace.other_data)}};
  // One event per line: readable, diffable, and still one JSON document.
  std::string out = "{\"displayTimeUnit\":\"ns\",\n\"otherData\":" + doc["otherData"].dump() + ",\n\"traceEvents\":[\n";
  for (size_t i = 0; i < events.size(); ++i) {
    out += events[i].dump();
    out += i + 1 < events.size() ? ",\n" : "\n";
  }
  out += "]}\n";
  return out;
}

Result<Trace> parse_trace(std::string_view json_text) {
  json doc = json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Status(Code::kDataLoss, "trace: not valid JSON");
  const json* events = nullptr;
  if (doc.is_array()) {
    events = &doc;
  } else if (doc.is_object() && doc.contains("traceEvents") && doc["traceEvents"].is_array()) {
    events = &doc["traceEvents"];
  } else {
    return Status(Code::kDataLoss, "trace: expected an object with a traceEvents array");
  }
  Trace trace;
  if (doc.is_object() && doc.contains("otherData") && doc["otherData"].is_object()) {
    for (const auto& [k, v] : doc["otherData"].items()) trace.other_data.push_back({k, from_json(v)});
  }
  size_t index = 0;
  for (const json& e : *events) {
    auto fail = [&](const std::string& why) {
      return Status(Code::kDataLoss, "trace event " + std::to_string(index) + ": " + why);
    };
    ++index;
    if (!e.is_object()) return fail("not an object");
    std::string ph = e.value("ph", "");
    int pid = e.contains("pid") && e["pid"].is_number_integer() ? e["pid"].get<int>() : 0;
    int tid = e.contains("tid") && e["tid"].is_number_integer() ? e["tid"].get<int>() : 0;
    const json args = e.contains("args") && e["args"].is_object() ? e["args"] : json::object();
    if (ph == "M") {
      std::string what = e.value("name", "");
      std::string name = args.contains("name") && args["name"].is_string() ? args["name"].get<std::string>() : "";
      if (what == "process_name") {
        trace.pid = pid;
        trace.process_name = name;
      } else if (what == "thread_name") {
        trace.thread_names.emplace_back(tid, name);
      }
      continue;
    }
    if (ph != "X") continue;
    if (!e.contains("name") || !e["name"].is_string()) return fail("no name");
    TraceEvent ev;
    ev.name = e["name"].get<std::string>();
    ev.category = e.value("cat", "");
    ev.pid = pid;
    ev.tid = tid;
    if (args.contains("start_ns") && args["start_ns"].is_number_integer()) {
      ev.start_ns = args["start_ns"].get<int64_t>();
    } else if (e.contains("ts") && e["ts"].is_number()) {
      ev.start_ns = static_cast<int64_t>(e["ts"].get<double>() * 1000.0);
    } else {
      return fail("no ts");
    }
    if (args.contains("dur_ns") && args["dur_ns"].is_number_integer()) {
      ev.duration_ns = args["dur_ns"].get<int64_t>();
    } else if (e.contains("dur") && e["dur"].is_number()) {
      ev.duration_ns = static_cast<int64_t>(e["dur"].get<double>() * 1000.0);
    }
    for (const auto& [k, v] : args.items()) {
      if (k == "start_ns" || k == "dur_ns") continue;
      ev.args.push_back({k, from_json(v)});
    }
    trace.events.push_back(std::move(ev));
  }
  return trace;
}

}  // namespace ferry::profile
