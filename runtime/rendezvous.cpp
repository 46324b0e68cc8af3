// rendezvous.cpp: Rendezvous (see rendezvous.h): a star of TCP connections around rank 0.
#include "runtime/rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "format/error.h"

namespace tpshard {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kHelloMagic = 0x56525054;  // "TPRV" little-endian
constexpr uint32_t kMaxFrame = 64u << 20;

std::string my_hostname() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return host;
}

int ms_left(Clock::time_point deadline) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return ms < 0 ? 0 : int(std::min<long long>(ms, 1 << 30));
}

/// Write all bytes (MSG_NOSIGNAL: a dead peer gives an error, not SIGPIPE). False on failure.
bool write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= size_t(w);
  }
  return true;
}

/// Read exactly n bytes before the deadline. Returns 1 ok, 0 EOF/error, -1 timeout.
int read_all(int fd, void* data, size_t n, Clock::time_point deadline) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    pollfd pfd{fd, POLLIN, 0};
    int pr = poll(&pfd, 1, ms_left(deadline));
    if (pr < 0 && errno == EINTR) continue;
    if (pr == 0) return -1;
    ssize_t r = recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return 0;
    p += r;
    n -= size_t(r);
  }
  return 1;
}

/// Read one frame; returns 1 ok, 0 EOF/error, -1 timeout.
int read_frame(int fd, char* type, std::string* payload, Clock::time_point deadline) {
  unsigned char hdr[5];
  int r = read_all(fd, hdr, 5, deadline);
  if (r != 1) return r;
  uint32_t len = uint32_t(hdr[1]) | uint32_t(hdr[2]) << 8 | uint32_t(hdr[3]) << 16 | uint32_t(hdr[4]) << 24;
  if (len > kMaxFrame) return 0;
  *type = char(hdr[0]);
  payload->assign(len, '\0');
  return len ? read_all(fd, payload->data(), len, deadline) : 1;
}

std::string put_u32(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[i] = char((v >> (8 * i)) & 0xff);
  return s;
}
uint32_t get_u32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t(uint8_t(s[at + i])) << (8 * i);
  return v;
}

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

}  // namespace

void parse_host_port(const std::string& addr, std::string* host, int* port) {
  size_t colon = addr.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == addr.size())
    throw Error("master address '" + addr + "' is not HOST:PORT", "pass e.g. --master-addr node0:29500");
  std::string h = addr.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  char* end = nullptr;
  long p = strtol(addr.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || p <= 0 || p > 65535)
    throw Error("master address '" + addr + "': port must be 1..65535", "pass e.g. --master-addr node0:29500");
  *host = h;
  *port = int(p);
}

int find_free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw Error(std::string("cannot create a socket: ") + strerror(errno), "check the system limits");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    throw Error(std::string("cannot find a free TCP port on 127.0.0.1: ") + strerror(errno),
                "pass --master-addr 127.0.0.1:PORT");
  }
  int port = ntohs(a.sin_port);
  close(fd);
  return port;
}

Rendezvous::Rendezvous(const std::string& master_addr, int rank, int world_size, double timeout_s)
    : rank_(rank), world_(world_size), timeout_s_(timeout_s) {
  TPS_CHECK(world_size >= 1 && rank >= 0 && rank < world_size,
            "rendezvous: rank " + std::to_string(rank) + " is outside world size " + std::to_string(world_size),
            "check RANK / WORLD_SIZE (or the launcher's) environment");
  hosts_.assign(size_t(world_size), "");
  hosts_[size_t(rank)] = my_hostname();
  if (pipe2(stop_pipe_, O_CLOEXEC) != 0) throw Error("rendezvous: pipe failed", "check the system limits");
  if (world_size == 1) return;
  std::string host;
  int port = 0;
  parse_host_port(master_addr, &host, &port);
  const auto deadline = Clock::now() + std::chrono::milliseconds(int64_t(timeout_s * 1000));

  if (rank == 0) {
    int lfd = socket(AF_INET6, SOCK_STREAM, 0);
    bool v6 = lfd >= 0;
    if (!v6) lfd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1, zero = 0;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    int rc;
    if (v6) {
      setsockopt(lfd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));  // accept IPv4 too
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_addr = in6addr_any;
      a.sin6_port = htons(uint16_t(port));
      rc = bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    } else {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_ANY);
      a.sin_port = htons(uint16_t(port));
      rc = bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    }
    if (rc != 0 || listen(lfd, world_size) != 0) {
      std::string why = strerror(errno);
      close(lfd);
      throw Error("rank 0: cannot listen on port " + std::to_string(port) + " (" + master_addr + "): " + why,
                  "another job may use this port; pick another with --master-addr HOST:PORT");
    }
    fds_.assign(size_t(world_size), -1);
    said_bye_.assign(size_t(world_size), false);
    int joined = 1;
    while (joined < world_size) {
      pollfd pfd{lfd, POLLIN, 0};
      int pr = poll(&pfd, 1, ms_left(deadline));
      if (pr < 0 && errno == EINTR) continue;
      if (pr == 0) {
        std::string missing;
        for (int r = 1; r < world_size; ++r)
          if (fds_[size_t(r)] < 0) missing += (missing.empty() ? "" : ",") + std::to_string(r);
        for (int fd : fds_)
          if (fd >= 0) close(fd);
        close(lfd);
        throw Error("rank 0: rendezvous on " + master_addr + " timed out after " + std::to_string(int(timeout_s)) +
                        " s; ranks " + missing + " never connected",
                    "start every node's tprun with the same --nnodes/--master-addr (and --tp), and check the firewall");
      }
      int cfd = accept(lfd, nullptr, nullptr);
      if (cfd < 0) continue;
      set_nodelay(cfd);
      char type = 0;
      std::string hello;
      if (read_frame(cfd, &type, &hello, deadline) != 1 || type != 'H' || hello.size() < 12 ||
          get_u32(hello, 0) != kHelloMagic) {
        close(cfd);  // not one of ours (a port scanner, a stale job): ignore it
        continue;
      }
      int r = int(get_u32(hello, 4));
      int w = int(get_u32(hello, 8));
      std::string reject;
      if (w != world_size)
        reject = "rank " + std::to_string(r) + " says the world size is " + std::to_string(w) + " but rank 0 has " +
                 std::to_string(world_size);
      else if (r <= 0 || r >= world_size)
        reject = "rank " + std::to_string(r) + " is out of range";
      else if (fds_[size_t(r)] >= 0)
        reject = "rank " + std::to_string(r) + " joined twice (two jobs on one master address?)";
      if (!reject.empty()) {
        send_frame(cfd, 'F', reject);
        close(cfd);
        for (int fd : fds_)
          if (fd >= 0) close(fd);
        close(lfd);
        throw Error("rank 0: rendezvous on " + master_addr + ": " + reject,
                    "give every node the same --tp and --nnodes, distinct --node-rank, and one master address per job");
      }
      fds_[size_t(r)] = cfd;
      hosts_[size_t(r)] = hello.substr(12);
      send_frame(cfd, 'H', hosts_[0]);
      ++joined;
    }
    close(lfd);
  } else {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    std::string last_error = "no attempt";
    int fd = -1;
    while (fd < 0) {
      addrinfo* res = nullptr;
      int gai = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
      if (gai != 0) {
        last_error = gai_strerror(gai);
      } else {
        for (addrinfo* ai = res; ai && fd < 0; ai = ai->ai_next) {
          int s = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
          if (s < 0) continue;
          if (connect(s, ai->ai_addr, ai->ai_addrlen) == 0) {
            fd = s;
          } else {
            last_error = strerror(errno);
            close(s);
          }
        }
        freeaddrinfo(res);
      }
      if (fd >= 0) break;
      if (Clock::now() >= deadline)
        throw Error("rank " + std::to_string(rank) + ": cannot reach rank 0 at " + master_addr + " within " +
                        std::to_string(int(timeout_s)) + " s (" + last_error + ")",
                    "start the node with --node-rank 0 too, and check --master-addr (it must name that node) and the firewall");
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    set_nodelay(fd);
    fds_.assign(1, fd);
    send_frame(fd, 'H', put_u32(kHelloMagic) + put_u32(uint32_t(rank)) + put_u32(uint32_t(world_size)) + hosts_[size_t(rank)]);
    char type = 0;
    std::string reply;
    int r = read_frame(fd, &type, &reply, deadline);
    if (r != 1 || type != 'H') {
      close(fd);
      fds_.clear();
      throw Error("rank " + std::to_string(rank) + ": rank 0 at " + master_addr + " refused the rendezvous" +
                      (type == 'F' ? ": " + reply : std::string()),
                  "give every node the same --tp and --nnodes, distinct --node-rank, and one master address per job");
    }
    hosts_[0] = reply;
  }
}

Rendezvous::~Rendezvous() {
  if (monitoring_) {
    char c = 'x';
    if (write(stop_pipe_[1], &c, 1) < 0) { /* the monitor ends at exit anyway */ }
    monitor_.join();
  }
  for (size_t i = 0; i < fds_.size(); ++i) {
    if (fds_[i] < 0) continue;
    if (!failed_) send_frame(fds_[i], 'B', "");
    close(fds_[i]);
  }
  close(stop_pipe_[0]);
  close(stop_pipe_[1]);
}

void Rendezvous::send_frame(int fd, char type, const std::string& payload) {
  std::lock_guard<std::mutex> lk(send_mu_);
  std::string frame(1, type);
  frame += put_u32(uint32_t(payload.size()));
  frame += payload;
  write_all(fd, frame.data(), frame.size());
}

std::string Rendezvous::broadcast(const std::string& blob) {
  TPS_CHECK(!monitoring_, "rendezvous: broadcast after start_monitor", "this is a bug in tprun");
  if (world_ == 1) return blob;
  if (rank_ == 0) {
    for (int r = 1; r < world_; ++r) send_frame(fds_[size_t(r)], 'D', blob);
    return blob;
  }
  char type = 0;
  std::string got;
  auto deadline = Clock::now() + std::chrono::milliseconds(int64_t(timeout_s_ * 1000));
  int r = read_frame(fds_[0], &type, &got, deadline);
  if (r != 1 || type != 'D')
    throw Error("rank " + std::to_string(rank_) + ": lost rank 0 during the rendezvous" +
                    (type == 'F' ? ": " + got : std::string()),
                "rank 0 failed; see its message");
  return got;
}

std::vector<std::string> Rendezvous::all_gather(const std::string& blob) {
  TPS_CHECK(!monitoring_, "rendezvous: all_gather after start_monitor", "this is a bug in tprun");
  std::vector<std::string> all(static_cast<size_t>(world_));
  all[size_t(rank_)] = blob;
  if (world_ == 1) return all;
  auto deadline = Clock::now() + std::chrono::milliseconds(int64_t(timeout_s_ * 1000));
  if (rank_ == 0) {
    for (int r = 1; r < world_; ++r) {
      char type = 0;
      if (read_frame(fds_[size_t(r)], &type, &all[size_t(r)], deadline) != 1 || type != 'D')
        throw Error("rank 0: lost rank " + std::to_string(r) + " (" + hosts_[size_t(r)] + ") during the rendezvous" +
                        (type == 'F' ? ": " + all[size_t(r)] : std::string()),
                    "that rank failed; see its message");
    }
    std::string packed;
    for (const auto& s : all) packed += put_u32(uint32_t(s.size())) + s;
    for (int r = 1; r < world_; ++r) send_frame(fds_[size_t(r)], 'D', packed);
    return all;
  }
  send_frame(fds_[0], 'D', blob);
  char type = 0;
  std::string packed;
  if (read_frame(fds_[0], &type, &packed, deadline) != 1 || type != 'D')
    throw Error("rank " + std::to_string(rank_) + ": lost rank 0 during the rendezvous" +
                    (type == 'F' ? ": " + packed : std::string()),
                "rank 0 failed; see its message");
  size_t at = 0;
  for (int r = 0; r < world_; ++r) {
    TPS_CHECK(at + 4 <= packed.size(), "rendezvous: malformed all_gather reply", "this is a bug in tprun");
    uint32_t n = get_u32(packed, at);
    at += 4;
    TPS_CHECK(at + n <= packed.size(), "rendezvous: malformed all_gather reply", "this is a bug in tprun");
    all[size_t(r)] = packed.substr(at, n);
    at += n;
  }
  return all;
}

void Rendezvous::start_monitor(std::function<void(const std::string&)> on_failure) {
  if (world_ == 1 || monitoring_) return;
  on_failure_ = std::move(on_failure);
  monitoring_ = true;
  monitor_ = std::thread([this] { monitor_loop(); });
}

void Rendezvous::report_failure(const std::string& message) {
  failed_ = true;
  if (world_ == 1) return;
  const std::string msg = "rank " + std::to_string(rank_) + " (" + hosts_[size_t(rank_)] + ") failed: " + message;
  for (int fd : fds_)
    if (fd >= 0) send_frame(fd, 'F', msg);
}

void Rendezvous::monitor_loop() {
  std::vector<int> peer_of;  // poll slot -> rank (slot 0 is the stop pipe)
  for (;;) {
    std::vector<pollfd> pfds{{stop_pipe_[0], POLLIN, 0}};
    peer_of.assign(1, -1);
    for (size_t i = 0; i < fds_.size(); ++i) {
      int peer = rank_ == 0 ? int(i) : 0;
      if (fds_[i] < 0 || (rank_ == 0 && said_bye_[i])) continue;
      pfds.push_back({fds_[i], POLLIN, 0});
      peer_of.push_back(peer);
    }
    if (pfds.size() == 1) return;  // every peer ended normally
    int pr = poll(pfds.data(), nfds_t(pfds.size()), -1);
    if (pr < 0 && errno == EINTR) continue;
    if (pfds[0].revents) return;  // destructor: normal end
    for (size_t k = 1; k < pfds.size(); ++k) {
      if (!pfds[k].revents) continue;
      int peer = peer_of[k];
      int fd = pfds[k].fd;
      char type = 0;
      std::string payload;
      int r = read_frame(fd, &type, &payload, Clock::now() + std::chrono::seconds(5));
      std::string failure;
      if (r == 1 && type == 'B') {
        if (rank_ == 0) {
          said_bye_[size_t(peer)] = true;
          continue;
        }
        return;  // rank 0 ended normally: nothing more to watch
      } else if (r == 1 && type == 'F') {
        failure = payload;
      } else if (r == 1) {
        continue;  // stray data frame: ignore
      } else {
        failure = "rank " + std::to_string(peer) + " (" + hosts_[size_t(peer)] +
                  ") disconnected without finishing (crashed, killed, or its node failed)";
        if (rank_ != 0) failure = "lost the connection to rank 0 (" + hosts_[0] + "): rank 0 failed or was killed";
      }
      if (rank_ == 0) {
        for (size_t i = 1; i < fds_.size(); ++i)
          if (fds_[i] >= 0 && int(i) != peer && !said_bye_[i]) send_frame(fds_[i], 'F', failure);
      }
      // This rank already reported its own failure: it is on its way out with its own message.
      if (failed_.exchange(true)) return;
      if (on_failure_) on_failure_(failure);
      return;
    }
  }
}

}  // namespace tpshard
