// The option table (pipeline/options.h): each option's declared default is what an unset option
// gives, each parses from its command-line text and changes what it says, names are unique, and
// errors name the option in each front end's spelling.
#include "pipeline/options.h"

#include <set>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mtpspec {
namespace {

using ::testing::HasSubstr;

// Every field a request option can set, as text: two requests are the same request when equal.
std::string Describe(const RequestOptions& r) {
  std::ostringstream o;
  auto list = [&o](const auto& values) {
    o << "[";
    for (const auto& v : values) o << v << ",";
    o << "]";
  };
  o << r.max_new_tokens << " " << DraftKindName(r.draft) << " " << r.k << " " << r.adaptive_k << " "
    << AcceptRuleName(r.accept.rule) << " " << r.accept.sampling.temperature << " " << r.accept.sampling.top_k << " "
    << r.accept.sampling.top_p << " " << r.accept.sampling.min_p << " " << r.accept.sampling.seed << " "
    << r.sample_drafts << " " << r.accept.relaxed_top_n << " " << r.accept.relaxed_delta << " ";
  list(r.accept.synthetic_rates);
  o << " " << r.stop_at_eos << " " << r.eos_token_ids.has_value() << " ";
  if (r.eos_token_ids) list(*r.eos_token_ids);
  list(r.stop_token_ids);
  o << " " << r.logprobs << " " << MtpHiddenName(r.mtp.hidden) << " " << MtpChainName(r.mtp.chain) << " "
    << MtpIndexShareName(r.mtp.index_share) << " " << r.lookup.max_ngram << " " << LatentStorageName(r.kv_cache) << " "
    << static_cast<int>(r.device) << " " << static_cast<int>(r.device_weights) << " " << r.tree.Name();
  return o.str();
}

TEST(OptionTableTest, DeclaredDefaultsAreTheDefaults) {
  const std::string defaults = Describe(*MakeRequest({}, Frontend::kCli));
  std::set<std::string> names, flags;
  for (const RequestOption& option : RequestOptionTable()) {
    EXPECT_TRUE(names.insert(option.name).second) << option.name;
    EXPECT_TRUE(flags.insert(option.flag).second) << option.flag;
    EXPECT_EQ(OptionName(Frontend::kCli, option.name), option.flag);
    EXPECT_FALSE(option.help.empty()) << option.name;
    if (option.default_text == "none") continue;  // unset by default
    auto value = ParseOptionText(option, option.default_text);
    ASSERT_TRUE(value.ok()) << option.name << ": " << value.status();
    auto request = MakeRequest({{option.name, *value}}, Frontend::kCli);
    ASSERT_TRUE(request.ok()) << option.name << ": " << request.status();
    EXPECT_EQ(Describe(*request), defaults) << option.name << " = " << option.default_text;
  }
  EXPECT_EQ(names.size(), 29u);
}

TEST(OptionTableTest, EachOptionSetsWhatItSays) {
  const std::map<std::string, std::string> texts = {
      {"max_new_tokens", "7"}, {"draft", "lookup"}, {"k", "auto"}, {"temperature", "0.5"}, {"top_k", "4"},
      {"top_p", "0.9"}, {"min_p", "0.05"}, {"seed", "9"}, {"eos_token_id", ""}, {"stop_token_ids", "5,6"},
      {"mtp_chain", "raw"}, {"kv_cache", "int8"}, {"tree", "2,1"}, {"ngram", "4"}, {"logprobs", "true"}};
  std::map<std::string, OptionValue> values;
  for (const auto& [name, text] : texts) {
    const RequestOption* option = FindRequestOption(name);
    ASSERT_NE(option, nullptr) << name;
    values[name] = *ParseOptionText(*option, text);
  }
  values.erase("tree");  // a tree refuses lookup drafts; checked apart below
  auto r = MakeRequest(values, Frontend::kPython);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->max_new_tokens, 7);
  EXPECT_EQ(r->draft, DraftKind::kLookup);
  EXPECT_TRUE(r->adaptive_k);
  EXPECT_EQ(r->k, kDefaultAdaptiveKMax);
  EXPECT_DOUBLE_EQ(r->accept.sampling.temperature, 0.5);
  EXPECT_EQ(r->accept.sampling.top_k, 4);
  EXPECT_EQ(r->accept.sampling.seed, 9u);
  ASSERT_TRUE(r->eos_token_ids.has_value());
  EXPECT_TRUE(r->eos_token_ids->empty()) << "an empty list means no end-of-sequence ids";
  EXPECT_EQ(r->stop_token_ids, (std::vector<int64_t>{5, 6}));
  EXPECT_EQ(r->mtp.chain, MtpChain::kRaw);
  EXPECT_EQ(r->kv_cache, LatentStorage::kInt8);
  EXPECT_EQ(r->lookup.max_ngram, 4);
  EXPECT_TRUE(r->logprobs);
  auto tree = MakeRequest({{"tree", std::vector<int64_t>{2, 1}}}, Frontend::kCli);
  ASSERT_TRUE(tree.ok()) << tree.status();
  EXPECT_EQ(tree->tree.branching, (std::vector<int64_t>{2, 1}));
}

TEST(OptionTableTest, ErrorsNameTheOptionInEachSpelling) {
  struct Case {
    std::string name, text, cli, python;
  };
  for (const Case& c : std::vector<Case>{
           {"draft", "beam", "--draft must be mtp, lookup, hybrid or none", "draft must be"},
           {"accept", "greedy", "--accept: unknown acceptance rule", "accept: unknown acceptance rule"},
           {"mtp_chain", "sideways", "--mtp-chain must be normed, raw or default", "mtp_chain must be"},
           {"seed", "-1", "--seed = -1 is outside [0, ", "seed = -1 is outside [0, "},
           {"tree_nodes", "0", "--tree-nodes must be >= 1", "tree_nodes must be >= 1"},
           {"tree", "", "--tree must list the branching", "tree must list"},
           {"kv_cache", "f16", "--kv-cache must be f32, int8 or fp8", "kv_cache must be"},
           {"device", "tpu", "--device: unknown device", "device: unknown device"},
           {"k", "99", "--k must be in [0, 15]", "k must be in [0, 15]"}}) {
    const RequestOption* option = FindRequestOption(c.name);
    ASSERT_NE(option, nullptr) << c.name;
    auto value = ParseOptionText(*option, c.text);
    ASSERT_TRUE(value.ok()) << c.name;
    EXPECT_THAT(std::string(MakeRequest({{c.name, *value}}, Frontend::kCli).status().message()), HasSubstr(c.cli));
    EXPECT_THAT(std::string(MakeRequest({{c.name, *value}}, Frontend::kPython).status().message()),
                HasSubstr(c.python));
  }
  EXPECT_THAT(std::string(ParseOptionText(*FindRequestOption("top_k"), "many").status().message()),
              HasSubstr("--top-k must be an integer, got \"many\""));
  EXPECT_THAT(std::string(ParseOptionText(*FindRequestOption("synthetic_rates"), "0.5,x").status().message()),
              HasSubstr("--synthetic-rates must be comma-separated numbers"));
  EXPECT_THAT(std::string(MakeRequest({{"tree", std::vector<int64_t>{2}}, {"tree_nodes", int64_t{3}}},
                                      Frontend::kPython)
                              .status()
                              .message()),
              HasSubstr("give tree (a static tree) or tree_nodes (a grown one), not both"));
  EXPECT_THAT(std::string(MakeRequest({{"beam_width", int64_t{2}}}, Frontend::kPython).status().message()),
              HasSubstr("unknown option beam_width"));
}

}  // namespace
}  // namespace mtpspec
