// test_convert_force.cpp: `tpshard convert --force` and OUT: no OUT.old-PID is left behind; one that
// cannot be deleted is named on stderr; the next convert removes those of a killed convert (owner record,
// temp_owner.h); a concurrent convert that created OUT first is named instead of "Directory not empty".
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "convert/fs_util.h"
#include "convert/temp_owner.h"
#include "format/error.h"
#include "tiny_checkpoint.h"

using namespace tpshard;
using namespace tpshard::test;
namespace fs = std::filesystem;

TEST_CASE("convert --force: no OUT.old-PID is left; the next convert removes a killed convert's") {
  ScratchDir d;
  LlamaSpec s;
  make_llama(s).save(d / "hf");
  const std::string out = d / "out";
  const std::string log = d / "log.txt";
  const std::string convert = "convert " + (d / "hf") + " -o " + out + " -q";
  REQUIRE(run_tpshard(convert, log) == 0);
  REQUIRE(run_tpshard(convert + " --force", log) == 0);
  CHECK(siblings_of(out, ".old-").empty());
  CHECK_FALSE(fs::exists(out + "/" + kTempOwnerFile));

  // A convert SIGKILLed while deleting the previous output: OUT.old-PID holds the killed process's
  // owner record (what TempDirGuard::commit writes after moving OUT aside) and part of the old model.
  const pid_t killed = run_then_sigkill([&] {
    const std::string old = out + ".old-" + std::to_string(::getpid());
    fs::create_directories(old + "/tp1");
    std::ofstream(old + "/tp1/rank0.tps") << "half deleted";
    write_temp_owner(old, this_process_owner());
  });
  const std::string killed_old = out + ".old-" + std::to_string(killed);
  REQUIRE(fs::exists(killed_old + "/" + kTempOwnerFile));
  // One whose owner (this test process) still runs is kept.
  const std::string live_old = out + ".old-" + std::to_string(::getpid());
  fs::create_directories(live_old);
  write_temp_owner(live_old, this_process_owner());
  // A name that is not OUT.old-PID is not touched.
  fs::create_directories(out + ".old-backup");

  REQUIRE(run_tpshard(convert + " --force", log) == 0);
  const std::string text = read_text(log);
  CHECK_FALSE(fs::exists(killed_old));
  CHECK(text.find("removed the stale temporary directory " + killed_old + ": left by process " +
                  std::to_string(killed) + ", which is no longer running") != std::string::npos);
  CHECK(fs::exists(live_old));
  CHECK(text.find("kept the temporary directory " + live_old + ": process " + std::to_string(::getpid()) +
                  ", which writes it, is still running") != std::string::npos);
  CHECK(fs::exists(out + ".old-backup"));
  CHECK(text.find(".old-backup") == std::string::npos);
  CHECK(fs::exists(out + "/manifest.json"));
}

TEST_CASE("convert --force: an OUT.old-PID that cannot be deleted is named on stderr, then removed later") {
  ScratchDir d;
  LlamaSpec s;
  make_llama(s).save(d / "hf");
  const std::string out = d / "out";
  const std::string log = d / "log.txt";
  const std::string convert = "convert " + (d / "hf") + " -o " + out + " -q";
  REQUIRE(run_tpshard(convert, log) == 0);
  // A directory in the old output whose entries this user cannot delete. Root may delete anything, so
  // as root the convert runs as nobody (the scratch tree made writable for it).
  std::string prefix;
  if (::geteuid() == 0) {
    if (std::system("command -v setpriv >/dev/null 2>&1") != 0) {
      MESSAGE("running as root without setpriv: cannot make a deletion fail; skipped");
      return;
    }
    prefix = "setpriv --reuid=65534 --regid=65534 --clear-groups ";
    for (const auto& e : fs::recursive_directory_iterator(d.path))
      fs::permissions(e.path(), fs::perms::all, fs::perm_options::add);
    fs::permissions(d.path, fs::perms::all, fs::perm_options::add);
  }
  fs::create_directories(out + "/locked");
  std::ofstream(out + "/locked/file") << "x";
  fs::permissions(out + "/locked", fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                                       fs::perms::group_exec | fs::perms::others_read | fs::perms::others_exec);
  const std::string cmd = prefix + TPSHARD_BIN + " " + convert + " --force >" + log + " 2>&1";
  const int rc = std::system(cmd.c_str());
  REQUIRE(WIFEXITED(rc));
  REQUIRE(WEXITSTATUS(rc) == 0);
  const std::vector<std::string> left = siblings_of(out, ".old-");
  REQUIRE(left.size() == 1);
  const std::string text = read_text(log);
  CHECK(text.find("tpshard convert: warning: the previous " + out + " was moved aside to " + left[0] +
                  " and cannot be removed: Permission denied; remove it yourself (the next convert to " + out +
                  " tries again)\n") != std::string::npos);
  CHECK(fs::exists(out + "/manifest.json"));
  CHECK_FALSE(fs::exists(out + "/locked"));

  // The next convert (with the permission back) removes it: its process is gone.
  fs::permissions(left[0] + "/locked", fs::perms::owner_all, fs::perm_options::add);
  REQUIRE(run_tpshard(convert + " --force", log) == 0);
  CHECK_FALSE(fs::exists(left[0]));
  CHECK(read_text(log).find("removed the stale temporary directory " + left[0]) != std::string::npos);
}

TEST_CASE("TempDirGuard::commit: OUT created by another process meanwhile is named, this output discarded") {
  ScratchDir d;
  const std::string out = d / "out";
  std::string tmp;
  {
    TempDirGuard guard(out);
    tmp = guard.path();
    std::ofstream(tmp + "/manifest.json") << "{}";
    fs::create_directories(out);  // the other convert won the race
    std::ofstream(out + "/manifest.json") << "{\"other\": 1}";
    try {
      guard.commit(out, false);
      FAIL("commit into an existing non-empty OUT succeeded");
    } catch (const Error& e) {
      CHECK(std::string(e.what()) == out + ": another process created " + out + " during this convert (rename of " +
                                         tmp + " into place: Directory not empty); it is kept and this convert's "
                                         "output is discarded");
      CHECK(e.hint() == "check what wrote " + out + " (another tpshard convert to the same -o?), then rerun with "
                        "--force to replace it or with another -o");
    }
  }
  CHECK_FALSE(fs::exists(tmp));  // nothing partial left behind
  CHECK(read_text(out + "/manifest.json") == "{\"other\": 1}");
  CHECK(siblings_of(out, ".tmp-").empty());
}
