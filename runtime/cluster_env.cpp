// cluster_env.cpp: see cluster_env.h.
#include "runtime/cluster_env.h"

#include <cstdlib>

#include "format/error.h"

namespace tpshard {
namespace {

constexpr int kFallbackPort = 29517;

Error bad_hostlist(const std::string& list, const std::string& why) {
  return Error("Slurm hostlist '" + list + "': " + why,
               "a hostlist is comma-separated names with optional [a-b,c] ranges, e.g. node[01-03,07]; "
               "check SLURM_STEP_NODELIST / SLURM_JOB_NODELIST, or export TPRUN_MASTER=HOST:PORT");
}

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

/// "01-03,07" -> {"01","02","03","07"} (padding of the lower bound kept).
std::vector<std::string> expand_ranges(const std::string& list, const std::string& ranges) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= ranges.size()) {
    size_t comma = ranges.find(',', start);
    if (comma == std::string::npos) comma = ranges.size();
    const std::string item = ranges.substr(start, comma - start);
    const size_t dash = item.find('-');
    const std::string lo = item.substr(0, dash);
    const std::string hi = dash == std::string::npos ? lo : item.substr(dash + 1);
    if (!all_digits(lo) || !all_digits(hi) || lo.size() > 9 || hi.size() > 9)
      throw bad_hostlist(list, "'" + item + "' is not a number or a range a-b");
    const long a = std::atol(lo.c_str()), b = std::atol(hi.c_str());
    if (b < a || b - a > 100000) throw bad_hostlist(list, "range '" + item + "' is empty or too large");
    for (long v = a; v <= b; ++v) {
      std::string s = std::to_string(v);
      if (s.size() < lo.size()) s.insert(0, lo.size() - s.size(), '0');
      out.push_back(s);
    }
    start = comma + 1;
  }
  return out;
}

}  // namespace

std::vector<std::string> expand_slurm_hostlist(const std::string& hostlist) {
  std::vector<std::string> hosts;
  // Split on commas outside brackets; each piece is text with any number of [ranges] (cartesian product).
  size_t i = 0;
  while (i < hostlist.size()) {
    std::vector<std::string> names{""};
    for (; i < hostlist.size() && hostlist[i] != ','; ++i) {
      if (hostlist[i] == ']') throw bad_hostlist(hostlist, "']' without '['");
      if (hostlist[i] != '[') {
        for (std::string& n : names) n += hostlist[i];
        continue;
      }
      const size_t close = hostlist.find(']', i);
      if (close == std::string::npos) throw bad_hostlist(hostlist, "'[' without ']'");
      const std::string inner = hostlist.substr(i + 1, close - i - 1);
      if (inner.find('[') != std::string::npos) throw bad_hostlist(hostlist, "nested '['");
      std::vector<std::string> grown;
      for (const std::string& n : names)
        for (const std::string& v : expand_ranges(hostlist, inner)) grown.push_back(n + v);
      names.swap(grown);
      i = close;
    }
    for (std::string& n : names)
      if (!n.empty()) hosts.push_back(std::move(n));
    ++i;  // the comma
  }
  if (hosts.empty()) throw bad_hostlist(hostlist, "no host names");
  return hosts;
}

int slurm_master_port(const std::string& job_id, const std::string& step_id, const std::string& resv_ports) {
  const std::string first = resv_ports.substr(0, resv_ports.find_first_of(",-"));
  if (all_digits(first) && first.size() <= 5) {
    const int port = std::atoi(first.c_str());
    if (port > 0 && port < 65536) return port;
  }
  if (!all_digits(job_id)) return kFallbackPort;
  const int job = std::atoi(job_id.substr(job_id.size() > 3 ? job_id.size() - 3 : 0).c_str());
  const int step = all_digits(step_id) ? std::atoi(step_id.substr(step_id.size() > 1 ? step_id.size() - 1 : 0).c_str()) : 0;
  return 15000 + 10 * job + step;
}

int slurm_tasks_on_node(const std::string& tasks_per_node, int node_id) {
  if (node_id < 0) return 0;
  size_t i = 0;
  int node = 0;
  while (i < tasks_per_node.size()) {
    size_t end = tasks_per_node.find(',', i);
    if (end == std::string::npos) end = tasks_per_node.size();
    const std::string item = tasks_per_node.substr(i, end - i);  // "4" or "2(x3)"
    const size_t paren = item.find('(');
    const std::string count = item.substr(0, paren);
    std::string times = "1";
    if (paren != std::string::npos) {
      if (item.size() < paren + 4 || item.compare(paren, 2, "(x") != 0 || item.back() != ')') return 0;
      times = item.substr(paren + 2, item.size() - paren - 3);
    }
    if (!all_digits(count) || !all_digits(times) || count.size() > 6 || times.size() > 6) return 0;
    node += std::atoi(times.c_str());
    if (node_id < node) return std::atoi(count.c_str());
    i = end + 1;
  }
  return 0;
}

int ompi_master_port(const std::string& job_id) {
  if (!all_digits(job_id) || job_id.size() > 18) return kFallbackPort;
  return 20000 + static_cast<int>(std::strtoull(job_id.c_str(), nullptr, 10) % 10000);
}

std::string ompi_hnp_host(const std::string& hnp_uri) {
  std::string v6;
  size_t pos = 0;
  while ((pos = hnp_uri.find("://", pos)) != std::string::npos) {
    const size_t scheme_start = hnp_uri.rfind(';', pos);
    const std::string scheme =
        hnp_uri.substr(scheme_start == std::string::npos ? 0 : scheme_start + 1,
                       pos - (scheme_start == std::string::npos ? 0 : scheme_start + 1));
    pos += 3;
    size_t end = hnp_uri.find(';', pos);
    if (end == std::string::npos) end = hnp_uri.size();
    std::string addrs = hnp_uri.substr(pos, end - pos);  // "a,b:port" or "[v6],[v6]:port"
    const size_t colon = addrs.rfind(':');
    if (colon != std::string::npos) addrs = addrs.substr(0, colon);
    const std::string first = addrs.substr(0, addrs.find(','));
    if (first.empty()) continue;
    if (scheme == "tcp") return first;
    if (scheme == "tcp6" && v6.empty()) v6 = first;
  }
  return v6;
}

}  // namespace tpshard
