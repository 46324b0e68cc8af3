// gloo_comm.cpp: see gloo_comm.h. The connection is gloo's full mesh (one TCP pair per peer), set up the
// way gloo::rendezvous::Context does it but with the pair addresses passed through a HostExchange.
#include "runtime/cpu/gloo_comm.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <sstream>

#include "format/error.h"
#include "runtime/cpu/rank_order_sum.h"
#include "runtime/tuning.h"

#if TPSHARD_HAVE_GLOO
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/context.h>
#include <gloo/transport/context.h>
#include <gloo/transport/device.h>
#include <gloo/transport/tcp/device.h>
#endif

namespace tpshard {

bool gloo_available() { return TPSHARD_HAVE_GLOO != 0; }

#if TPSHARD_HAVE_GLOO
namespace {

/// Operations wait for peers without a deadline (an idle server's ranks wait for the next request);
/// a dead peer is noticed by its closed socket and by the job's rendezvous monitor.
constexpr std::chrono::hours kOperationTimeout{24 * 365};

std::string to_hex(const std::vector<char>& b) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (char c : b) {
    s += digits[(static_cast<unsigned char>(c) >> 4) & 15];
    s += digits[static_cast<unsigned char>(c) & 15];
  }
  return s;
}

std::vector<char> from_hex(const std::string& s) {
  std::vector<char> b;
  for (size_t i = 0; i + 1 < s.size(); i += 2) b.push_back(static_cast<char>(std::stoi(s.substr(i, 2), nullptr, 16)));
  return b;
}

std::string host_name() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return host;
}

/// gloo::Context whose transport context is connected through a HostExchange.
class ExchangeContext : public gloo::Context {
 public:
  ExchangeContext(int rank, int size) : gloo::Context(rank, size) {}

  void connect(HostExchange& exchange, const std::shared_ptr<gloo::transport::Device>& device,
               std::chrono::milliseconds connect_timeout) {
    std::shared_ptr<gloo::transport::Context> tc = device->createContext(rank, size);
    tc->setTimeout(connect_timeout);
    std::string mine;  // one address per peer, in rank order ("-" for this rank)
    for (int r = 0; r < size; ++r)
      mine += (r == rank ? std::string("-") : to_hex(tc->createPair(r)->address().bytes())) + " ";
    const std::vector<std::string> all = exchange.all_gather(mine);
    for (int r = 0; r < size; ++r) {
      if (r == rank) continue;
      std::istringstream in(all[static_cast<size_t>(r)]);
      std::string address;
      for (int k = 0; k <= rank; ++k) in >> address;  // peer r's pair for this rank
      tc->getPair(r)->connect(from_hex(address));
    }
    tc->setTimeout(kOperationTimeout);
    device_ = device;
    transportContext_ = std::move(tc);
    setTimeout(kOperationTimeout);
  }
};

}  // namespace

struct GlooComm::Impl {
  std::shared_ptr<ExchangeContext> context;
};

GlooComm::GlooComm(HostExchange& exchange, const std::string& name, double connect_timeout_s)
    : impl_(std::make_unique<Impl>()), rank_(exchange.rank()), size_(exchange.size()), name_(name) {
  if (size_ == 1) return;  // no peers: every collective is a copy or nothing
  const std::vector<std::string> hosts = exchange.all_gather(host_name());
  bool one_host = true;
  for (const std::string& h : hosts) one_host = one_host && h == hosts[static_cast<size_t>(rank_)];
  gloo::transport::tcp::attr attr;
  const std::string& iface = tuning().gloo_socket_ifname;  // GLOO_SOCKET_IFNAME
  if (one_host) {
    attr.hostname = "127.0.0.1";
  } else if (!iface.empty()) {
    attr.iface = iface;
  } else {
    attr.hostname = host_name();
  }
  try {
    impl_->context = std::make_shared<ExchangeContext>(rank_, size_);
    impl_->context->connect(exchange, gloo::transport::tcp::CreateDevice(attr),
                            std::chrono::milliseconds(static_cast<int64_t>(connect_timeout_s * 1000)));
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error("the " + name_ + " could not connect over gloo (" +
                    (one_host ? std::string("127.0.0.1") : !iface.empty() ? "interface " + iface : "host " + host_name()) +
                    "): " + e.what(),
                "on several hosts, each host's name must resolve to an address the others reach, or set "
                "GLOO_SOCKET_IFNAME to the interface to use (e.g. eth0)");
  }
}

GlooComm::~GlooComm() = default;

namespace {
template <typename F>
void guarded(const std::string& name, const char* op, bool* failed, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    *failed = true;
    throw Error("the " + name + " failed in " + op + " (a peer process stopped?): " + e.what(),
                "see the first failing rank's message");
  }
}
}  // namespace

void GlooComm::all_gather(const void* send, void* recv, size_t count, DType dtype) {
  const size_t bytes = count * dtype_size(dtype);
  if (size_ == 1) {
    std::memcpy(recv, send, bytes);
    return;
  }
  // One broadcast per rank into its slice: with gloo's ring allgather instead, decode of stories260K at
  // tp 2 on loopback ran 2.5x slower (24 vs 60 tok/s, 2 shared cores).
  std::memcpy(static_cast<char*>(recv) + static_cast<size_t>(rank_) * bytes, send, bytes);
  guarded(name_, "all_gather", &failed_, [&] {
    for (int root = 0; root < size_; ++root) {
      gloo::BroadcastOptions o(impl_->context);
      o.setOutput<uint8_t>(static_cast<uint8_t*>(recv) + static_cast<size_t>(root) * bytes, bytes);
      o.setRoot(root);
      o.setTag(static_cast<uint32_t>(root));
      gloo::broadcast(o);
    }
  });
}

void GlooComm::all_reduce_sum(void* buf, size_t count, DType dtype) {
  if (size_ == 1) return;
  const size_t bytes = count * dtype_size(dtype);
  gathered_.resize(bytes * static_cast<size_t>(size_));
  all_gather(buf, gathered_.data(), count, dtype);
  std::vector<const void*> parts;
  for (int r = 0; r < size_; ++r) parts.push_back(gathered_.data() + static_cast<size_t>(r) * bytes);
  sum_in_rank_order(parts, count, dtype, &sum_);
  store_sum(sum_, buf, count, dtype);
}

void GlooComm::broadcast(void* buf, size_t bytes, int root) {
  TPS_CHECK(root >= 0 && root < size_, "gloo communicator: broadcast root " + std::to_string(root) + " out of range",
            "pass a rank in [0, size)");
  if (size_ == 1 || bytes == 0) return;
  guarded(name_, "broadcast", &failed_, [&] {
    gloo::BroadcastOptions o(impl_->context);
    o.setOutput<uint8_t>(static_cast<uint8_t*>(buf), bytes);
    o.setRoot(root);
    gloo::broadcast(o);
  });
}

void GlooComm::barrier() {
  if (size_ == 1) return;
  guarded(name_, "barrier", &failed_, [&] {
    gloo::BarrierOptions o(impl_->context);
    gloo::barrier(o);
  });
}

#else  // no gloo in this build

struct GlooComm::Impl {};

GlooComm::GlooComm(HostExchange& exchange, const std::string& name, double)
    : rank_(exchange.rank()), size_(exchange.size()), name_(name) {
  throw Error("the CPU backend with one process per rank needs gloo, and this tprun was built without it",
              "install libgloo-dev (apt-get install libgloo-dev; scripts/install_deps.sh does) and reconfigure, "
              "or run the CPU ranks as threads of one process (no --cpu-processes, no cluster launcher)");
}
GlooComm::~GlooComm() = default;
void GlooComm::all_reduce_sum(void*, size_t, DType) {}
void GlooComm::all_gather(const void*, void*, size_t, DType) {}
void GlooComm::broadcast(void*, size_t, int) {}
void GlooComm::barrier() {}

#endif

}  // namespace tpshard
