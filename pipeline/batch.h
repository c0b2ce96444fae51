// A batch of requests as the front ends run it (spec/batch.h): B slots, each a pipeline on the CPU,
// the verifier that runs their verify blocks in one forward, the memory the slots' caches need, and
// the k schedule's text form. Errors name the option the way the front end spells it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pipeline/request.h"
#include "spec/batch.h"

namespace mtpspec {

struct BatchPipeline {
  std::vector<Pipeline> pipelines;  // [B] each slot's target and drafter
  std::vector<BatchSlot> slots;     // [B] views of them for GenerateBatch
  std::unique_ptr<BatchVerifier> verifier;
  std::unique_ptr<BatchDrafter> drafter;  // the MTP drafters' batched drafts (null for other drafters)
};

// Bytes of cache one slot holds for `capacity` positions: the target's trunk cache, plus the MTP
// module's one-layer cache when the drafter runs the MTP head.
int64_t SlotCacheBytes(const Model& model, const RequestOptions& options, int64_t capacity);

// The memory this machine has available for new allocations (MemAvailable), or −1 when unknown.
int64_t AvailableMemoryBytes();

// B slots' caches against `available_bytes` (AvailableMemoryBytes() when −1; no check when that is
// unknown). The error says what the batch would need and what there is.
absl::Status CheckBatchMemory(const Model& model, const RequestOptions& options, int64_t capacity, int64_t batch,
                              Frontend frontend, int64_t available_bytes = -1);

// Checks B and the options a batch cannot take (the GPU, whose verify does not batch yet), checks
// the memory, then builds the slots and the verifier.
absl::StatusOr<BatchPipeline> BuildBatchPipeline(const Model& model, const RequestOptions& options, int64_t capacity,
                                                 int64_t batch, Frontend frontend);

// "B1:k1,B2:k2,…" (batches of up to B1 requests draft k1, …, ascending B), e.g. "1:4,4:2,16:1".
absl::StatusOr<std::vector<BatchKStep>> ParseKSchedule(const std::string& text, Frontend frontend);

// A request of a batch whose options differ from the batch's in what its slots share (the drafter,
// its MTP and lookup settings, the cache storage, the device) conflicts; `what` names the request.
absl::Status CheckSharedSlotOptions(const RequestOptions& batch, const RequestOptions& request, const std::string& what,
                                    Frontend frontend);

}  // namespace mtpspec
