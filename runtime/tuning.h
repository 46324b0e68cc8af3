// tuning.h: every runtime switch of tpshard read from the process environment (TPSHARD_* and TPRUN_*
// variables), in one place and with one strict parser. The table of variables is docs/TUNING.md; a test
// (tests/runtime/test_tuning.cpp) fails when the source reads a variable that the table does not list.
//
// Booleans take exactly "0" or "1"; unset or empty means the default, "0" means the default too, and any
// other value is an Error naming the variable, the value and the legal values. Numbers must be plain
// decimal numbers in the documented range.
//
// Launch-protocol variables (TPRUN_RANK, TPRUN_WORLD_SIZE, ..., RANK, SLURM_*, OMPI_*) are not tuning:
// runtime/launcher.cpp reads them (docs/TUNING.md lists them too).
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/log.h"

namespace tpshard {

struct Tuning {
  bool force_nccl = false;          ///< TPSHARD_COMM=nccl: NCCL at any tp_size
  bool custom_all_reduce = true;    ///< TPSHARD_NO_CUSTOM_ALL_REDUCE=1: false (NCCL for every all_reduce at tp > 1)
  double custom_all_reduce_timeout_s = 300.0;  ///< TPSHARD_CUSTOM_ALL_REDUCE_TIMEOUT_S; 0 = spin without limit
  double nccl_timeout_s = 300.0;    ///< TPRUN_NCCL_TIMEOUT: rendezvous, NCCL init and collectives, > 0
  bool cuda_graphs = true;          ///< TPSHARD_NO_CUDA_GRAPHS=1: false (eager decode steps)
  bool lookahead = true;            ///< TPSHARD_NO_LOOKAHEAD=1: false (no greedy decode lookahead)
  bool pdl = true;                  ///< TPSHARD_NO_PDL=1: false (ordinary launches instead of PDL)
  bool shared_prefix = true;        ///< TPSHARD_NO_SHARED_PREFIX=1: false (every prompt prefilled whole; A/B)
  /// TPSHARD_CASCADE_ATTENTION=1: true (CUDA decode: rows sharing a prefix read it once per block in the
  /// cascade prefix pass; off by default: slower than each row reading it, measured in docs/RUNTIME.md)
  bool cascade_attention = false;
  /// TPSHARD_LOAD_DIRECT_IO=1: weights are read with O_DIRECT through io_uring (a cold page cache: the
  /// disk's queue kept full; runtime/load/chunk_reader.h); default: page-cache reads by pread
  bool load_direct_io = false;
  bool sync_check = false;          ///< TPSHARD_SYNC_CHECK=1: synchronize after every checked kernel launch
  /// TPSHARD_TEST_SHARE_GPUS=1 (tests only): rank with local rank L uses GPU L % visible GPUs, so several
  /// ranks share one GPU over the peer communicator (CUDA IPC within one device). Correct, not fast.
  bool share_gpus = false;
  /// TPSHARD_LOG_LEVEL=quiet|info|verbose: the log level of the tools when -q / -v are not given
  /// (common/log.h); nullopt when unset.
  std::optional<LogLevel> log_level;
  /// OMP_NUM_THREADS (other programs' convention, honoured as a hint): the CPU backend's threads per rank
  /// when --threads is not given, capped at the usable CPUs (runtime/cpu_budget.h); 0 when unset or unusable.
  int omp_num_threads = 0;
  /// GLOO_SOCKET_IFNAME (gloo's convention): the network interface the CPU backend's processes bind
  /// across hosts (runtime/cpu/gloo_comm.cpp); empty: the host name's address.
  std::string gloo_socket_ifname;
};

/// One variable of Tuning: its name, legal values, default and effect (docs/TUNING.md has the same rows).
struct TuningVariable {
  const char* name;
  const char* legal;
  const char* default_value;
};

/// Every variable parse_tuning reads, in the order of docs/TUNING.md.
const std::vector<TuningVariable>& tuning_variables();

/// Looks a variable up: returns its value or nullptr when unset.
using EnvLookup = std::function<const char*(const char* name)>;

/// Parses every variable of tuning_variables() through `lookup`. Throws Error on the first illegal value.
Tuning parse_tuning(const EnvLookup& lookup);

/// TPSHARD_LOG_LEVEL alone (tpshard, which reads no other variable: another one's bad value must not
/// stop a conversion). Throws Error when its value is illegal.
std::optional<LogLevel> log_level_from_environment();

/// The process environment parsed once (the first call; thread-safe); later calls return the same values.
/// Throws Error (every call) when a value is illegal.
const Tuning& tuning();

}  // namespace tpshard
