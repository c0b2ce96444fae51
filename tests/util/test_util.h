// Helpers shared by the C++ tests: scratch directories, raw file I/O, optional Python checks.
#pragma once

#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

#include "gtest/gtest.h"

namespace mtpspec::testing_util {

// A fresh directory under the gtest temp dir, deleted with everything in it on destruction.
class ScopedTempDir {
 public:
  ScopedTempDir() {
    std::string pattern = ::testing::TempDir() + "mtpspec_test_XXXXXX";
    if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
    EXPECT_FALSE(path_.empty()) << "mkdtemp failed for " << pattern;
  }
  ~ScopedTempDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string File(std::string_view name) const { return path_ + "/" + std::string(name); }

 private:
  std::string path_;
};

inline void WriteBytes(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << "writing " << path;
}

inline std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

// The reference interpreter: $MTPSPEC_PYTHON (scripts/test.sh points it at the environment it
// made, with numpy and safetensors installed), else python3.
inline std::string ReferencePython() {
  const char* python = std::getenv("MTPSPEC_PYTHON");
  return python != nullptr && *python != '\0' ? python : "python3";
}

// Whether the reference Python can import `modules` (e.g. "numpy, safetensors"). A test that needs
// them skips without them, unless MTPSPEC_PYTHON names the interpreter: then a missing module is a
// failure (the caller asserts on the result), never a skip.
inline bool PythonCanImport(const std::string& modules) {
  const std::string command = ReferencePython() + " -c 'import " + modules + "' >/dev/null 2>&1";
  return std::system(command.c_str()) == 0;
}
inline bool ReferencePythonRequired() { return std::getenv("MTPSPEC_PYTHON") != nullptr; }

// Runs a Python snippet (single-quote free); returns true if it exits with status 0.
inline bool RunPython(const std::string& code) {
  const std::string command = ReferencePython() + " -c '" + code + "'";
  return std::system(command.c_str()) == 0;
}

}  // namespace mtpspec::testing_util
