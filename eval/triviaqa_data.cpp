// triviaqa_data.cpp: TriviaQA readers for the HF, original-release and llm-foundry layouts.
#include "eval/triviaqa_data.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include "eval/answer_normalize.h"
#include "eval/json_fields.h"
#include "format/error.h"
#include "format/json_depth.h"

namespace tpshard::eval {
namespace {

using nlohmann::json;

const json* find_key(const json& obj, std::initializer_list<const char*> keys) {
  for (const char* k : keys) {
    auto it = obj.find(k);
    if (it != obj.end() && !it->is_null()) return &*it;
  }
  return nullptr;
}

// A string field (absent: ""); allow_integer accepts an integer id and returns its decimal text, exactly
// as written (dump(): get<long long>() would turn 18446744073709551615 into "-1").
std::string string_field(const json* v, const std::string& where, const char* name, bool allow_integer = false) {
  if (v == nullptr) return {};
  if (v->is_string()) return v->get<std::string>();
  if (allow_integer && v->is_number_integer()) return v->dump();
  throw Error(where + ": field '" + name + "' is " + v->type_name() + ", expected a string",
              "fix or remove the record (--on-bad-record skip leaves it out)");
}

void append_strings(const json* v, std::vector<std::string>& out, const std::string& where, const char* name) {
  if (v == nullptr) return;
  if (v->is_string()) {
    out.push_back(v->get<std::string>());
    return;
  }
  if (!v->is_array())
    throw Error(where + ": field '" + name + "' is " + v->type_name() + ", expected a list of strings",
                "fix or remove the record (--on-bad-record skip leaves it out)");
  for (const auto& e : *v) {
    if (!e.is_string())
      throw Error(where + ": field '" + name + "' holds a " + e.type_name() + ", expected strings",
                  "fix or remove the record (--on-bad-record skip leaves it out)");
    out.push_back(e.get<std::string>());
  }
}

std::string strip_spaces(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// llm-foundry's "Question: ...\nAnswer:" context back to the bare question.
std::string question_from_context(const std::string& context) {
  std::string q = context;
  const std::string prefix = "Question:";
  if (q.compare(0, prefix.size(), prefix) == 0) q = q.substr(prefix.size());
  size_t a = q.rfind("\nAnswer:");
  if (a != std::string::npos) q = q.substr(0, a);
  return strip_spaces(q);
}

/// Largest TriviaQA data read from something that is not a regular file (a pipe, or a device such as
/// /dev/zero, which would otherwise grow memory until the process is killed). A regular file is read
/// whole: its size is known and finite.
constexpr size_t kMaxStreamedDataBytes = size_t(1) << 30;

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(path + ": cannot open the TriviaQA data file", "check the path given to --data / --shots-from");
  std::error_code ec;
  const bool regular = std::filesystem::is_regular_file(path, ec);
  std::string text;
  std::vector<char> chunk(size_t(1) << 20);
  while (f) {
    f.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    text.append(chunk.data(), static_cast<size_t>(f.gcount()));
    if (!regular && text.size() > kMaxStreamedDataBytes)
      throw Error(path + ": more than " + std::to_string(kMaxStreamedDataBytes >> 30) +
                      " GiB read from a file that is not a regular file (a device or a pipe)",
                  "give a TriviaQA JSON or JSON Lines file");
  }
  return text;
}

}  // namespace

BadRecordPolicy parse_bad_record_policy(const std::string& s) {
  if (s == "stop") return BadRecordPolicy::Stop;
  if (s == "skip") return BadRecordPolicy::Skip;
  throw Error("--on-bad-record: unknown value '" + s + "'", "use 'stop' or 'skip'");
}

TriviaQaRecord parse_triviaqa_record(const json& j, const std::string& where, const std::string& default_id) {
  const std::string hint = "fix or remove the record (--on-bad-record skip leaves it out)";
  if (!j.is_object()) throw Error(where + ": record is " + std::string(j.type_name()) + ", expected an object", hint);
  TriviaQaRecord r;
  r.source = where;
  r.id = string_field(find_key(j, {"question_id", "QuestionId", "id"}), where, "question_id", true);
  if (r.id.empty()) r.id = default_id;
  if (const json* q = find_key(j, {"question", "Question"})) {
    r.question = strip_spaces(string_field(q, where, "question"));
  } else if (const json* c = find_key(j, {"context"})) {
    r.question = question_from_context(string_field(c, where, "context"));
  }
  if (r.question.empty()) throw Error(where + ": record has no question (question / Question / context)", hint);

  std::vector<std::string> answers;
  const json* ans = find_key(j, {"answer", "Answer"});
  if (ans != nullptr && ans->is_object()) {
    r.answer = string_field(find_key(*ans, {"value", "Value"}), where, "answer.value");
    append_strings(find_key(*ans, {"normalized_aliases", "NormalizedAliases"}), answers, where, "normalized_aliases");
    append_strings(find_key(*ans, {"aliases", "Aliases"}), answers, where, "aliases");
    append_strings(find_key(*ans, {"HumanAnswers", "human_answers"}), answers, where, "HumanAnswers");
  } else if (ans != nullptr) {
    r.answer = string_field(ans, where, "answer");  // llm-foundry: answer is the value string
    append_strings(find_key(j, {"aliases"}), answers, where, "aliases");
  }
  if (!r.answer.empty()) answers.push_back(r.answer);
  if (r.answer.empty() && !answers.empty()) r.answer = answers.front();
  std::set<std::string> seen;
  for (auto& a : answers) {
    if (seen.insert(normalize_answer(a)).second) r.ground_truths.push_back(std::move(a));
  }
  if (r.ground_truths.empty()) throw Error(where + ": record '" + r.id + "' has no answer (value or aliases)", hint);
  return r;
}

TriviaQaLoadResult load_triviaqa(const std::string& path, BadRecordPolicy policy) {
  const std::string text = read_file(path);
  TriviaQaLoadResult out;
  std::set<std::string> ids;
  auto add = [&](const std::function<TriviaQaRecord()>& parse, const std::string& where) {
    try {
      TriviaQaRecord r = parse();
      if (!ids.insert(r.id).second)
        throw Error(where + ": duplicate question id '" + r.id + "'", "ids must be unique; remove the duplicate");
      out.records.push_back(std::move(r));
    } catch (const Error& e) {
      if (policy == BadRecordPolicy::Stop) throw;
      out.warnings.push_back(std::string(e.what()) + " (skipped)");
    }
  };

  // A whole-file JSON document (original release, a JSON array, or a one-record file) ...
  json doc = json::parse(text, json_depth_guard(path), /*allow_exceptions=*/false);
  if (!doc.is_discarded()) {
    const json* list = nullptr;
    std::string list_name;
    if (doc.is_object() && doc.contains("Data")) {
      list = &doc["Data"];
      list_name = "Data";
    } else if (doc.is_object() && doc.contains("data")) {
      list = &doc["data"];
      list_name = "data";
    } else if (doc.is_array()) {
      list = &doc;
    }
    if (list != nullptr) {
      if (!list->is_array()) throw Error(path + ": '" + list_name + "' is not a list of records", "check the file layout");
      for (size_t i = 0; i < list->size(); ++i) {
        std::string where = path + ": " + (list_name.empty() ? "" : list_name) + "[" + std::to_string(i) + "]";
        add([&] { return parse_triviaqa_record((*list)[i], where, "record-" + std::to_string(i + 1)); }, where);
      }
    } else {
      std::string where = path + ":1";
      add([&] { return parse_triviaqa_record(doc, where, "line-1"); }, where);
    }
  } else {
    // ... or JSON Lines: one record per non-blank line.
    std::istringstream in(text);
    std::string line;
    size_t line_no = 0;
    while (std::getline(in, line)) {
      ++line_no;
      if (strip_spaces(line).empty()) continue;
      std::string where = path + ":" + std::to_string(line_no);
      add(
          [&] {
            json j = parse_jsonl_line(line, where, "fix or remove the line (--on-bad-record skip leaves it out)");
            return parse_triviaqa_record(j, where, "line-" + std::to_string(line_no));
          },
          where);
    }
  }
  if (out.records.empty())
    throw Error(path + ": no TriviaQA record found", "expected HF records (question, answer.aliases), the original "
                                                   "{\"Data\": [...]} layout, or JSONL with context/answer/aliases");
  return out;
}

}  // namespace tpshard::eval
