// process_memory.h: host memory of this process, as reports (tprun's summary line, bench-load) show it.
#pragma once
#include <cstdint>

namespace tpshard {

/// Peak resident set size of the current program image, in bytes: VmHWM of /proc/self/status.
/// Not getrusage's ru_maxrss, which Linux carries over fork and exec: a tprun started by a process that
/// once held many GB (e.g. a Python script that just wrote a checkpoint) would report the parent's peak.
/// Falls back to ru_maxrss where /proc is unavailable.
uint64_t peak_rss_bytes();

/// Current resident set size in bytes (VmRSS of /proc/self/status); 0 when unavailable.
uint64_t current_rss_bytes();

/// The private part of the current RSS (RssAnon: heap, stacks, anonymous and pinned host buffers) and
/// the file-backed part (RssFile: the program's and shared libraries' pages, mapped files), in bytes;
/// 0 when unavailable. A loading rank's own memory is RssAnon.
uint64_t rss_anon_bytes();
uint64_t rss_file_bytes();

}  // namespace tpshard
