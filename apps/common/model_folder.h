#pragma once
// The model folder an app's --model option names, with errors that say what the folder should be:
//   "--model DIR: not a folder; <not_a_folder>"     "--model DIR: no NAME there; <missing_file>"

#include <string>

namespace attn_apps {

class ModelFolder {
 public:
  /// Throws std::runtime_error unless `dir` is a directory. The hints end the two errors.
  ModelFolder(std::string dir, std::string not_a_folder, std::string missing_file);
  /// DIR/name; throws std::runtime_error if it cannot be opened.
  std::string file(const std::string& name) const;
  /// Whether DIR/name can be opened (for the optional files).
  bool has(const std::string& name) const;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_, missing_file_;
};

}  // namespace attn_apps
