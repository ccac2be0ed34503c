// Parsing /proc/interrupts and attributing and classifying NIC interrupts.
#include "platform/irq.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <set>
#include <sstream>

#include "platform/host_files.h"
#include "platform/text.h"

namespace ferry::platform {
namespace {

bool is_trigger(std::string_view t) {
  // "1-edge", "524288-edge", "5-fasteoi", or a bare "edge"; old kernels fuse
  // it into the chip ("PCI-MSI-edge").
  for (std::string_view suffix : {"edge", "level", "fasteoi", "simple", "percpu"}) {
    if (t.size() >= suffix.size() && t.substr(t.size() - suffix.size()) == suffix) return true;
  }
  return false;
}

std::string join(const std::vector<std::string_view>& parts, size_t from) {
  std::string out;
  for (size_t i = from; i < parts.size(); ++i) {
    if (!out.empty()) out += ' ';
    out += parts[i];
  }
  return out;
}

// A name cut into lower-case words, each with its trailing number:
// "mlx5_comp12@pci:..." -> (mlx, 5), (comp, 12).
struct Token {
  std::string word;
  int number = -1;
};

std::vector<Token> tokenize(std::string_view name) {
  size_t at = name.find('@');
  if (at != std::string_view::npos) name = name.substr(0, at);
  std::vector<Token> out;
  size_t i = 0;
  while (i < name.size()) {
    while (i < name.size() && !std::isalnum(static_cast<unsigned char>(name[i]))) ++i;
    size_t j = i;
    while (j < name.size() && std::isalnum(static_cast<unsigned char>(name[j]))) ++j;
    if (j > i) {
      std::string t(name.substr(i, j - i));
      for (char& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      size_t d = t.size();
      while (d > 0 && std::isdigit(static_cast<unsigned char>(t[d - 1]))) --d;
      Token tok;
      tok.word = t.substr(0, d);
      if (d < t.size() && t.size() - d < 9) tok.number = std::stoi(t.substr(d));
      out.push_back(std::move(tok));
    }
    i = j;
  }
  return out;
}

// `needle` occurs in `hay` as a whole word (not followed or preceded by a
// letter or digit): eth1 is in "eth1-TxRx-0" but not in "eth10-TxRx-0".
bool contains_word(std::string_view hay, std::string_view needle) {
  if (needle.empty()) return false;
  for (size_t pos = hay.find(needle); pos != std::string_view::npos; pos = hay.find(needle, pos + 1)) {
    bool left = pos == 0 || !std::isalnum(static_cast<unsigned char>(hay[pos - 1]));
    size_t end = pos + needle.size();
    bool right = end == hay.size() || !std::isalnum(static_cast<unsigned char>(hay[end]));
    if (left && right) return true;
  }
  return false;
}

bool has_word(const std::vector<Token>& toks, std::initializer_list<std::string_view> words) {
  for (const Token& t : toks) {
    for (std::string_view w : words) {
      if (t.word == w) return true;
    }
  }
  return false;
}

bool is_gve_block(const std::vector<Token>& toks) {
  return toks.size() >= 3 && toks[0].word == "gve" && toks[1].word == "ntfy" && toks[2].word == "blk" &&
         toks[2].number >= 0;
}

}  // namespace

std::string_view irq_kind_name(IrqKind kind) {
  switch (kind) {
    case IrqKind::kTx:
      return "tx";
    case IrqKind::kRx:
      return "rx";
    case IrqKind::kTxRx:
      return "txrx";
    case IrqKind::kOther:
      return "other";
    case IrqKind::kUnknown:
      break;
  }
  return "unknown";
}

Result<IrqKind> parse_irq_kind(std::string_view text) {
  for (IrqKind k : {IrqKind::kTx, IrqKind::kRx, IrqKind::kTxRx, IrqKind::kOther, IrqKind::kUnknown}) {
    if (irq_kind_name(k) == text) return k;
  }
  return Status(Code::kInvalidArgument,
                "unknown IRQ kind \"" + std::string(text) + "\" (expected tx, rx, txrx, other or unknown)");
}

const InterruptLine* InterruptTable::find(int irq) const {
  for (const InterruptLine& l : lines) {
    if (l.irq == irq) return &l;
  }
  return nullptr;
}

Result<InterruptTable> parse_interrupts(std::string_view text, std::string_view what) {
  InterruptTable table;
  size_t line_no = 0;
  for (std::string_view line : split_lines(text)) {
    ++line_no;
    if (line_no == 1) {
      for (std::string_view t : split_words(line)) {
        uint64_t cpu = 0;
        if (t.size() < 4 || t.substr(0, 3) != "CPU" || !parse_u64(t.substr(3), cpu)) {
          return Status(Code::kInvalidArgument,
                        std::string(what) + ": line 1: expected CPU column names, found \"" + std::string(t) + "\"");
        }
        table.cpus.push_back(static_cast<int>(cpu));
      }
      if (table.cpus.empty()) {
        return Status(Code::kInvalidArgument, std::string(what) + ": line 1: no CPU columns in the header");
      }
      continue;
    }
    std::vector<std::string_view> toks = split_words(line);
    if (toks.empty()) continue;
    if (toks[0].back() != ':') {
      return Status(Code::kInvalidArgument, std::string(what) + ": line " + std::to_string(line_no) +
                                                ": expected an IRQ number and ':', found \"" + std::string(toks[0]) +
                                                "\"");
    }
    InterruptLine row;
    row.id = std::string(toks[0].substr(0, toks[0].size() - 1));
    uint64_t num = 0;
    if (parse_u64(row.id, num)) row.irq = static_cast<int>(num);
    size_t i = 1;
    for (; i < toks.size() && row.counts.size() < table.cpus.size(); ++i) {
      uint64_t v = 0;
      if (!parse_u64(toks[i], v)) break;
      row.counts.push_back(v);
    }
    if (row.irq >= 0) {
      if (row.counts.size() != table.cpus.size()) {
        return Status(Code::kInvalidArgument, std::string(what) + ": line " + std::to_string(line_no) + ": IRQ " +
                                                  row.id + " has " + std::to_string(row.counts.size()) +
                                                  " counts for " + std::to_string(table.cpus.size()) + " CPUs");
      }
      std::vector<std::string_view> rest(toks.begin() + static_cast<long>(i), toks.end());
      size_t trigger = rest.size();
      for (size_t k = 0; k < rest.size(); ++k) {
        if (is_trigger(rest[k])) {
          trigger = k;
          break;
        }
      }
      if (trigger < rest.size()) {
        row.chip = join(std::vector<std::string_view>(rest.begin(), rest.begin() + static_cast<long>(trigger)), 0);
        row.name = join(rest, trigger + 1);
      } else if (!rest.empty()) {
        row.chip = std::string(rest[0]);
        row.name = join(rest, 1);
      }
    } else {
      row.counts.resize(table.cpus.size(), 0);  // ERR:, MIS: carry one total
      row.name = join(toks, i);
    }
    table.lines.push_back(std::move(row));
  }
  if (table.cpus.empty()) return Status(Code::kInvalidArgument, std::string(what) + ": empty");
  return table;
}

IrqClass classify_irq_name(std::string_view name) {
  std::vector<Token> toks = tokenize(name);
  IrqClass c;
  for (size_t i = toks.size(); i-- > 1;) {
    if (toks[i].number >= 0) {
      c.queue = toks[i].number;
      break;
    }
  }
  if (is_gve_block(toks)) {
    c.queue = toks[2].number;
    c.basis = "gve notify block: the name does not say TX or RX";
    return c;
  }
  bool txrx = has_word(toks, {"txrx", "rxtx", "trx", "combined", "comp", "virtqueues"});
  bool rx = has_word(toks, {"rx", "input", "rxq", "recv"});
  bool tx = has_word(toks, {"tx", "output", "txq", "xmit"});
  if (txrx || (rx && tx)) {
    c.kind = IrqKind::kTxRx;
    c.basis = "name says one vector serves a TX and an RX queue";
  } else if (rx) {
    c.kind = IrqKind::kRx;
    c.basis = has_word(toks, {"input"}) ? "name says rx (virtio input queue)" : "name says rx";
  } else if (tx) {
    c.kind = IrqKind::kTx;
    c.basis = has_word(toks, {"output"}) ? "name says tx (virtio output queue)" : "name says tx";
  } else if (has_word(toks, {"mgmnt", "mgmt", "async", "config", "ctrl", "control", "cmd", "pages", "admin", "adminq",
                             "aenq", "misc", "err", "error", "lsc", "fw", "event"})) {
    c.kind = IrqKind::kOther;
    c.queue = -1;
    c.basis = "name says management or control";
  } else {
    c.basis = "the name does not say TX or RX";
  }
  return c;
}

std::vector<NicIrq> find_nic_irqs(std::string_view root, const Topology& topo, const InterruptTable& table) {
  std::vector<NicIrq> out;
  std::set<int> taken;
  for (const NicInfo& nic : topo.nics) {
    std::set<int> msi;
    if (!nic.pci_path.empty()) {
      if (auto names = list_dir(under_root(root, nic.pci_path) + "/msi_irqs"); names.ok()) {
        for (const std::string& n : *names) {
          uint64_t v = 0;
          if (parse_u64(n, v)) msi.insert(static_cast<int>(v));
        }
      }
    }
    std::string virtio;
    if (size_t slash = nic.device_path.rfind('/'); slash != std::string::npos) {
      std::string base = nic.device_path.substr(slash + 1);
      if (base.compare(0, 6, "virtio") == 0) virtio = base;
    }
    std::vector<NicIrq> mine;
    for (const InterruptLine& line : table.lines) {
      if (line.irq < 0 || taken.count(line.irq) != 0) continue;
      bool by_msi = msi.count(line.irq) != 0;
      bool by_name = contains_word(line.name, nic.name) || (!virtio.empty() && contains_word(line.name, virtio)) ||
                     (!nic.pci_address.empty() && (line.name.find(nic.pci_address) != std::string::npos ||
                                                   line.chip.find(nic.pci_address) != std::string::npos));
      if (!by_msi && !by_name) continue;
      NicIrq irq;
      irq.irq = line.irq;
      irq.nic = nic.name;
      irq.name = line.name;
      irq.found_by = by_msi && by_name ? "msi_irqs+name" : (by_msi ? "msi_irqs" : "name");
      IrqClass c = classify_irq_name(line.name);
      irq.kind = c.kind;
      irq.queue = c.queue;
      irq.basis = c.basis;
      mine.push_back(std::move(irq));
    }
    // gve: blocks [0, n/2) serve TX queues, [n/2, n) RX queues
    // (gve_tx_idx_to_ntfy / gve_rx_idx_to_ntfy in the driver).
    int blocks = 0;
    for (const NicIrq& i : mine) blocks += is_gve_block(tokenize(i.name)) ? 1 : 0;
    if (blocks >= 2) {
      int half = blocks / 2;
      for (NicIrq& i : mine) {
        if (!is_gve_block(tokenize(i.name))) continue;
        int b = i.queue;
        std::string of = "gve convention: block " + std::to_string(b) + " of " + std::to_string(blocks);
        if (b < half) {
          i.kind = IrqKind::kTx;
          i.basis = of + " (0-" + std::to_string(half - 1) + " serve TX queues)";
        } else {
          i.kind = IrqKind::kRx;
          i.queue = b - half;
          i.basis = of + " (" + std::to_string(half) + "-" + std::to_string(blocks - 1) + " serve RX queues)";
        }
      }
    }
    for (NicIrq& i : mine) {
      taken.insert(i.irq);
      out.push_back(std::move(i));
    }
  }
  return out;
}

std::string irq_affinity_path(int irq) { return "/proc/irq/" + std::to_string(irq) + "/smp_affinity_list"; }

Result<CpuList> read_irq_affinity(std::string_view root, int irq) {
  std::string path = under_root(root, irq_affinity_path(irq));
  auto text = read_text_file(path);
  if (!text.ok()) {
    if (text.status().code() == Code::kNotFound) {
      return Status(Code::kNotFound, "IRQ " + std::to_string(irq) + ": no affinity file " + path);
    }
    return text.status();
  }
  return parse_cpu_list(*text, path);
}

}  // namespace ferry::platform
