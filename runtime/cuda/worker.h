// worker.h: the process-level steps of one CUDA worker, in the order they must happen: read who we
// are from the launcher's environment, cudaSetDevice(local_rank) before any other CUDA/NCCL call,
// rendezvous, device communicator (make_device_comm.h: local, peer or NCCL), failure watch; plus the
// device-memory plan check.
// Used by cuda_session.cpp (run_cuda_worker) and tools/tprun/cmd_bench_load.cpp.
// Does not own: loading weights (weight_arena.h), the transformer (cuda_runner.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/manifest.h"
#include "model/parallel_layout.h"
#include "runtime/comm_select.h"
#include "runtime/cuda/device_comm.h"
#include "runtime/host_exchange.h"
#include "runtime/launcher.h"
#include "runtime/rank_groups.h"
#include "runtime/rendezvous.h"
#include "runtime/session_types.h"

namespace tpshard::cuda {

/// Device memory readings taken while the worker starts (bytes, from cudaMemGetInfo).
struct DeviceMemoryMarks {
  size_t total = 0;
  size_t free_after_context = 0;  ///< after the CUDA context exists
  size_t free_after_comm = 0;     ///< after the communicator exists (and ran its first collective)
  size_t context_bytes() const { return total - free_after_context; }  ///< incl. other processes on the GPU
  size_t comm_bytes() const { return free_after_context - free_after_comm; }  ///< the communicator's memory
};

/// One worker process of a CUDA job (dp_size x pp_size x tp_size processes). The constructor does, in
/// order: read_worker_env (or rank 0 of 1 when no launcher is involved), check world size == the grid's
/// (RankGrid of opts), cudaSetDevice(local_rank), create the context, rendezvous on the master address,
/// start watching the peers (when another rank fails this process prints its message and exits with
/// kExitPeerFailed within about a second), then meet each of its groups (rank_groups.h) and build on
/// them: the communicator of its tp group (make_device_comm.h; NCCL only when needed), the two-rank
/// communicators to its neighbouring stages, and the replicas' exchange (replica output ranks).
/// Ranks != 0 get stdout on /dev/null. Throws Error naming the rank.
class CudaWorker {
 public:
  explicit CudaWorker(const SessionOptions& opts);
  ~CudaWorker();
  CudaWorker(const CudaWorker&) = delete;
  CudaWorker& operator=(const CudaWorker&) = delete;

  int world_rank() const { return env_.rank; }
  int world_size() const { return env_.world_size; }
  const RankGrid& grid() const { return grid_; }
  const RankCoord& coord() const { return coord_; }  ///< this process's (dp_rank, pp_stage, tp_rank)
  int tp_rank() const { return coord_.tp_rank; }
  int tp_size() const { return grid_.tp_size; }
  int device() const { return device_; }
  const WorkerEnv& env() const { return env_; }
  DeviceCommunicator& comm() { return *comm_; }  ///< this rank's tp group
  /// The two-rank communicator with the same tp_rank of stage pp_stage - 1 (this rank its rank 1) /
  /// pp_stage + 1 (its rank 0); nullptr on the first / last stage.
  DeviceCommunicator* to_prev_stage() { return to_prev_stage_.get(); }
  DeviceCommunicator* to_next_stage() { return to_next_stage_.get(); }
  /// The exchange of the replicas' output ranks (rank() = dp_rank); nullptr unless dp_size > 1 and this
  /// is tp_rank 0 of stage 0.
  HostExchange* replica_exchange() { return replica_exchange_.get(); }
  /// Every rank of this replica (RankContext::replica_ranks); never null.
  HostExchange* replica_ranks() { return replica_ranks_.get(); }
  const CommChoice& comm_choice() const { return comm_choice_; }  ///< which communicator, and why
  const DeviceMemoryMarks& marks() const { return marks_; }
  /// Tell the other ranks this one failed (they stop at once); call before rethrowing.
  void report_failure(const std::string& message);

 private:
  WorkerEnv env_;
  int device_ = 0;  ///< the GPU: env_.local_rank (or local_rank % visible GPUs under TPSHARD_TEST_SHARE_GPUS)
  RankGrid grid_;    ///< the job's ranks: dp_size x pp_size x tp_size
  RankCoord coord_;
  DeviceMemoryMarks marks_;
  std::unique_ptr<Rendezvous> rendezvous_;
  std::vector<std::unique_ptr<Rendezvous>> group_rendezvous_;  ///< one per group of this rank (rank_groups.h)
  std::unique_ptr<DeviceCommunicator> comm_;
  std::unique_ptr<DeviceCommunicator> to_prev_stage_, to_next_stage_;
  std::unique_ptr<HostExchange> replica_exchange_;
  std::unique_ptr<HostExchange> replica_ranks_;
  CommChoice comm_choice_;
};

/// Throws Error when the memory plan of model/memory_plan.h (weights + kv_cache + activations +
/// workspace, the numbers `tpshard plan` prints) exceeds free_bytes, giving the numbers and settings that
/// would fit: a smaller --max-batch, a smaller --max-seq-len, or a larger --tp among the manifest's sizes.
/// With pp_size > 1 the plan of the (pp_size, tp_size) layout, and only pp_stage's ranks count.
void check_memory_plan(const Manifest& m, const std::string& model_dir, int tp_size, int max_batch, int max_seq_len,
                       size_t free_bytes, size_t total_bytes, int pp_size = 1, int pp_stage = 0);

/// Seconds to wait for peers (rendezvous, NCCL init, collectives): TPRUN_NCCL_TIMEOUT, default 300.
double worker_timeout_s();

}  // namespace tpshard::cuda
