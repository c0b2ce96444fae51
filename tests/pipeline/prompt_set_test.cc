#include "pipeline/prompt_set.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mtpspec {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(PromptSetTest, TheCommonLayoutsLoad) {
  const std::string text = absl::StrCat(
      R"({"question_id": 81, "category": "writing", "turns": ["Write a poem.", "Shorter."]})", "\n",
      R"({"category": "coding", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "def f"}]})",
      "\n", R"({"task_id": "HumanEval/0", "prompt": "def add(a, b):"})", "\n", "\n",
      R"({"prompt": "Once upon a time"})", "\n");
  absl::StatusOr<std::vector<PromptSetItem>> items = ParsePromptSet(text, "mixed.jsonl");
  ASSERT_TRUE(items.ok()) << items.status();
  ASSERT_EQ(items->size(), 4u);
  EXPECT_EQ((*items)[0].id, "81");
  EXPECT_EQ((*items)[0].category, "writing");
  EXPECT_THAT((*items)[0].turns, ElementsAre("Write a poem.", "Shorter."));
  EXPECT_EQ((*items)[0].source, "mixed.jsonl:1");
  EXPECT_EQ((*items)[1].id, "2");
  EXPECT_THAT((*items)[1].turns, ElementsAre("def f"));
  EXPECT_EQ((*items)[2].category, "humaneval");
  EXPECT_EQ((*items)[2].id, "HumanEval/0");
  EXPECT_EQ((*items)[3].category, "default");
  EXPECT_EQ((*items)[3].id, "5");  // the line number: line 4 is blank

  absl::StatusOr<std::vector<PromptSetItem>> chosen = ParsePromptSet(text, "mixed.jsonl", {"coding", "writing"});
  ASSERT_TRUE(chosen.ok());
  ASSERT_EQ(chosen->size(), 2u);
  EXPECT_EQ((*chosen)[1].category, "coding");
}

TEST(PromptSetTest, FaultsNameTheSourceAndLine) {
  const std::pair<std::string, std::string> cases[] = {
      {"{not json", "bad.jsonl:1: not JSON"},
      {R"({"category": "x"})", "bad.jsonl:1: the line has no turns, messages or prompt field"},
      {"{\"prompt\": \"ok\"}\n{\"category\": \"x\", \"turns\": [\"fine\", \" \"]}", "bad.jsonl:2: turn 1 is empty"},
      {R"({"category": "x", "turns": []})", "bad.jsonl:1: the prompt has no turns"},
      {R"({"category": "x", "turns": "text"})", "bad.jsonl:1: the prompt has no turns"},
      {R"({"category": "x", "messages": {}})", "bad.jsonl:1: messages must be a list"},
      {R"({"category": "x", "messages": [{"role": "user", "content": 3}]})", "bad.jsonl:1: turn 0 is empty or not text"},
      {R"({"turns": ["no category"]})", "bad.jsonl:1: the line has no category"},
      {"[1, 2]", "bad.jsonl:1: a line must be a JSON object, got array"},
      {"\n  \n", "bad.jsonl: holds no prompts"},
      {R"({"prompt": "x", "id": [1]})", "bad.jsonl:1: id must be text or a number"},
      {R"({"prompt": "x", "category": "all"})", "bad.jsonl:1: the category \"all\" names the whole set's"},
      {R"({"category": "x", "messages": [{"role": "user"}]})", "bad.jsonl:1: turn 0 is empty or not text"},
      {R"({"category": "coding", "turns": ["FULL BENCHMARK DATA SHOULD BE FETCHED FROM THE SOURCE USING X"]})",
       "bad.jsonl:1: turn 0 is SPEED-Bench's placeholder for data it has not fetched"},
  };
  for (const auto& [text, message] : cases) {
    absl::StatusOr<std::vector<PromptSetItem>> items = ParsePromptSet(text, "bad.jsonl");
    ASSERT_FALSE(items.ok()) << text;
    EXPECT_EQ(items.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(items.status().message(), HasSubstr(message)) << text;
  }
}

TEST(PromptSetTest, DeepNestingIsAnErrorNotACrash) {
  // Values are looked at in place: a copy or a dump of this would recurse 200,000 levels deep.
  const std::string deep = absl::StrCat(R"({"prompt": "x", "category": "c", "id": )", std::string(200000, '['),
                                        std::string(200000, ']'), "}");
  absl::StatusOr<std::vector<PromptSetItem>> items = ParsePromptSet(deep, "deep.jsonl");
  ASSERT_FALSE(items.ok());
  EXPECT_THAT(items.status().message(), HasSubstr("deep.jsonl:1: id must be text or a number"));
  const std::string deep_turn = absl::StrCat(R"({"category": "c", "turns": [)", std::string(200000, '['),
                                             std::string(200000, ']'), "]}");
  EXPECT_THAT(ParsePromptSet(deep_turn, "deep.jsonl").status().message(), HasSubstr("turn 0 is empty or not text"));
}

TEST(PromptSetTest, ACategoryFilterThatMatchesNothingIsAnError) {
  absl::StatusOr<std::vector<PromptSetItem>> items =
      ParsePromptSet(R"({"category": "math", "turns": ["1+1"]})", "set.jsonl", {"poetry", "art"});
  ASSERT_FALSE(items.ok());
  EXPECT_THAT(items.status().message(), HasSubstr("set.jsonl: no prompt of categories ['art', 'poetry'] (it has ['math'])"));
  EXPECT_EQ(LoadPromptSet("/nonexistent/missing.jsonl").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace mtpspec
