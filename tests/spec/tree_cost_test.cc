// Adaptive k's cost model prices a tree cycle: the chain tree of k nodes costs exactly what draft
// length k costs, a wider tree of the same rows costs the same verify, and verifies longer than the
// controller's range extend the measured slope.
#include "gtest/gtest.h"
#include "spec/adaptive_k.h"

namespace mtpspec {
namespace {

AdaptiveK Measured() {
  AdaptiveK controller(4);
  for (int i = 0; i < 3; ++i) controller.RecordVerify(0, 0, 1.0);  // warm-up plain steps
  controller.RecordVerify(0, 0, 1.0);
  controller.RecordDraftStep(0.25);
  controller.RecordVerify(1, 1, 1.4);
  controller.RecordExtend(0.1);
  controller.RecordVerify(2, 1, 1.7);
  controller.RecordVerify(3, 2, 2.1);
  return controller;
}

TEST(TreeCostTest, TheChainTreeCostsWhatTheChainCosts) {
  const AdaptiveK controller = Measured();
  for (int64_t k = 1; k <= 4; ++k) {
    EXPECT_DOUBLE_EQ(controller.TreeCycleCost(k + 1, k), controller.ExpectedCost(k)) << "k " << k;
  }
  EXPECT_DOUBLE_EQ(controller.TreeCycleCost(1, 0), controller.VerifyCost(1));
}

TEST(TreeCostTest, AWideTreeCostsItsRowsAndItsDepthsDraftSteps) {
  const AdaptiveK controller = Measured();
  // Tree 3,1 (6 nodes, 7 rows): one head at the root, one forward over depth 1 and its heads.
  const double tree = controller.TreeCycleCost(7, 2);
  const double rows7 = controller.TreeCycleCost(7, 0);
  EXPECT_DOUBLE_EQ(tree, rows7 + 2 * 0.25 + 0.1);
  // 7 rows is past this controller's range (k_max 4: verifies of up to 5 rows): the slope of the
  // two longest lengths, 4 and 5 rows, is extended.
  const double slope = controller.VerifyCost(5) - controller.VerifyCost(4);
  EXPECT_GE(slope, 0.0);
  EXPECT_DOUBLE_EQ(rows7, controller.VerifyCost(5) + 2 * slope);
  EXPECT_GE(controller.TreeCycleCost(16, 0), rows7);
}

}  // namespace
}  // namespace mtpspec
