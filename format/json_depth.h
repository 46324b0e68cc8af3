// json_depth.h: a nesting limit for every JSON file we read (config.json, tokenizer.json, manifest.json,
// safetensors headers, JSONL records). nlohmann parses deep input without recursion, but copying,
// comparing, printing and destroying a value recurse once per level, so thousands of levels overflow the
// stack later, far from the parser. Real files nest fewer than 10 levels.
#pragma once
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "format/error.h"

namespace tpshard {

/// The deepest nesting of arrays and objects accepted.
constexpr int kMaxJsonDepth = 100;

/// A parser callback for nlohmann::json::parse (also with allow_exceptions = false) that throws Error
/// "WHERE: JSON nested deeper than 100 levels" at the first array or object beyond kMaxJsonDepth, and
/// otherwise defers to `inner` (keep everything when empty).
inline nlohmann::json::parser_callback_t json_depth_guard(std::string where,
                                                          nlohmann::json::parser_callback_t inner = nullptr) {
  return [where = std::move(where), inner = std::move(inner)](int depth, nlohmann::json::parse_event_t ev,
                                                              nlohmann::json& parsed) {
    if ((ev == nlohmann::json::parse_event_t::object_start || ev == nlohmann::json::parse_event_t::array_start) &&
        depth >= kMaxJsonDepth)
      throw Error(where + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels",
                  "the file is corrupt or crafted; restore it from its source");
    return inner ? inner(depth, ev, parsed) : true;
  };
}

}  // namespace tpshard
