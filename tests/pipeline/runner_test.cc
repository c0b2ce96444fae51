// The request runner (pipeline/runner.h) and stop strings (pipeline/stop_strings.h) on the bundled
// trained model: a stop string ends the request at the fewest tokens whose text holds it, the text
// before it is kept, the caller hears only the kept tokens; a series on one runner gives each request
// what it gives alone (sampler-equality), and a batch through RunBatchRequests equals the requests run
// alone.
#include "pipeline/runner.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mtpspec {
namespace {

using ::testing::HasSubstr;

struct Trained {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
};

const Trained& Load() {
  static Trained* t = [] {
    auto* out = new Trained;
    const std::string dir = std::string(MTPSPEC_MODELS_DIR) + "/glm-tiny-mtp";
    auto model = Model::Load(dir);
    auto tokenizer = Tokenizer::Load(dir + "/tokenizer.json");
    EXPECT_TRUE(model.ok() && tokenizer.ok());
    out->model = std::move(*model);
    out->tokenizer = std::move(*tokenizer);
    return out;
  }();
  return *t;
}

std::string Decode(const Tokenizer& tokenizer, std::span<const int32_t> ids) { return *tokenizer.Decode(ids); }

TEST(RunnerTest, StopStringsEndAtTheFewestTokensThatHoldThem) {
  const Trained& t = Load();
  RequestOptions options;
  options.max_new_tokens = 48;
  options.stop_at_eos = false;
  auto runner = RequestRunner::Create(*t.model, options, 128, Frontend::kCli);
  ASSERT_TRUE(runner.ok()) << runner.status();
  const std::vector<int32_t> prompt = *t.tokenizer->Encode("It is a truth universally acknowledged");
  auto plain = (*runner)->Run(prompt);
  ASSERT_TRUE(plain.ok());
  const std::string text = Decode(*t.tokenizer, plain->tokens);
  const std::string stop = text.substr(10, 3);
  auto stops = StopStrings::Create(*t.tokenizer, {stop, "no such text anywhere"}, "--stop");
  ASSERT_TRUE(stops.ok());
  std::vector<int32_t> heard;
  RunHooks hooks;
  hooks.on_tokens = [&](std::span<const int32_t> tokens) {
    heard.insert(heard.end(), tokens.begin(), tokens.end());
    return true;
  };
  hooks.stops = &*stops;
  auto stopped = (*runner)->Run(prompt, hooks);
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ(stopped->stop_reason, "stop_string");
  ASSERT_TRUE(stops->hit().has_value());
  EXPECT_EQ(*stops->hit(), text.substr(0, text.find(stop)));
  const int64_t n = static_cast<int64_t>(stopped->tokens.size());
  EXPECT_EQ(n, stops->hit_tokens());
  EXPECT_TRUE(std::equal(stopped->tokens.begin(), stopped->tokens.end(), plain->tokens.begin()));
  EXPECT_TRUE(absl::StrContains(Decode(*t.tokenizer, stopped->tokens), stop));
  EXPECT_FALSE(absl::StrContains(Decode(*t.tokenizer, std::span(stopped->tokens).first(n - 1)), stop))
      << "one token fewer does not hold it";
  EXPECT_EQ(heard, stopped->tokens) << "the caller hears the kept tokens only";
  EXPECT_THAT(std::string(StopStrings::Create(*t.tokenizer, {"a", ""}, "--stop").status().message()),
              HasSubstr("--stop[1] is empty"));
}

TEST(RunnerTest, ASeriesAndABatchGiveEachRequestItsOwnTokens) {
  const Trained& t = Load();
  RequestOptions options;
  options.max_new_tokens = 40;
  options.accept.sampling.temperature = 0.8;
  options.accept.sampling.seed = 5;
  RequestOptions plain = options;
  plain.draft = DraftKind::kNone;
  auto series = RequestRunner::Create(*t.model, options, 128, Frontend::kPython);
  auto alone = RequestRunner::Create(*t.model, plain, 128, Frontend::kPython);
  ASSERT_TRUE(series.ok() && alone.ok());
  std::vector<BatchRequest> requests;
  for (const char* text : {"Once upon a time", "The cat", "def main(args):"}) {
    const std::vector<int32_t> prompt = *t.tokenizer->Encode(text);
    auto a = (*series)->Run(prompt);
    auto b = (*alone)->Run(prompt);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->tokens, b->tokens) << text;
    requests.push_back({prompt, ToGenerateOptions(options)});
  }
  auto batch = RunBatchRequests(*t.model, options, 128, 2, requests, {}, Frontend::kPython);
  ASSERT_TRUE(batch.ok()) << batch.status();
  for (size_t r = 0; r < requests.size(); ++r) {
    auto b = (*alone)->Run(requests[r].prompt);
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(batch->requests[r].result.tokens, b->tokens) << r;
  }
}

}  // namespace
}  // namespace mtpspec
