#include "io/safetensors_writer.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "core/file_util.h"
#include "nlohmann/json.hpp"

namespace mtpspec {
namespace {

absl::Status TensorError(absl::string_view path, absl::string_view tensor,
                         absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": tensor \"", tensor, "\": ", message));
}

absl::Status CheckWritable(const std::string& path, const std::string& name,
                           const TensorView& view) {
  if (name.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": empty tensor name"));
  if (name == "__metadata__") return TensorError(path, name, "name is reserved for metadata");
  if (view.ndim < 0 || view.ndim > kMaxDims) {
    return TensorError(path, name, absl::StrCat("has ", view.ndim, " dimensions"));
  }
  for (int i = 0; i < view.ndim; ++i) {
    if (view.shape[i] < 0) return TensorError(path, name, "has a negative dimension");
  }
  if (!view.is_contiguous()) {
    return TensorError(path, name,
                       absl::StrCat("view with shape ", ShapeString(view), " is not contiguous"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<std::pair<std::string, TensorView>>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  std::set<std::string_view> seen;
  for (const auto& [name, view] : tensors) {
    RETURN_IF_ERROR(CheckWritable(path, name, view));
    if (!seen.insert(name).second) return TensorError(path, name, "name appears twice");
  }

  // Storage order: element size descending, then name (see the header comment).
  std::vector<const std::pair<std::string, TensorView>*> order;
  for (const auto& item : tensors) order.push_back(&item);
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    const size_t size_a = DTypeSize(a->second.dtype), size_b = DTypeSize(b->second.dtype);
    if (size_a != size_b) return size_a > size_b;
    return a->first < b->first;
  });

  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto* item : order) {
    const TensorView& view = item->second;
    const uint64_t size = view.nbytes();
    header[item->first] = {{"dtype", std::string(DTypeName(view.dtype))},
                           {"shape", view.shape_vector()},
                           {"data_offsets", {offset, offset + size}}};
    offset += size;
  }
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');

  uint8_t length_prefix[8];
  for (int i = 0; i < 8; ++i)
    length_prefix[i] = static_cast<uint8_t>(header_text.size() >> (8 * i));

  ASSIGN_OR_RETURN(AtomicFileWriter out, AtomicFileWriter::Create(path));
  RETURN_IF_ERROR(out.Append(length_prefix, sizeof length_prefix));
  RETURN_IF_ERROR(out.Append(header_text.data(), header_text.size()));
  for (const auto* item : order) {
    if (item->second.data == nullptr) {
      RETURN_IF_ERROR(out.AppendZeros(item->second.nbytes()));
    } else {
      RETURN_IF_ERROR(out.Append(item->second.data, item->second.nbytes()));
    }
  }
  return out.Commit();
}

}  // namespace mtpspec
