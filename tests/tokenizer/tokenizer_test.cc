// Tests for tokenizer/tokenizer.h against fixtures made by Hugging Face `tokenizers`
// (research/tokenizer_golden/make_tokenizer_golden.py), plus hand-made tokenizers for the BPE merge
// rules and the error cases.
#include "tokenizer/tokenizer.h"

#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace mtpspec {
namespace {

using json = nlohmann::json;

std::string TestDataPath(const std::string& name) { return std::string(MTPSPEC_TOKENIZER_TESTDATA) + "/" + name; }

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

const json& Golden() {
  static const json golden = json::parse(ReadText(TestDataPath("golden.json")));
  return golden;
}

json TokenizerJson(const std::string& name) { return json::parse(ReadText(TestDataPath(name + ".json"))); }

std::unique_ptr<Tokenizer> LoadOrDie(const std::string& name) {
  auto tokenizer = Tokenizer::Load(TestDataPath(name + ".json"));
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? std::move(tokenizer).value() : nullptr;
}

// Shows control characters and non-ASCII text readably in failure messages.
std::string Quoted(const std::string& text) { return json(text).dump(); }

// ------------------------------------------------------------------------------------------------
// Golden comparisons, one instance per fixture tokenizer.

class GoldenTokenizerTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    golden_ = Golden()["tokenizers"][GetParam()];
    ASSERT_TRUE(golden_.is_object()) << "golden.json has no entry " << GetParam();
    tokenizer_ = LoadOrDie(GetParam());
    ASSERT_NE(tokenizer_, nullptr);
  }

  json golden_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_P(GoldenTokenizerTest, VocabSizeMatchesHf) {
  EXPECT_EQ(tokenizer_->vocab_size(), golden_["vocab_size"].get<int64_t>());
}

TEST_P(GoldenTokenizerTest, EncodeMatchesHf) {
  ASSERT_GE(golden_["encode"].size(), 30u);
  for (const json& c : golden_["encode"]) {
    const std::string text = c["text"].get<std::string>();
    auto ids = tokenizer_->Encode(text);
    ASSERT_TRUE(ids.ok()) << Quoted(text) << ": " << ids.status();
    EXPECT_EQ(*ids, c["ids"].get<std::vector<int32_t>>()) << "text " << Quoted(text);
  }
}

TEST_P(GoldenTokenizerTest, DecodeMatchesHf) {
  for (const json& c : golden_["encode"]) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    auto decoded = tokenizer_->Decode(ids);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, c["decoded"].get<std::string>()) << "text " << Quoted(c["text"].get<std::string>());
    auto skipped = tokenizer_->Decode(ids, /*skip_special_tokens=*/true);
    ASSERT_TRUE(skipped.ok()) << skipped.status();
    EXPECT_EQ(*skipped, c["decoded_skip_special"].get<std::string>())
        << "text " << Quoted(c["text"].get<std::string>());
  }
}

// decode(encode(x)) is x for the tokenizers HF round-trips (golden "lossless"); for the others
// (prefix spaces, a BOS template, removed text, stripped whitespace) it is what HF's round trip gives.
TEST_P(GoldenTokenizerTest, DecodeOfEncodeRoundTrips) {
  const bool lossless = golden_["lossless"].get<bool>();
  for (const json& c : golden_["encode"]) {
    const std::string text = c["text"].get<std::string>();
    auto ids = tokenizer_->Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status();
    auto decoded = tokenizer_->Decode(*ids);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, lossless ? text : c["decoded"].get<std::string>()) << "text " << Quoted(text);
  }
}

TEST_P(GoldenTokenizerTest, DecodeOfArbitraryIdsMatchesHf) {
  ASSERT_GE(golden_["decode"].size(), 24u);
  for (const json& c : golden_["decode"]) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    auto decoded = tokenizer_->Decode(ids, c["skip_special_tokens"].get<bool>());
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, c["text"].get<std::string>()) << "ids " << c["ids"].dump();
  }
}

TEST_P(GoldenTokenizerTest, TokenToIdInvertsIdToToken) {
  for (int32_t id = 0; id < tokenizer_->vocab_size(); ++id) {
    std::optional<std::string> token = tokenizer_->IdToToken(id);
    ASSERT_TRUE(token.has_value()) << "id " << id;
    EXPECT_EQ(tokenizer_->TokenToId(*token), id) << Quoted(*token);
  }
  EXPECT_FALSE(tokenizer_->IdToToken(static_cast<int32_t>(tokenizer_->vocab_size())).has_value());
  EXPECT_FALSE(tokenizer_->IdToToken(-1).has_value());
  EXPECT_FALSE(tokenizer_->TokenToId("no such token, surely").has_value());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenTokenizerTest,
                         ::testing::Values("glm_style", "glm_style_legacy_merges", "gpt2_style", "deepseek_style",
                                           "split_behaviors", "glm5_format"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

TEST(TokenizerTest, GoldenCoversEveryFixture) { EXPECT_EQ(Golden()["tokenizers"].size(), 6u); }

TEST(TokenizerTest, LegacyMergesGiveTheSameIdsAsPairMerges) {
  auto pairs = LoadOrDie("glm_style");
  auto legacy = LoadOrDie("glm_style_legacy_merges");
  ASSERT_TRUE(pairs && legacy);
  ASSERT_TRUE(TokenizerJson("glm_style_legacy_merges")["model"]["merges"][0].is_string());
  const std::string text =
      "Speculative decoding: drafts 1234567 tokens, 中文 한국어 👩‍👩‍👧 it's fine.\r\n\tdone";
  EXPECT_EQ(pairs->Encode(text).value(), legacy->Encode(text).value());
}

// The miniature of the GLM-4.5 / GLM-5 tokenizer.json layout: its special tokens are single ids
// right after the model vocabulary and decode back to their text.
TEST(TokenizerTest, Glm5FormatSpecialTokens) {
  auto tokenizer = LoadOrDie("glm5_format");
  ASSERT_NE(tokenizer, nullptr);
  const json layout = TokenizerJson("glm5_format");
  EXPECT_EQ(layout["pre_tokenizer"]["type"], "Sequence");
  EXPECT_EQ(layout["pre_tokenizer"]["pretokenizers"][0]["type"], "Split");
  EXPECT_EQ(layout["pre_tokenizer"]["pretokenizers"][1]["type"], "ByteLevel");
  EXPECT_EQ(layout["decoder"]["type"], "ByteLevel");
  EXPECT_TRUE(layout["normalizer"].is_null());
  const int64_t model_vocab = static_cast<int64_t>(layout["model"]["vocab"].size());
  int special_count = 0;
  for (const json& added : layout["added_tokens"]) {
    const std::string content = added["content"].get<std::string>();
    const int32_t id = added["id"].get<int32_t>();
    EXPECT_GE(id, model_vocab) << content;
    EXPECT_EQ(tokenizer->TokenToId(content), id) << content;
    EXPECT_EQ(tokenizer->Encode(content).value(), std::vector<int32_t>{id}) << content;
    const std::vector<int32_t> ids = {id};
    EXPECT_EQ(tokenizer->Decode(ids).value(), content);
    EXPECT_EQ(tokenizer->Decode(ids, /*skip_special_tokens=*/true).value(),
              added["special"].get<bool>() ? "" : content);
    special_count += added["special"].get<bool>();
  }
  EXPECT_GE(special_count, 20);
  const std::vector<int32_t> prompt = tokenizer->Encode("[gMASK]<sop><|user|>\nHi<|assistant|>").value();
  ASSERT_GE(prompt.size(), 5u);
  EXPECT_EQ(prompt[0], tokenizer->TokenToId("[gMASK]"));
  EXPECT_EQ(prompt[1], tokenizer->TokenToId("<sop>"));
  EXPECT_EQ(prompt[2], tokenizer->TokenToId("<|user|>"));
  EXPECT_EQ(prompt.back(), tokenizer->TokenToId("<|assistant|>"));
}

TEST(TokenizerTest, ConcurrentEncodeAgreesWithSerial) {
  auto tokenizer = LoadOrDie("glm_style");
  ASSERT_NE(tokenizer, nullptr);
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> expected;
  for (const json& c : Golden()["tokenizers"]["glm_style"]["encode"]) {
    texts.push_back(c["text"].get<std::string>());
    expected.push_back(c["ids"].get<std::vector<int32_t>>());
  }
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        for (size_t i = 0; i < texts.size(); ++i) {
          auto ids = tokenizer->Encode(texts[(i + t) % texts.size()]);
          if (!ids.ok() || *ids != expected[(i + t) % texts.size()]) ++mismatches[t];
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

// ------------------------------------------------------------------------------------------------
// Hand-made tokenizers: the BPE rules, independent of any trained vocabulary.

// Merges in the ["a", "b"] pair form.
json Pairs(const std::vector<std::pair<std::string, std::string>>& pairs) {
  json merges = json::array();
  for (const auto& [left, right] : pairs) merges.push_back(json::array({left, right}));
  return merges;
}

json TinyTokenizer(json merges) {
  return json{
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", json::array()},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", {{"a", 0}, {"b", 1}, {"c", 2}, {"aa", 3}, {"bc", 4}, {"ab", 5}, {"abc", 6}, {"ca", 7}, {"<unk>", 8}}},
        {"merges", std::move(merges)}}},
  };
}

std::vector<int32_t> EncodeWith(const json& tokenizer_json, const std::string& text) {
  auto tokenizer = Tokenizer::FromJson(tokenizer_json.dump(), "tiny.json");
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  if (!tokenizer.ok()) return {};
  auto ids = (*tokenizer)->Encode(text);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<int32_t>{-1};
}

TEST(BpeMergeTest, LowestRankMergesFirst) {
  // (b, c) ranks before (a, b): "abc" -> a + bc, and no merge joins those two.
  EXPECT_EQ(EncodeWith(TinyTokenizer(Pairs({{"b", "c"}, {"a", "b"}, {"ab", "c"}})), "abc"),
            (std::vector<int32_t>{0, 4}));
  // (a, b) first: ab + c, then (ab, c) -> abc.
  EXPECT_EQ(EncodeWith(TinyTokenizer(Pairs({{"a", "b"}, {"b", "c"}, {"ab", "c"}})), "abc"), (std::vector<int32_t>{6}));
}

TEST(BpeMergeTest, EqualRanksMergeLeftmostFirst) {
  const json tiny = TinyTokenizer(Pairs({{"a", "a"}}));
  EXPECT_EQ(EncodeWith(tiny, "aaa"), (std::vector<int32_t>{3, 0}));
  EXPECT_EQ(EncodeWith(tiny, "aaaa"), (std::vector<int32_t>{3, 3}));
  EXPECT_EQ(EncodeWith(tiny, "aaaaa"), (std::vector<int32_t>{3, 3, 0}));
}

TEST(BpeMergeTest, LegacyStringMergesAndVersionHeader) {
  EXPECT_EQ(EncodeWith(TinyTokenizer(json::array({"#version: 0.2", "a b", "ab c"})), "abc"), (std::vector<int32_t>{6}));
}

TEST(BpeMergeTest, IgnoreMergesTakesWholeWordsFromTheVocab) {
  json tiny = TinyTokenizer(Pairs({{"a", "b"}}));
  EXPECT_EQ(EncodeWith(tiny, "ca"), (std::vector<int32_t>{2, 0}));
  tiny["model"]["ignore_merges"] = true;
  EXPECT_EQ(EncodeWith(tiny, "ca"), (std::vector<int32_t>{7}));
  EXPECT_EQ(EncodeWith(tiny, "cab"), (std::vector<int32_t>{2, 5}));  // not in the vocab: merged as usual
}

TEST(BpeMergeTest, UnknownCharacters) {
  json tiny = TinyTokenizer(Pairs({{"a", "b"}}));
  auto without_unk = Tokenizer::FromJson(tiny.dump(), "tiny.json");
  ASSERT_TRUE(without_unk.ok()) << without_unk.status();
  auto failed = (*without_unk)->Encode("add");
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(failed.status().message().find("unk_token"), std::string::npos) << failed.status();

  tiny["model"]["unk_token"] = "<unk>";
  EXPECT_EQ(EncodeWith(tiny, "addab"), (std::vector<int32_t>{0, 8, 8, 5}));
  tiny["model"]["fuse_unk"] = true;
  EXPECT_EQ(EncodeWith(tiny, "addab"), (std::vector<int32_t>{0, 8, 5}));
}

// ------------------------------------------------------------------------------------------------
// Bad input: every error names the culprit.

void ExpectLoadError(const json& tokenizer_json, absl::StatusCode code, const std::vector<std::string>& fragments) {
  auto tokenizer = Tokenizer::FromJson(tokenizer_json.dump(), "some/dir/tokenizer.json");
  ASSERT_FALSE(tokenizer.ok()) << "loaded although it should not: " << tokenizer_json.dump().substr(0, 300);
  EXPECT_EQ(tokenizer.status().code(), code) << tokenizer.status();
  EXPECT_NE(tokenizer.status().message().find("some/dir/tokenizer.json"), std::string::npos) << tokenizer.status();
  for (const std::string& fragment : fragments) {
    EXPECT_NE(tokenizer.status().message().find(fragment), std::string::npos)
        << "missing \"" << fragment << "\" in: " << tokenizer.status();
  }
}

TEST(TokenizerErrorTest, MissingFileIsNotFoundNamingThePath) {
  const std::string path = TestDataPath("no_such_tokenizer.json");
  auto tokenizer = Tokenizer::Load(path);
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_EQ(tokenizer.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(tokenizer.status().message().find(path), std::string::npos) << tokenizer.status();
}

TEST(TokenizerErrorTest, CorruptJson) {
  std::string text = ReadText(TestDataPath("glm_style.json"));
  text.resize(text.size() / 2);
  auto tokenizer = Tokenizer::FromJson(text, "half/tokenizer.json");
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_EQ(tokenizer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(tokenizer.status().message().find("half/tokenizer.json"), std::string::npos) << tokenizer.status();
  EXPECT_NE(tokenizer.status().message().find("not valid JSON"), std::string::npos) << tokenizer.status();
  ExpectLoadError(json::array({1, 2}), absl::StatusCode::kInvalidArgument, {"object"});
}

TEST(TokenizerErrorTest, UnsupportedModel) {
  json t = TokenizerJson("glm_style");
  t["model"]["type"] = "WordPiece";
  ExpectLoadError(t, absl::StatusCode::kInvalidArgument, {"model of type WordPiece is not supported"});
  t.erase("model");
  ExpectLoadError(t, absl::StatusCode::kInvalidArgument, {"model"});
}

TEST(TokenizerErrorTest, UnsupportedBpeOptions) {
  const json base = TokenizerJson("glm_style");
  json t = base;
  t["model"]["byte_fallback"] = true;
  ExpectLoadError(t, absl::StatusCode::kInvalidArgument, {"byte_fallback"});
  t = base;
  t["model"]["continuing_subword_prefix"] = "##";
  ExpectLoadError(t, absl::StatusCode::kInvalidArgument, {"continuing_subword_prefix"});
  t = base;
  t["model"]["end_of_word_suffix"] = "</w>";
  ExpectLoadError(t, absl::StatusCode::kInvalidArgument, {"end_of_word_suffix"});
  t = base;
  t["model"]["dropout"] = 0.1;
  ExpectLoadError(t, absl::StatusCode::kInvalidArgument, {"dropout"});
  t = base;
  t["model"]["merges"][3] = json::array({"Ġ", "no-such-token"});
  ExpectLoadError(t, absl::StatusCode::kInvalidArgument, {"model.merges[3]", "no-such-token"});
  t = base;
  t["model"]["merges"][5] = "three part merge";
  ExpectLoadError(t, absl::StatusCode::kInvalidArgument, {"model.merges[5]"});
  t = base;
  t["model"]["vocab"]["duplicate"] = 7;
  ExpectLoadError(t, absl::StatusCode::kInvalidArgument, {"duplicate", "id 7"});
  t = base;
  t["model"]["unk_token"] = "<missing>";
  ExpectLoadError(t, absl::StatusCode::kInvalidArgument, {"unk_token", "<missing>"});
}

TEST(TokenizerErrorTest, UnsupportedPreTokenizer) {
  const json base = TokenizerJson("glm_style");
  json t = base;
  t["pre_tokenizer"] = {{"type", "Whitespace"}};
  ExpectLoadError(t, absl::StatusCode::kInvalidArgument, {"pre_tokenizer of type Whitespace is not supported"});
  t = base;
  t["pre_tokenizer"]["pretokenizers"].push_back({{"type", "Metaspace"}, {"replacement", "▁"}});
  ExpectLoadError(t, absl::StatusCode::kInvalidArgument, {"pre_tokenizer of type Metaspace is not supported"});
  t = base;
  t["pre_tokenizer"] = nullptr;
  ExpectLoadError(t, absl::StatusCode::kInvalidArgument, {"pre_tokenizer null"});
  t = base;
  t["pre_tokenizer"]["pretokenizers"].erase(1);  // Split only: not byte-level
  ExpectLoadError(t, absl::StatusCode::kInvalidArgument, {"no ByteLevel"});
  t = base;
  t["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways";
  ExpectLoadError(t, absl::StatusCode::kInvalidArgument, {"behavior", "Sideways"});
  t = base;
  t["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "(unclosed"}};
  ExpectLoadError(t, absl::StatusCode::kInvalidArgument, {"(unclosed", "does not compile"});
  t = base;
  t["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "\\w+|\\s+"}};
  ExpectLoadError(t, absl::StatusCode::kInvalidArgument, {"\\w", "Oniguruma"});
  t = base;
  t["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Glob", "*"}};
  ExpectLoadError(t, absl::StatusCode::kInvalidArgument, {"pattern", "Glob"});
}

TEST(TokenizerErrorTest, UnsupportedNormalizerDecoderPostProcessor) {
  const json base = TokenizerJson("glm_style");
  json t = base;
  t["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", "AAAA"}};
  ExpectLoadError(t, absl::StatusCode::kInvalidArgument, {"normalizer of type Precompiled is not supported"});
  t["normalizer"] = json::parse(R"({"type": "Sequence", "normalizers": [{"type": "NFC"}]})");
  ExpectLoadError(t, absl::StatusCode::kInvalidArgument, {"normalizer of type NFC is not supported"});
  t = base;
  t["decoder"] = {{"type", "WordPiece"}, {"prefix", "##"}};
  ExpectLoadError(t, absl::StatusCode::kInvalidArgument, {"decoder of type WordPiece is not supported"});
  t["decoder"] = nullptr;
  ExpectLoadError(t, absl::StatusCode::kInvalidArgument, {"decoder null"});
  t = base;
  t["post_processor"] = {{"type", "RobertaProcessing"}};
  ExpectLoadError(t, absl::StatusCode::kInvalidArgument, {"post_processor of type RobertaProcessing is not supported"});
  t["post_processor"] = json::parse(R"({"type": "TemplateProcessing", "special_tokens": {},
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]})");
  ExpectLoadError(t, absl::StatusCode::kInvalidArgument, {"<s>", "special_tokens"});
  t = base;
  t["truncation"] = {{"max_length", 8}};
  ExpectLoadError(t, absl::StatusCode::kInvalidArgument, {"truncation"});
  t = base;
  t["version"] = "2.0";
  ExpectLoadError(t, absl::StatusCode::kInvalidArgument, {"version", "2.0"});
}

TEST(TokenizerErrorTest, UnsupportedAddedTokens) {
  const json base = TokenizerJson("glm_style");
  json t = base;
  t["added_tokens"][1]["single_word"] = true;
  ExpectLoadError(t, absl::StatusCode::kInvalidArgument, {"added_tokens[1]", "<|user|>", "single_word"});
  t = base;
  t["added_tokens"][1]["id"] = 0;
  ExpectLoadError(t, absl::StatusCode::kInvalidArgument, {"added_tokens[1]", "<|user|>"});
  t = base;
  t["added_tokens"].push_back({{"id", 1000}, {"content", "a"}, {"special", false}});
  ExpectLoadError(t, absl::StatusCode::kInvalidArgument, {"added_tokens[2]", "model.vocab"});
  t = base;
  t["added_tokens"][0]["content"] = "";
  ExpectLoadError(t, absl::StatusCode::kInvalidArgument, {"added_tokens[0]", "content"});
}

TEST(TokenizerErrorTest, DecodeRejectsIdsOutsideTheVocabulary) {
  auto tokenizer = LoadOrDie("glm_style");
  ASSERT_NE(tokenizer, nullptr);
  for (int32_t bad : {-1, 1000, 1 << 30}) {
    const std::vector<int32_t> ids = {66, 67, bad};
    auto decoded = tokenizer->Decode(ids);
    ASSERT_FALSE(decoded.ok()) << bad;
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(decoded.status().message().find("ids[2]"), std::string::npos) << decoded.status();
    EXPECT_NE(decoded.status().message().find(std::to_string(bad)), std::string::npos) << decoded.status();
  }
}

TEST(TokenizerErrorTest, DecodeRejectsGapsInTheVocabulary) {
  json t = TokenizerJson("glm_style");
  t["added_tokens"].push_back({{"id", 1005}, {"content", "<|far|>"}, {"special", true}, {"normalized", false}});
  auto tokenizer = Tokenizer::FromJson(t.dump(), "gap.json");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->vocab_size(), 1006);
  EXPECT_EQ((*tokenizer)->Encode("x<|far|>").value(), (std::vector<int32_t>{89, 1005}));
  const std::vector<int32_t> ids = {1005, 1002};
  auto decoded = (*tokenizer)->Decode(ids);
  ASSERT_FALSE(decoded.ok());
  EXPECT_NE(decoded.status().message().find("ids[1] = 1002"), std::string::npos) << decoded.status();
}

TEST(TokenizerTest, SparseIdsAreAllowed) {
  json t = TokenizerJson("glm_style");
  t["model"]["vocab"]["far away"] = 2000000000;
  auto tokenizer = Tokenizer::FromJson(t.dump(), "sparse.json");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->vocab_size(), 2000000001);
  EXPECT_EQ((*tokenizer)->IdToToken(2000000000), "far away");
  EXPECT_EQ((*tokenizer)->TokenToId("far away"), 2000000000);
  const std::vector<int32_t> far = {2000000000};
  EXPECT_EQ((*tokenizer)->Decode(far).value(), "far away");  // not byte-level text: decoded as is
  const std::vector<int32_t> gap = {1999999999};
  EXPECT_FALSE((*tokenizer)->Decode(gap).ok());
}

TEST(TokenizerErrorTest, EncodeRejectsInvalidUtf8) {
  auto tokenizer = LoadOrDie("glm_style");
  ASSERT_NE(tokenizer, nullptr);
  auto ids = tokenizer->Encode("ok\xE4\xB8 then more");
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ids.status().message().find("byte 2"), std::string::npos) << ids.status();
}

}  // namespace
}  // namespace mtpspec
