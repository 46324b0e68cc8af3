// load_options.cpp: the parsers and defaults of load_options.h.
#include "runtime/load/load_options.h"

#include <algorithm>

#include "format/error.h"
#include "runtime/cpu_budget.h"

namespace tpshard::load {

IoEngine parse_io_engine(const std::string& name, const std::string& what) {
  if (name == "auto") return IoEngine::Auto;
  if (name == "pread") return IoEngine::Pread;
  if (name == "uring" || name == "io_uring") return IoEngine::Uring;
  throw Error(what + ": unknown read path '" + name + "'", "use auto, pread or uring");
}

RingPinning parse_ring_pinning(const std::string& name, const std::string& what) {
  if (name == "register") return RingPinning::RegisterLazy;
  if (name == "register-upfront") return RingPinning::RegisterUpfront;
  if (name == "alloc") return RingPinning::HostAlloc;
  throw Error(what + ": unknown ring pinning '" + name + "'", "use register, register-upfront or alloc");
}

const char* ring_pinning_name(RingPinning p) {
  switch (p) {
    case RingPinning::RegisterLazy: return "register";
    case RingPinning::RegisterUpfront: return "register-upfront";
    case RingPinning::HostAlloc: return "alloc";
  }
  return "?";
}

int default_reader_threads(int local_ranks) {
  return std::clamp(usable_cpus() / std::max(1, local_ranks), 2, 32);  // affinity mask and cgroup quota
}

}  // namespace tpshard::load
