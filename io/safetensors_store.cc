// SafetensorsStore: a checkpoint directory, single file or sharded with an index.
#include <filesystem>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/file_util.h"
#include "core/json_util.h"
#include "io/safetensors.h"

namespace mtpspec {
namespace {

constexpr char kIndexFileName[] = "model.safetensors.index.json";
constexpr char kSingleFileName[] = "model.safetensors";

// Present in any form (a directory or a dangling link too): opening it then says what is wrong,
// rather than the checkpoint seeming to have no weights.
bool IsPresent(const std::filesystem::path& path) {
  std::error_code error;
  return std::filesystem::symlink_status(path, error).type() != std::filesystem::file_type::not_found && !error;
}

// Shard names come from a file we did not write; keep them inside the checkpoint directory.
bool IsSafeRelativePath(const std::string& name) {
  if (name.empty()) return false;
  const std::filesystem::path path(name);
  if (path.is_absolute()) return false;
  for (const auto& part : path) {
    if (part == "..") return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::map<std::string, std::string>> ParseShardIndex(const std::string& text,
                                                                   const std::string& source) {
  ASSIGN_OR_RETURN(const nlohmann::json index, ParseJsonText(text, source, "index"));
  if (!index.is_object() || !index.contains("weight_map")) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": expected a JSON object with a \"weight_map\""));
  }
  ASSIGN_OR_RETURN(auto weight_map, ParseStringMap(index["weight_map"], source, "weight_map"));
  for (const auto& [tensor, shard] : weight_map) {
    if (!IsSafeRelativePath(shard)) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": tensor \"", tensor, "\" maps to shard \"", shard,
                       "\", which is not a relative path inside the checkpoint directory"));
    }
  }
  return weight_map;
}

absl::StatusOr<std::unique_ptr<SafetensorsStore>> SafetensorsStore::Open(const std::string& dir, FileMemory memory) {
  std::unique_ptr<SafetensorsStore> store(new SafetensorsStore());
  store->dir_ = dir;
  const std::filesystem::path root(dir);
  std::error_code error;
  if (!std::filesystem::is_directory(root, error)) {
    return absl::NotFoundError(absl::StrCat(dir, ": not a directory"));
  }
  if (IsPresent(root / kIndexFileName)) {
    RETURN_IF_ERROR(store->OpenSharded((root / kIndexFileName).string(), memory));
  } else if (IsPresent(root / kSingleFileName)) {
    ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file,
                     SafetensorsFile::Open((root / kSingleFileName).string(), memory));
    for (const std::string& name : file->names()) store->file_of_tensor_.emplace(name, file.get());
    store->files_.push_back(std::move(file));
  } else {
    return absl::NotFoundError(
        absl::StrCat(dir, ": contains neither ", kIndexFileName, " nor ", kSingleFileName));
  }
  for (const auto& [name, file] : store->file_of_tensor_) store->names_.push_back(name);
  return store;
}

absl::Status SafetensorsStore::OpenSharded(const std::string& index_path, FileMemory memory) {
  ASSIGN_OR_RETURN(const std::string text, ReadFileToString(index_path));
  ASSIGN_OR_RETURN(const auto weight_map, ParseShardIndex(text, index_path));
  std::set<std::string> shard_names;
  for (const auto& [tensor, shard] : weight_map) shard_names.insert(shard);

  std::map<std::string, const SafetensorsFile*> file_of_shard;
  for (const std::string& shard : shard_names) {
    const std::string shard_path = (std::filesystem::path(dir_) / shard).string();
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(shard_path, memory);
    if (!file.ok()) {
      return absl::Status(
          file.status().code(),
          absl::StrCat(file.status().message(), " (shard listed in ", index_path, ")"));
    }
    file_of_shard.emplace(shard, file->get());
    files_.push_back(*std::move(file));
  }

  for (const auto& file : files_) {
    for (const std::string& name : file->names()) {
      auto [it, inserted] = file_of_tensor_.emplace(name, file.get());
      if (!inserted) {
        return absl::InvalidArgumentError(absl::StrCat(
            dir_, ": tensor \"", name, "\" is stored in two shards: ", it->second->path(), " and ",
            file->path()));
      }
    }
  }
  for (const auto& [tensor, shard] : weight_map) {
    const SafetensorsFile* file = file_of_shard.at(shard);
    if (!file->Has(tensor)) {
      return absl::NotFoundError(absl::StrCat(index_path, ": tensor \"", tensor,
                                              "\" is listed under shard ", file->path(),
                                              ", which does not contain it"));
    }
  }
  return absl::OkStatus();
}

bool SafetensorsStore::Has(std::string_view name) const { return file_of_tensor_.contains(name); }

absl::StatusOr<TensorView> SafetensorsStore::Get(std::string_view name) const {
  auto it = file_of_tensor_.find(name);
  if (it == file_of_tensor_.end()) {
    return absl::NotFoundError(
        absl::StrCat(dir_, ": checkpoint has no tensor named \"", std::string(name), "\""));
  }
  return it->second->Get(name);
}

std::string SafetensorsStore::FileOf(std::string_view name) const {
  auto it = file_of_tensor_.find(name);
  return it == file_of_tensor_.end() ? std::string() : it->second->path();
}

}  // namespace mtpspec
