// test_stale_temp.cpp: the owner record of `tpshard convert`'s OUT.tmp-XXXXXX directories and their
// removal by the next convert to the same OUT: a SIGKILLed convert's directory (a real child process
// killed inside its TempDirGuard), a reused pid and a zombie are removed; a running owner, another host
// or container, a missing record, other names and symbolic links are kept and reported.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "convert/fs_util.h"
#include "convert/temp_owner.h"
#include "tiny_checkpoint.h"

using namespace tpshard;
using namespace tpshard::test;
namespace fs = std::filesystem;

namespace {


/// A directory holding a partial shard and, when `owner` is set, an owner record.
void make_temp_dir(const std::string& dir, const TempDirOwner* owner) {
  fs::create_directories(dir + "/tp2");
  std::ofstream(dir + "/tp2/rank0.tps") << "partial shard";
  if (owner) write_temp_owner(dir, *owner);
}

/// The process state letter of /proc/PID/stat ('?' when unreadable).
char proc_state(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(f, line);
  const size_t close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() ? '?' : line[close + 2];
}

}  // namespace

TEST_CASE("owner record: TempDirGuard writes this process's, commit leaves it out of OUT; round trip") {
  ScratchDir d;
  const TempDirOwner self = this_process_owner();
  CHECK(self.pid == static_cast<int64_t>(::getpid()));
  CHECK_FALSE(self.host.empty());
  {
    TempDirGuard guard(d / "out");
    const auto rec = read_temp_owner(guard.path());
    REQUIRE(rec.has_value());
    CHECK(rec->pid == self.pid);
    CHECK(rec->start_ticks == self.start_ticks);
    CHECK(rec->boot_id == self.boot_id);
    CHECK(rec->host == self.host);
    CHECK(rec->pid_ns == self.pid_ns);
    std::ofstream(guard.path() + "/manifest.json") << "{}";
    guard.commit(d / "out", false);
  }
  CHECK(fs::exists(d / "out/manifest.json"));
  CHECK_FALSE(fs::exists(fs::path(d / "out") / kTempOwnerFile));
  CHECK(siblings_of(d / "out", ".tmp-").empty());

  // Unknown fields round-trip as "-"; anything not in the format reads as no record.
  fs::create_directory(d / "r");
  write_temp_owner(d / "r", TempDirOwner{42, 0, "", "", ""});
  CHECK(read_text(d / "r/" + kTempOwnerFile) == "tpshard-convert-owner v1 42 0 - - -\n");
  const auto rec = read_temp_owner(d / "r");
  REQUIRE(rec.has_value());
  CHECK(rec->pid == 42);
  CHECK(rec->host.empty());
  for (const char* bad : {"", "tpshard-convert-owner v1 42 0 - -\n", "tpshard-convert-owner v2 42 0 - - -\n",
                          "tpshard-convert-owner v1 -42 0 - - -\n", "tpshard-convert-owner v1 0 0 - - -\n",
                          "tpshard-convert-owner v1 42 0 - - - extra\n", "other v1 42 0 - - -\n"}) {
    CAPTURE(bad);
    std::ofstream(d / "r/" + kTempOwnerFile) << bad;
    CHECK_FALSE(read_temp_owner(d / "r").has_value());
  }
}

TEST_CASE("convert removes the OUT.tmp-* of a SIGKILLed convert and keeps those in use or not its own") {
  ScratchDir d;
  LlamaSpec spec;
  make_llama(spec).save(d / "hf");
  const std::string out = d / "out";
  const TempDirOwner self = this_process_owner();

  // 1. A real convert killed inside its TempDirGuard: the child makes OUT.tmp-XXXXXX, writes a partial
  //    shard and dies by SIGKILL, so no destructor or signal handler runs.
  const pid_t killed = run_then_sigkill([&] {
    TempDirGuard guard(out);
    std::ofstream(guard.path() + "/partial.tps") << "half a shard";
    ::kill(::getpid(), SIGKILL);  // with the guard alive
  });
  const std::vector<std::string> left = siblings_of(out, ".tmp-");
  REQUIRE(left.size() == 1);  // what SIGKILL leaves behind
  const std::string killed_dir = left[0];
  REQUIRE(read_temp_owner(killed_dir).has_value());
  CHECK(read_temp_owner(killed_dir)->pid == killed);

  // 2. The pid of a live process (this one) but another start time: the pid was reused. (Needs /proc.)
  TempDirOwner reused = self;
  reused.start_ticks = self.start_ticks + 1;
  if (self.start_ticks != 0) make_temp_dir(out + ".tmp-reuse1", &reused);

  // 3. A killed process its parent has not reaped yet (a zombie) still has its pid.
  const pid_t zombie = ::fork();
  REQUIRE(zombie >= 0);
  if (zombie == 0) ::_exit(0);
  for (int i = 0; i < 200 && proc_state(zombie) != 'Z'; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const bool have_zombie = proc_state(zombie) == 'Z';
  TempDirOwner zombie_owner = self;
  zombie_owner.pid = zombie;
  zombie_owner.start_ticks = 0;  // unknown: only the state decides
  if (have_zombie) make_temp_dir(out + ".tmp-zombie", &zombie_owner);

  if (fs::exists("/proc/self/stat")) {  // Linux: the branches above are not skipped
    CHECK(self.start_ticks != 0);
    CHECK(have_zombie);
    CHECK_FALSE(self.pid_ns.empty());
    CHECK_FALSE(self.boot_id.empty());
  }

  // Kept: a running owner (this test process), another host, another pid namespace, no record, names
  // that are not OUT.tmp-XXXXXX, and a symbolic link (to a directory whose owner is gone).
  TempDirOwner gone = self;
  gone.pid = killed;
  TempDirOwner other_host = gone;
  other_host.host = "other-host.invalid";
  TempDirOwner other_ns = gone;
  other_ns.pid_ns = "pid:[1]";
  make_temp_dir(out + ".tmp-live01", &self);
  make_temp_dir(out + ".tmp-other1", &other_host);
  if (!self.pid_ns.empty()) make_temp_dir(out + ".tmp-contnr", &other_ns);
  make_temp_dir(out + ".tmp-nomark", nullptr);
  make_temp_dir(d / "other.tmp-dead01", &gone);
  make_temp_dir(out + ".tmp-dead0123", &gone);
  make_temp_dir(d / "link-target", &gone);
  fs::create_directory_symlink(d / "link-target", out + ".tmp-link01");

  const std::string log = d / "log.txt";
  REQUIRE(run_tpshard("convert " + (d / "hf") + " -o " + out + " --tp 1,2 -q", log) == 0);
  const std::string text = read_text(log);
  INFO(text);
  CHECK(fs::exists(out + "/manifest.json"));
  CHECK_FALSE(fs::exists(fs::path(out) / kTempOwnerFile));

  CHECK_FALSE(fs::exists(killed_dir));
  CHECK(text.find("tpshard convert: removed the stale temporary directory " + killed_dir + ": left by process " +
                  std::to_string(killed) + ", which is no longer running (a killed convert)\n") != std::string::npos);
  if (self.start_ticks != 0) CHECK_FALSE(fs::exists(out + ".tmp-reuse1"));
  if (have_zombie) CHECK_FALSE(fs::exists(out + ".tmp-zombie"));
  ::waitpid(zombie, nullptr, 0);  // reap the zombie

  CHECK(fs::exists(out + ".tmp-live01/tp2/rank0.tps"));
  CHECK(text.find("tpshard convert: kept the temporary directory " + out + ".tmp-live01: process " +
                  std::to_string(self.pid) + ", which writes it, is still running") != std::string::npos);
  CHECK(fs::exists(out + ".tmp-other1/tp2/rank0.tps"));
  CHECK(text.find(out + ".tmp-other1: it was made by process " + std::to_string(killed) +
                  " on host other-host.invalid; remove it yourself") != std::string::npos);
  if (!self.pid_ns.empty()) {
    CHECK(fs::exists(out + ".tmp-contnr/tp2/rank0.tps"));
    CHECK(text.find(out + ".tmp-contnr: it was made by process " + std::to_string(killed) + " of another container") !=
          std::string::npos);
  }
  CHECK(fs::exists(out + ".tmp-nomark/tp2/rank0.tps"));
  CHECK(text.find(out + ".tmp-nomark: it has no owner record") != std::string::npos);
  CHECK(fs::exists(d / "other.tmp-dead01/tp2/rank0.tps"));
  CHECK(fs::exists(out + ".tmp-dead0123/tp2/rank0.tps"));
  CHECK(fs::is_symlink(out + ".tmp-link01"));
  CHECK(fs::exists(d / "link-target/tp2/rank0.tps"));
  CHECK(text.find("other.tmp-dead01") == std::string::npos);
  CHECK(text.find("tmp-dead0123") == std::string::npos);
  CHECK(text.find("tmp-link01") == std::string::npos);

  // The convert's own temporary directory is gone; the kept ones are still reported by the next run.
  std::vector<std::string> expected = {out + ".tmp-live01", out + ".tmp-nomark", out + ".tmp-other1"};
  if (!self.pid_ns.empty()) expected.push_back(out + ".tmp-contnr");
  expected.push_back(out + ".tmp-dead0123");
  std::sort(expected.begin(), expected.end());
  CHECK(siblings_of(out, ".tmp-") == expected);
}
