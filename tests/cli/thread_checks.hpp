// Checks that the SQLite (cli_threads_test) and PostgreSQL (cli_scaleout_test) stores both run:
// what `weir run --thread` promises about continuing a thread after a crash, and what
// `weir store prune` does to a thread a run holds.
#pragma once

#include <signal.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "run_weir.hpp"
#include "test_workflows.hpp"
#include "weir/graph/checkpointer.hpp"

namespace weir::testing {

// `weir run tally.json --thread t --input X`, killed with SIGKILL twice in the middle and then
// given the same command once more, prints what an uninterrupted run prints: the input is
// applied once, whatever the channels' reducers. The thread's checkpoints never repeat a step.
inline void expect_continued_run_equals_uninterrupted(const std::string& store) {
  const auto wf = temp_file("tally_" + std::to_string(store.size()) + ".json", kTally);
  const std::string cmd =
      "run " + wf.string() + " --input " + kTallyInput + " --store '" + store + "' --thread ";
  auto straight = run_weir(cmd + "straight");
  ASSERT_EQ(straight.code, 0) << straight.err;
  ASSERT_EQ(straight.out, kTallyOutput);
  auto cp = graph::open_checkpointer(store);
  ASSERT_TRUE(cp) << cp.error().message;
  auto checkpoints = [&] {
    auto l = (*cp)->list("t", 1000);
    return l ? *l : std::vector<graph::Checkpoint>{};
  };
  for (std::size_t at : {3u, 7u}) {  // the input and a round; then two rounds more
    auto bg = start_weir(cmd + "t");
    ASSERT_TRUE(eventually([&] { return checkpoints().size() >= at; })) << bg->stderr_text();
    bg->kill_now();
    EXPECT_EQ(bg->code, -SIGKILL) << bg->stderr_text();
  }
  auto again = run_weir(cmd + "t");
  EXPECT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(again.out, kTallyOutput);
  auto all = checkpoints();  // newest first
  ASSERT_FALSE(all.empty());
  for (std::size_t i = 1; i < all.size(); ++i)
    EXPECT_GT(all[i - 1].step, all[i].step) << "checkpoint " << all[i - 1].checkpoint_id
                                            << " repeats or goes back to step " << all[i - 1].step;
  std::filesystem::remove(wf);
}

// `weir store prune --older-than 100ms` while a run holds its thread: that thread is skipped
// and said so, an idle thread older than that is deleted, and the run finishes as usual (before,
// the prune deleted the running thread and the run failed on its next checkpoint).
inline void expect_prune_skips_a_thread_in_use(const std::string& store) {
  const auto wf = temp_file("tally_prune_" + std::to_string(store.size()) + ".json", kTally);
  const std::string cmd =
      "run " + wf.string() + " --input " + kTallyInput + " --store '" + store + "' --thread ";
  auto idle = run_weir(cmd + "idle");
  ASSERT_EQ(idle.code, 0) << idle.err;
  auto cp = graph::open_checkpointer(store);
  ASSERT_TRUE(cp) << cp.error().message;
  auto count = [&](const char* thread) {
    auto l = (*cp)->list(thread, 1000);
    return l ? l->size() : 0;
  };
  const std::size_t idle_checkpoints = count("idle");
  auto busy = start_weir(cmd + "busy");
  ASSERT_TRUE(eventually([&] { return count("busy") >= 2; })) << busy->stderr_text();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // its first steps are > 100 ms old
  auto pruned = run_weir("store prune --older-than 100ms --store '" + store + "'");
  EXPECT_EQ(pruned.code, 0) << pruned.err;
  EXPECT_EQ(
      pruned.out.rfind(
          "pruned " + std::to_string(idle_checkpoints) + " checkpoints from 1 threads in ", 0),
      0u)
      << pruned.out;
  EXPECT_NE(pruned.out.find("\nskipped thread 'busy' for --older-than: thread 'busy' is being "
                            "run by pid " +
                            std::to_string(busy->pid) + " on host "),
            std::string::npos)
      << pruned.out;
  EXPECT_EQ(busy->wait(), 0) << busy->stderr_text();
  EXPECT_EQ(busy->stdout_text(), kTallyOutput);
  auto gone = (*cp)->latest("idle");
  ASSERT_TRUE(gone);
  EXPECT_FALSE(*gone);
  std::filesystem::remove(wf);
}

}  // namespace weir::testing
