// process_memory.h: host memory of this process, as reports (tprun's summary line, bench-load) show it.
#pragma once
#include <cstdint>
#include <string>

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

/// Host memory this process may still take, in bytes: MemAvailable of /proc/meminfo, lowered to the
/// cgroup v2 limit's headroom (memory.max - memory.current of /sys/fs/cgroup) when one is set, as under
/// Slurm or a container. 0 when unknown.
uint64_t available_host_memory_bytes();

/// The CPU backend's memory preflight, before any weight is read. available: available_host_memory_bytes()
/// (0: unknown, no check). Throws Error naming model_dir when weights_bytes (f32, all ranks of the
/// process) exceed it (hint: --device cuda, a larger machine or a smaller model). Returns a warning when
/// weights + kv_cache_bytes do (the kv_cache is reserved for max_batch x max_seq_len positions but its
/// pages are only taken as positions fill, so a job may still fit), else an empty string.
std::string check_cpu_memory(uint64_t weights_bytes, uint64_t kv_cache_bytes, uint64_t available,
                             const std::string& model_dir);

}  // namespace tpshard
