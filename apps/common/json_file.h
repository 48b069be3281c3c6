#pragma once
// Reading the JSON files the model apps take (tokenizer.json, config.json), with one error wording.

#include <nlohmann/json.hpp>

#include <optional>
#include <stdexcept>
#include <string>

namespace attn_apps {

/// The parsed file. Throws std::runtime_error "WHAT 'PATH': cannot open it" or "...: not valid JSON: ...".
nlohmann::json read_json_file(const std::string& path, const std::string& what);

/// The error about the contents of such a file, in the same wording: "WHAT 'PATH': MESSAGE".
std::runtime_error json_file_error(const std::string& what, const std::string& path, const std::string& message);

/// j[key] as a positive integer (a size or a count), or that error naming the key.
int64_t positive_integer(const nlohmann::json& j, const char* key, const std::string& what, const std::string& path);

/// j[key] as a finite number > 0 (an epsilon, a base), `fallback` where the key is absent or null (no fallback:
/// required), or that error naming the key.
double positive_number(const nlohmann::json& j, const char* key, std::optional<double> fallback,
                       const std::string& what, const std::string& path);

}  // namespace attn_apps
