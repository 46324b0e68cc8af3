// session_types.h: what both backends' sessions share: the options of a session, the context a rank's
// function gets, and the model checks both apply (max_seq_len, tokenizer). No backend includes; the
// dispatcher that picks a backend is runtime/session.h.
#pragma once
#include <memory>
#include <string>

#include "model/manifest.h"
#include "runtime/comm.h"
#include "runtime/host_exchange.h"
#include "runtime/model_runner.h"
#include "tokenizer/tokenizer.h"

namespace tpshard {

enum class Device { Auto, Cpu, Cuda };

struct SessionOptions {
  std::string model_dir;
  int tp_size = 1;
  int pp_size = 1;               ///< pipeline stages (the model converted with --pp)
  int dp_size = 1;               ///< data-parallel replicas: eval / generate --input split their items
  int micro_batches = 0;         ///< pipeline micro-batches per step; 0 = 2 x pp_size
  Device device = Device::Auto;  ///< Auto: CUDA when this build has it and a GPU is present, else CPU
  /// kv_cache slots; 0 (default): the CPU backend takes kDefaultCpuMaxBatch, the CUDA backend as many as
  /// fit in gpu_memory_utilization of each GPU (at most kMaxAutoBatch; the replica's ranks take the least).
  int max_batch = 0;
  /// CUDA, automatic max_batch: the fraction of each GPU's memory the job may hold (vLLM's
  /// gpu_memory_utilization: memory already in use on the GPU counts against it).
  double gpu_memory_utilization = 0.9;
  int max_seq_len = 0;           ///< 0: min(max_position_embeddings, 2048)
  bool verify_hashes = true;     ///< check XXH3 of every tensor while loading
  int nnodes = 1;                ///< nodes, one tprun launcher each (like torchrun --nnodes); CPU: processes
  int node_rank = 0;             ///< this node's index
  std::string master_addr;       ///< HOST:PORT of the rendezvous (rank 0's node); empty = 127.0.0.1:free port
  /// CPU: one process per rank (started by tprun's launcher, collectives over gloo) instead of one thread
  /// per rank; implied by nnodes > 1 and by a cluster launcher (mpirun, srun, torchrun).
  bool cpu_processes = false;
  int cpu_threads = 0;           ///< CPU: matmul threads per rank; 0 = max(1, usable_cpus() / tp_size), runtime/cpu_budget.h
  bool quiet = false;            ///< do not print the "backend" line on stderr
  /// CUDA launcher: seconds between forwarding SIGTERM / SIGINT to the workers and SIGKILL (serve raises
  /// it for its drain, serve/server.h). A worker failure still stops the others with a 5 s grace.
  int interrupt_grace_s = 5;
};

/// kv_cache slots of the CPU backend when SessionOptions::max_batch is 0.
constexpr int kDefaultCpuMaxBatch = 8;
/// The most kv_cache slots the CUDA backend chooses by itself (an explicit --max-batch may be larger).
constexpr int kMaxAutoBatch = 256;

/// max_seq_len to use for opts on this model: opts.max_seq_len, or min(model_position_limit, 2048)
/// when 0. Throws Error when it exceeds model_position_limit (max_position_embeddings; LongRope:
/// original_max_position_embeddings). A sliding window (Mistral, Qwen2 with
/// use_sliding_window) does not limit it: the backends attend within the window (layer_windows).
/// Used by both backends.
int effective_max_seq_len(const SessionOptions& opts, const ModelConfig& config);

/// The tokenizer of a model directory (tokenizer.json or tokenizer.model, Tokenizer::load), or nullptr when
/// it has neither. Throws Error naming the tokenizer file when it cannot serve this model: it has no
/// token, or more tokens (added ones included) than config.vocab_size, i.e. it belongs to another model
/// (its ids would be outside the embedding). Fewer tokens than vocab_size is normal (padded embeddings).
/// Used by both backends and by tprun's preflight checks.
std::unique_ptr<Tokenizer> load_model_tokenizer(const std::string& model_dir, const ModelConfig& config);

/// "cpu" / "cuda" / "auto".
const char* device_name(Device d);

/// Seconds the output rank of a replica waits for the others at a batch job's round (one batch each):
/// a week, since a round is as long as the slowest replica's batch; a failing rank ends the wait at once.
constexpr double kReplicaRoundTimeoutS = 7 * 24 * 3600.0;

/// What a rank's function gets.
struct RankContext {
  int tp_rank = 0;
  int tp_size = 1;
  int pp_stage = 0;
  int pp_size = 1;
  int dp_rank = 0;
  int dp_size = 1;
  /// dp_size > 1, on the output rank of each replica (tp_rank 0 of stage 0) only: the exchange of those
  /// dp_size ranks (rank() = dp_rank), through which batch jobs send their lines to dp_rank 0. nullptr
  /// elsewhere. CPU: threads of one process; CUDA: a TCP rendezvous of the replicas' processes.
  HostExchange* replicas = nullptr;
  /// Every rank of this replica (tp_size x pp_size of them; rank() = pp_stage * tp_size + tp_rank, 0 is
  /// the output rank): small per-step control messages, e.g. the server's new requests from rank 0.
  /// Never null (a single rank has a one-member exchange).
  HostExchange* replica_ranks = nullptr;
  Device device = Device::Cpu;   ///< the backend actually used
  const Manifest* manifest = nullptr;
  ModelRunner* runner = nullptr;
  Communicator* comm = nullptr;
  const Tokenizer* tokenizer = nullptr;  ///< shared, read-only
  std::string model_dir;                 ///< the directory the model was loaded from (for messages)
  /// The one rank of the job that prints and writes (world rank 0).
  bool is_output_rank() const { return tp_rank == 0 && pp_stage == 0 && dp_rank == 0; }
  /// The rank of this replica that writes its share of a batch job (tp_rank 0 of stage 0).
  bool is_replica_output_rank() const { return tp_rank == 0 && pp_stage == 0; }
};

}  // namespace tpshard
