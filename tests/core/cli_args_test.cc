#include "core/cli_args.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace mtpspec {
namespace {

absl::StatusOr<CliArgs> ParseWords(std::vector<std::string> words, const std::set<std::string>& known,
                                   const std::set<std::string>& flags = {}) {
  std::vector<char*> argv;
  for (std::string& word : words) argv.push_back(word.data());
  return CliArgs::Parse(static_cast<int>(argv.size()), argv.data(), 1, known, flags);
}

TEST(CliArgsTest, PositionalsValuesAndFlags) {
  auto args = ParseWords({"mtpspec", "DIR", "--k", "3", "--ids=1, 2,3", "--help", "--seed", "18446744073709551615"},
                         {"k", "ids", "seed", "temperature"}, {"help"});
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(args->positional(), std::vector<std::string>{"DIR"});
  EXPECT_EQ(*args->GetInt("k", 0), 3);
  EXPECT_EQ(*args->GetIntList("ids"), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_TRUE(args->Has("help"));
  EXPECT_EQ(*args->GetUint64("seed", 0), 18446744073709551615ull);
  EXPECT_EQ(*args->GetDouble("temperature", 0.5), 0.5);  // absent: the fallback
  EXPECT_EQ(args->Get("temperature", "x"), "x");
}

TEST(CliArgsTest, FaultsNameTheOption) {
  const std::set<std::string> known = {"k", "ids"};
  EXPECT_EQ(ParseWords({"m", "--kk", "3"}, known).status().message(), "unknown option --kk");
  EXPECT_EQ(ParseWords({"m", "--k"}, known).status().message(), "option --k needs a value");
  EXPECT_EQ(ParseWords({"m", "--help=1"}, known, {"help"}).status().message(), "option --help takes no value");
  auto args = ParseWords({"m", "--k", "three", "--ids", "1,x"}, known);
  ASSERT_TRUE(args.ok());
  EXPECT_EQ(args->GetInt("k", 0).status().message(), "--k must be an integer, got \"three\"");
  EXPECT_FALSE(args->GetDouble("k", 0).ok());
  EXPECT_FALSE(args->GetUint64("k", 0).ok());
  absl::StatusOr<std::vector<int64_t>> ids = args->GetIntList("ids");
  ASSERT_FALSE(ids.ok());
  EXPECT_NE(ids.status().message().find("--ids"), std::string::npos) << ids.status();
}

}  // namespace
}  // namespace mtpspec
