// stage_link.cpp: pipeline_report_line (stage_link.h).
#include "runtime/stage_link.h"

#include <cstdio>

namespace tpshard {

std::string pipeline_report_line(int pp_stage, const Range& layers, double forward_s, double wait_s) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "pp_stage %d (layers %lld-%lld): forward %.3f s, of which waiting for other stages %.3f s (%.1f%%)",
                pp_stage, static_cast<long long>(layers.begin), static_cast<long long>(layers.end - 1), forward_s, wait_s,
                forward_s > 0 ? 100.0 * wait_s / forward_s : 0.0);
  return buf;
}

}  // namespace tpshard
