#include "spec/batch_engine.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/limits.h"

namespace mtpspec {

// The loop's records as the engine's clients hear them: each step's new tokens, then the end. Runs
// on the engine's thread; the callbacks are called without the engine's lock held, so that they may
// submit or cancel.
class BatchEngine::Events : public BatchObserver {
 public:
  explicit Events(BatchEngine& engine) : engine_(engine) {}

  void OnAdmit(int64_t id, int64_t seat, double start, double seconds) override {
    std::lock_guard<std::mutex> lock(engine_.mutex_);
    engine_.stats_->OnAdmit(id, seat, start, seconds);
  }

  void OnTokens(int64_t id, const Request& request) override {
    size_t& sent = delivered_[id];
    const std::vector<int32_t>& tokens = request.tokens();
    if (tokens.size() <= sent) return;
    EngineEvent event;
    event.tokens.assign(tokens.begin() + static_cast<std::ptrdiff_t>(sent), tokens.end());
    const std::vector<float>& logprobs = request.logprobs();
    if (logprobs.size() == tokens.size()) {
      event.logprobs.assign(logprobs.begin() + static_cast<std::ptrdiff_t>(sent), logprobs.end());
    }
    sent = tokens.size();
    EngineCallback* callback = nullptr;
    {
      std::lock_guard<std::mutex> lock(engine_.mutex_);
      auto it = engine_.callbacks_.find(id);
      if (it != engine_.callbacks_.end()) callback = &it->second;  // erased only on this thread
    }
    if (callback != nullptr && *callback) (*callback)(std::move(event));
  }

  void OnCycle(const BatchCycleRecord& record) override {
    std::lock_guard<std::mutex> lock(engine_.mutex_);
    engine_.stats_->OnCycle(record);
  }

  void OnLeave(int64_t id, const absl::Status& status, GenerateResult result, double end) override {
    EngineCallback callback;
    {
      std::lock_guard<std::mutex> lock(engine_.mutex_);
      engine_.stats_->OnLeave(id, status, result, end);
      if (engine_.loop_ != nullptr) engine_.seated_ = engine_.loop_->seated();  // its seat is already free
      auto it = engine_.callbacks_.find(id);
      if (it != engine_.callbacks_.end()) {
        callback = std::move(it->second);
        engine_.callbacks_.erase(it);
      }
    }
    delivered_.erase(id);
    EngineEvent event;
    event.done = true;
    event.status = status;
    event.result = std::move(result);
    if (callback) callback(std::move(event));
  }

 private:
  BatchEngine& engine_;
  std::map<int64_t, size_t> delivered_;  // tokens each running request has been sent
};

absl::StatusOr<std::unique_ptr<BatchEngine>> BatchEngine::Create(std::vector<BatchSlot> slots, EngineOptions options) {
  RETURN_IF_ERROR(ValidateBatch(slots, {}, options.batch));
  if (!options.batch.k_schedule.empty()) {
    return absl::InvalidArgumentError("a live batch takes each request's own k; it has no k schedule");
  }
  if (options.max_waiting < 0) {
    return absl::InvalidArgumentError(absl::StrCat("max_waiting must be >= 0, got ", options.max_waiting));
  }
  std::unique_ptr<BatchEngine> engine(new BatchEngine(std::move(slots), std::move(options)));
  engine->thread_ = std::thread([e = engine.get()] { e->Run(); });
  return engine;
}

BatchEngine::BatchEngine(std::vector<BatchSlot> slots, EngineOptions options)
    : slots_(std::move(slots)), options_(std::move(options)), events_(std::make_unique<Events>(*this)) {
  const Clock& clock = options_.batch.clock != nullptr ? *options_.batch.clock : SteadyClock();
  // A live engine runs for days: its statistics keep totals, not a log of every cycle.
  stats_ = std::make_unique<BatchStatsRecorder>(static_cast<int64_t>(slots_.size()), clock.Seconds(),
                                                /*keep_cycle_log=*/false);
  loop_ = std::make_unique<BatchLoop>(slots_, options_.batch, kMaxDraftTokens, std::vector<BatchObserver*>{events_.get()});
}

BatchEngine::~BatchEngine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    accepting_ = false;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  loop_.reset();
}

absl::StatusOr<int64_t> BatchEngine::Submit(BatchRequest request, EngineCallback callback) {
  if (request.options.adaptive_controller != nullptr) {
    return absl::InvalidArgumentError(
        "a live batch gives each k = auto request the batch's controller; a request's own adaptive_controller "
        "serves one request at a time and cannot join it");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (!accepting_) return absl::UnavailableError("the engine is shutting down and takes no new requests");
  const int64_t free_seats = static_cast<int64_t>(slots_.size()) - seated_ - admitting_;
  if (static_cast<int64_t>(waiting_.size()) >= options_.max_waiting + std::max<int64_t>(free_seats, 0)) {
    return absl::ResourceExhaustedError(absl::StrCat(waiting_.size(), " requests already wait for one of the ",
                                                     slots_.size(), " seats (the limit is ", options_.max_waiting,
                                                     "); retry later"));
  }
  const int64_t handle = next_handle_++;
  callbacks_[handle] = std::move(callback);
  waiting_.push_back({handle, std::move(request)});
  wake_.notify_one();
  return handle;
}

bool BatchEngine::Cancel(int64_t handle) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (callbacks_.count(handle) == 0) return false;
  cancels_.insert(handle);
  wake_.notify_one();
  return true;
}

void BatchEngine::Drain(double timeout_seconds) {
  std::unique_lock<std::mutex> lock(mutex_);
  accepting_ = false;
  auto empty = [this] { return callbacks_.empty(); };
  if (timeout_seconds > 0) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
    if (idle_.wait_until(lock, deadline, empty)) return;
  }
  // With no time left, the cancels are queued under the same lock that closed admission.
  for (const auto& [handle, callback] : callbacks_) cancels_.insert(handle);
  wake_.notify_one();
  idle_.wait(lock, empty);
}

int64_t BatchEngine::running() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return seated_ + admitting_;
}

int64_t BatchEngine::waiting() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(waiting_.size());
}

BatchStats BatchEngine::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_->Stats(loop_->clock().Seconds());
}

// The engine's thread: between cycles it ends the cancelled requests and seats the waiting ones;
// it sleeps while there is nothing to run.
void BatchEngine::Run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    wake_.wait(lock, [this] { return stop_ || !waiting_.empty() || !cancels_.empty() || seated_ > 0; });
    if (stop_) {
      for (const auto& [handle, callback] : callbacks_) cancels_.insert(handle);
    }
    // Cancelled requests: a waiting one leaves the queue with an empty result, a seated one its seat.
    const std::set<int64_t> cancels = std::move(cancels_);
    cancels_.clear();
    for (int64_t handle : cancels) {
      auto waiting = std::find_if(waiting_.begin(), waiting_.end(), [&](const Waiting& w) { return w.handle == handle; });
      if (waiting != waiting_.end()) {
        waiting_.erase(waiting);
        EngineCallback callback = std::move(callbacks_[handle]);
        callbacks_.erase(handle);
        lock.unlock();
        EngineEvent event;
        event.done = true;
        event.result.stop_reason = "cancelled";
        if (callback) callback(std::move(event));
        callback = nullptr;  // dropped without the lock: a Python callable takes the GIL to go
        lock.lock();
        continue;
      }
      lock.unlock();
      loop_->Cancel(handle);
      lock.lock();
    }
    if (stop_) break;
    while (!waiting_.empty() && loop_->free_seats() > 0) {
      Waiting next = std::move(waiting_.front());
      waiting_.pop_front();
      ++admitting_;
      lock.unlock();
      loop_->Admit(next.handle, next.request);
      lock.lock();
      --admitting_;
      seated_ = loop_->seated();
    }
    seated_ = loop_->seated();
    if (seated_ > 0) {
      lock.unlock();
      loop_->Cycle();
      lock.lock();
      seated_ = loop_->seated();
    }
    if (callbacks_.empty()) idle_.notify_all();
  }
  seated_ = 0;
  idle_.notify_all();
}

}  // namespace mtpspec
