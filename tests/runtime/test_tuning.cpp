// test_tuning.cpp: the strict parser of runtime/tuning.h, and the rule that docs/TUNING.md lists every
// TPSHARD_* / TPRUN_* variable the product reads and that only runtime/tuning.cpp reads tuning variables.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "format/error.h"
#include "runtime/tuning.h"

using namespace tpshard;

namespace {

Tuning parse(const std::map<std::string, std::string>& env) {
  return parse_tuning([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

std::string parse_error(const std::map<std::string, std::string>& env) {
  try {
    parse(env);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("[cpu] parse_tuning: defaults with an empty environment") {
  const Tuning t = parse({});
  CHECK_FALSE(t.force_nccl);
  CHECK(t.custom_all_reduce);
  CHECK(t.custom_all_reduce_timeout_s == 300.0);
  CHECK(t.nccl_timeout_s == 300.0);
  CHECK(t.cuda_graphs);
  CHECK(t.lookahead);
  CHECK(t.pdl);
  CHECK_FALSE(t.sync_check);
}

TEST_CASE("[cpu] parse_tuning: legal values") {
  CHECK(parse({{"TPSHARD_COMM", "nccl"}}).force_nccl);
  CHECK_FALSE(parse({{"TPSHARD_COMM", "auto"}}).force_nccl);
  CHECK_FALSE(parse({{"TPSHARD_COMM", ""}}).force_nccl);  // empty = unset
  CHECK_FALSE(parse({{"TPSHARD_NO_CUSTOM_ALL_REDUCE", "1"}}).custom_all_reduce);
  CHECK(parse({{"TPSHARD_NO_CUSTOM_ALL_REDUCE", "0"}}).custom_all_reduce);
  CHECK_FALSE(parse({{"TPSHARD_NO_CUDA_GRAPHS", "1"}}).cuda_graphs);
  CHECK_FALSE(parse({{"TPSHARD_NO_LOOKAHEAD", "1"}}).lookahead);
  CHECK_FALSE(parse({{"TPSHARD_NO_PDL", "1"}}).pdl);
  CHECK(parse({{"TPSHARD_SYNC_CHECK", "1"}}).sync_check);
  CHECK_FALSE(parse({{"TPSHARD_SYNC_CHECK", "0"}}).sync_check);
  CHECK(parse({{"TPRUN_NCCL_TIMEOUT", "42.5"}}).nccl_timeout_s == 42.5);
  CHECK(parse({{"TPSHARD_CUSTOM_ALL_REDUCE_TIMEOUT_S", "0"}}).custom_all_reduce_timeout_s == 0.0);
  CHECK(parse({{"TPSHARD_CUSTOM_ALL_REDUCE_TIMEOUT_S", "30"}}).custom_all_reduce_timeout_s == 30.0);
}

TEST_CASE("[cpu] parse_tuning: an illegal value is an Error naming the variable, the value and the legal values") {
  const std::map<std::string, std::string> bad[] = {
      {{"TPSHARD_COMM", "mpi"}},
      {{"TPSHARD_NO_CUSTOM_ALL_REDUCE", "yes"}},
      {{"TPSHARD_NO_CUDA_GRAPHS", "true"}},
      {{"TPSHARD_NO_LOOKAHEAD", "2"}},
      {{"TPSHARD_NO_PDL", " 1"}},
      {{"TPSHARD_SYNC_CHECK", "on"}},
      {{"TPRUN_NCCL_TIMEOUT", "0"}},
      {{"TPRUN_NCCL_TIMEOUT", "-5"}},
      {{"TPRUN_NCCL_TIMEOUT", "10s"}},
      {{"TPRUN_NCCL_TIMEOUT", "1e3"}},
      {{"TPSHARD_CUSTOM_ALL_REDUCE_TIMEOUT_S", "-1"}},
      {{"TPSHARD_CUSTOM_ALL_REDUCE_TIMEOUT_S", "1.2.3"}},
  };
  for (const auto& env : bad) {
    const std::string& name = env.begin()->first;
    const std::string& value = env.begin()->second;
    INFO(name << "='" << value << "'");
    const std::string what = parse_error(env);
    REQUIRE_FALSE(what.empty());
    CHECK(what.find(name) != std::string::npos);
    CHECK(what.find("'" + value + "'") != std::string::npos);
    CHECK(what.find("legal:") != std::string::npos);
  }
}

TEST_CASE("[cpu] docs/TUNING.md lists every TPSHARD_/TPRUN_ variable the source reads; only tuning.cpp reads tuning") {
  namespace fs = std::filesystem;
  const fs::path root = TPSHARD_SOURCE_DIR;
  const std::string table = read_text(root / "docs" / "TUNING.md");
  REQUIRE_FALSE(table.empty());
  for (const TuningVariable& v : tuning_variables()) {
    INFO(v.name);
    CHECK(table.find(std::string("`") + v.name + "`") != std::string::npos);
  }
  // Launch protocol: set by tprun for its workers (or by the user, TPRUN_MASTER), read by the launcher.
  const std::set<std::string> launch = {"TPRUN_RANK", "TPRUN_LOCAL_RANK", "TPRUN_WORLD_SIZE", "TPRUN_LOCAL_WORLD_SIZE",
                                        "TPRUN_MASTER"};
  const std::regex literal("\"((TPSHARD|TPRUN)_[A-Z0-9_]+)\"");
  const std::regex getenv_call("getenv\\s*\\(\\s*\"((TPSHARD|TPRUN)_[A-Z0-9_]+)\"");
  int files = 0;
  for (const char* dir : {"runtime", "kernels", "tools"}) {
    for (const auto& e : fs::recursive_directory_iterator(root / dir)) {
      const std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".cpp" && ext != ".cu" && ext != ".h" && ext != ".cuh")) continue;
      ++files;
      const std::string rel = fs::relative(e.path(), root).generic_string();
      const std::string text = read_text(e.path());
      for (std::sregex_iterator it(text.begin(), text.end(), literal), end; it != end; ++it) {
        const std::string name = (*it)[1];
        INFO(rel << ": \"" << name << "\"");
        CHECK(table.find("`" + name + "`") != std::string::npos);
        if (rel != "runtime/tuning.cpp" && rel != "runtime/launcher.cpp" && launch.count(name) == 0) {
          // other files may name a variable in a message, never read it
          const size_t at = static_cast<size_t>(it->position());
          const std::string before = text.substr(at >= 40 ? at - 40 : 0, at >= 40 ? 40 : at);
          CHECK_MESSAGE(before.find("getenv") == std::string::npos, rel << " reads " << name);
        }
      }
      for (std::sregex_iterator it(text.begin(), text.end(), getenv_call), end; it != end; ++it) {
        const std::string name = (*it)[1];
        INFO(rel << " calls getenv(\"" << name << "\")");
        CHECK(rel == "runtime/tuning.cpp");
      }
      if (rel == "runtime/launcher.cpp") {
        for (std::sregex_iterator it(text.begin(), text.end(), literal), end; it != end; ++it) {
          INFO("runtime/launcher.cpp names " << (*it)[1]);
          CHECK(launch.count((*it)[1]) == 1);
        }
      }
      if (rel.rfind("kernels/", 0) == 0) {
        INFO(rel << " reads the environment");
        CHECK(text.find("getenv") == std::string::npos);
      }
    }
  }
  CHECK(files > 50);
}
