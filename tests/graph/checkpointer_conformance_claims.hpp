// The checkpointer conformance suite, second part: what a checkpoint carries besides state and
// who may write a thread: artifacts stored with their checkpoint, thread claims (exclusive,
// lapsed, dead, checked by put, dropped with the thread, raced), and the id rule every backend
// enforces. The backends and the fixture are checkpointer_conformance.hpp's; instantiate with
// INSTANTIATE_TYPED_TEST_SUITE_P(Name, CheckpointerClaimsTest, Types, BackendName).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "checkpointer_conformance.hpp"
#include "weir/graph/checkpointer.hpp"

namespace weir::graph::conformance {

// The same fixture as CheckpointerTest (a fresh checkpointer per test), a suite of its own.
template <class Backend>
class CheckpointerClaimsTest : public CheckpointerTest<Backend> {};

TYPED_TEST_SUITE_P(CheckpointerClaimsTest);

// ---- Artifacts and thread claims ------------------------------------------------------------

inline Checkpoint::Artifact artifact(std::string id, std::string bytes,
                                     std::string media_type = "application/octet-stream") {
  return {std::move(id), std::move(media_type), std::move(bytes)};
}

// A pid that no process has any more: a child that has exited and been reaped.
inline int64_t dead_pid() {
  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

// A claimant on another host (its pid means nothing here), with the lease given.
inline ThreadHolder remote_holder(std::string host, int64_t lease_ms) {
  ThreadHolder h = this_process_holder(new_claim_token(), lease_ms);
  h.host = std::move(host);
  return h;
}

inline constexpr const char* kBusyPattern =
    "^thread_busy: thread 't' is being run by pid [0-9]+ on host h1 since "
    "[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2} UTC \\(last heartbeat [0-9]+ s ago\\); "
    "wait for it or, if that process is gone, it will be taken over after 60 s$";

// The blobs a put carries are stored with the thread in the put's transaction, byte for byte;
// one the thread already holds is kept as it was; reads of checkpoints never carry them.
TYPED_TEST_P(CheckpointerClaimsTest, ArtifactsAreStoredWithTheirCheckpoint) {
  auto& c = this->ckpt();
  const std::string bytes("\0\x01\xff\xfe binary \x80", 13);
  Checkpoint first = make_cp("t", "c1", "", 0, R"({"doc":{"$artifact":"a1"}})");
  first.artifacts = {artifact("a1", bytes, "text/plain"), artifact("empty", "")};
  ASSERT_TRUE(c.put(first));
  auto a1 = c.get_artifact("t", "a1");
  ASSERT_TRUE(a1) << a1.error().to_string();
  ASSERT_TRUE(a1->has_value());
  EXPECT_EQ((*a1)->id, "a1");
  EXPECT_EQ((*a1)->media_type, "text/plain");
  EXPECT_EQ((*a1)->bytes, bytes);
  auto empty = c.get_artifact("t", "empty");
  ASSERT_TRUE(empty && empty->has_value());
  EXPECT_EQ((*empty)->bytes, "");

  // The same id again (an ArtifactStore id is the hash of its bytes): the first is kept.
  Checkpoint second = make_cp("t", "c2", "c1", 1);
  second.artifacts = {artifact("a1", "other", "application/json"), artifact("a2", "two")};
  ASSERT_TRUE(c.put(second));
  a1 = c.get_artifact("t", "a1");
  ASSERT_TRUE(a1 && a1->has_value());
  EXPECT_EQ((*a1)->bytes, bytes);
  EXPECT_EQ((*a1)->media_type, "text/plain");
  auto a2 = c.get_artifact("t", "a2");
  ASSERT_TRUE(a2 && a2->has_value());
  EXPECT_EQ((*a2)->bytes, "two");

  // Per thread: another thread does not see them; unknown ids and threads are nullopt.
  for (auto [thread, id] : {std::pair{"t", "nope"}, std::pair{"other", "a1"}}) {
    auto none = c.get_artifact(thread, id);
    ASSERT_TRUE(none) << none.error().to_string();
    EXPECT_FALSE(none->has_value()) << thread << " " << id;
  }
  // Reads of checkpoints do not carry them.
  auto got = c.get("t", "c1");
  ASSERT_TRUE(got && got->has_value());
  EXPECT_TRUE((*got)->artifacts.empty());

  // A put that fails stores none of its blobs.
  Checkpoint orphan = make_cp("t", "c3", "ghost", 2);
  orphan.artifacts = {artifact("a3", "three")};
  ASSERT_FALSE(c.put(orphan));
  Checkpoint dup = make_cp("t", "c2", "c1", 2);
  dup.artifacts = {artifact("a4", "four")};
  ASSERT_FALSE(c.put(dup));
  for (const char* id : {"a3", "a4"}) {
    auto none = c.get_artifact("t", id);
    ASSERT_TRUE(none);
    EXPECT_FALSE(none->has_value()) << id;
  }

  // They go with the thread.
  ASSERT_TRUE(c.delete_thread("t"));
  auto gone = c.get_artifact("t", "a1");
  ASSERT_TRUE(gone);
  EXPECT_FALSE(gone->has_value());
}

// One runner per thread: a live claim refuses another (the message names the holder), the holder
// itself may claim again, renew and release; a released claim is not renewed.
TYPED_TEST_P(CheckpointerClaimsTest, AClaimIsExclusiveUntilReleased) {
  auto& c = this->ckpt();
  auto none = c.thread_holder("t");
  ASSERT_TRUE(none) << none.error().to_string();
  EXPECT_FALSE(none->has_value());

  const ThreadHolder a = remote_holder("h1", 60000);
  auto claimed = c.claim_thread("t", a);
  ASSERT_TRUE(claimed) << claimed.error().to_string();
  EXPECT_EQ(claimed->token, a.token);
  EXPECT_EQ(claimed->host, "h1");
  EXPECT_EQ(claimed->pid, a.pid);
  EXPECT_EQ(claimed->lease_ms, 60000);
  EXPECT_GT(claimed->since_ms, 1'600'000'000'000);
  EXPECT_EQ(claimed->heartbeat_ms, claimed->since_ms);
  auto held = c.thread_holder("t");
  ASSERT_TRUE(held && held->has_value());
  EXPECT_EQ((*held)->token, a.token);
  EXPECT_EQ((*held)->since_ms, claimed->since_ms);

  // Another runner, on another host, while the claim is live.
  const ThreadHolder b = remote_holder("h2", 60000);
  auto busy = c.claim_thread("t", b);
  ASSERT_FALSE(busy);
  EXPECT_TRUE(busy.error().is(Errc::thread_busy));
  EXPECT_THAT(busy.error().to_string(), ::testing::ContainsRegex(kBusyPattern));
  auto b_renew = c.renew_thread("t", b.token);
  ASSERT_FALSE(b_renew);
  EXPECT_TRUE(b_renew.error().is(Errc::thread_busy));
  EXPECT_THAT(b_renew.error().message,
              ::testing::ContainsRegex("^thread 't' is no longer held by this runner: it was "
                                       "taken over by pid [0-9]+ on host h1 at .* UTC"));
  ASSERT_TRUE(c.release_thread("t", b.token));  // not b's: nothing happens
  held = c.thread_holder("t");
  ASSERT_TRUE(held && held->has_value());
  EXPECT_EQ((*held)->token, a.token);

  // The holder again: the claim stands, since unchanged; a renewal moves the heartbeat.
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  auto again = c.claim_thread("t", a);
  ASSERT_TRUE(again) << again.error().to_string();
  EXPECT_EQ(again->since_ms, claimed->since_ms);
  EXPECT_GE(again->heartbeat_ms, claimed->heartbeat_ms + 5);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(c.renew_thread("t", a.token));
  held = c.thread_holder("t");
  ASSERT_TRUE(held && held->has_value());
  EXPECT_GE((*held)->heartbeat_ms, again->heartbeat_ms + 5);

  // Released: unclaimed, renewing fails, and anyone may claim.
  ASSERT_TRUE(c.release_thread("t", a.token));
  ASSERT_TRUE(c.release_thread("t", a.token));  // idempotent
  held = c.thread_holder("t");
  ASSERT_TRUE(held);
  EXPECT_FALSE(held->has_value());
  auto renew = c.renew_thread("t", a.token);
  ASSERT_FALSE(renew);
  EXPECT_EQ(renew.error().to_string(),
            "thread_busy: thread 't' is no longer held by this runner: its claim was released; "
            "this run stops without writing");
  ASSERT_TRUE(c.claim_thread("t", b));
  // Claims are per thread.
  ASSERT_TRUE(c.claim_thread("u", a));
}

// A claim that is no longer live is taken over: one whose heartbeat is older than its lease
// (any host), or one on the claimant's host whose process is gone (at once).
TYPED_TEST_P(CheckpointerClaimsTest, ALapsedOrDeadClaimIsTakenOver) {
  auto& c = this->ckpt();
  const ThreadHolder silent = remote_holder("far", 50);
  ASSERT_TRUE(c.claim_thread("t", silent));
  ThreadHolder me = this_process_holder(new_claim_token(), 30000);
  auto busy = c.claim_thread("t", me);
  ASSERT_FALSE(busy);
  EXPECT_THAT(busy.error().message,
              HasSubstr("is being run by pid " + std::to_string(::getpid()) + " on host far"));
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  auto taken = c.claim_thread("t", me);
  ASSERT_TRUE(taken) << taken.error().to_string();
  EXPECT_EQ(taken->token, me.token);
  auto renew = c.renew_thread("t", silent.token);
  ASSERT_FALSE(renew);
  EXPECT_THAT(renew.error().message,
              ::testing::ContainsRegex(
                  "^thread 't' is no longer held by this runner: it was taken over by pid [0-9]+ "
                  "on host [^ ]+ at .* UTC \\(this runner's heartbeat had lapsed\\); this run "
                  "stops without writing$"));

  // Same host, its process gone: taken over though its lease has a minute left.
  ThreadHolder dead = this_process_holder(new_claim_token(), 60000);
  dead.pid = dead_pid();
  ASSERT_TRUE(c.claim_thread("u", dead));
  auto over = c.claim_thread("u", me);
  ASSERT_TRUE(over) << over.error().to_string();
  // A live process on this host (this one) is not.
  ThreadHolder live = this_process_holder(new_claim_token(), 60000);
  ASSERT_TRUE(c.claim_thread("v", live));
  auto refused = c.claim_thread("v", me);
  ASSERT_FALSE(refused);
  EXPECT_TRUE(refused.error().is(Errc::thread_busy));
}

// put() with a claim token commits only while the token holds the thread, and refreshes the
// claim's heartbeat; refused, it stores nothing (nor its blobs).
TYPED_TEST_P(CheckpointerClaimsTest, APutWithAClaimTokenChecksTheClaim) {
  auto& c = this->ckpt();
  const ThreadHolder a = remote_holder("h1", 60000);
  auto claimed = c.claim_thread("t", a);
  ASSERT_TRUE(claimed);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  Checkpoint cp = make_cp("t", "c1", "", 0);
  cp.claim_token = a.token;
  ASSERT_TRUE(c.put(cp));
  auto held = c.thread_holder("t");
  ASSERT_TRUE(held && held->has_value());
  EXPECT_GE((*held)->heartbeat_ms, claimed->heartbeat_ms + 5) << "the put refreshed the claim";

  // Another runner's token: refused, naming the holder; nothing stored.
  Checkpoint other = make_cp("t", "c2", "c1", 1);
  other.claim_token = new_claim_token();
  other.artifacts = {artifact("x", "y")};
  auto refused = c.put(other);
  ASSERT_FALSE(refused);
  EXPECT_TRUE(refused.error().is(Errc::thread_busy));
  EXPECT_THAT(refused.error().message, HasSubstr("it was taken over by pid "));
  EXPECT_THAT(refused.error().message, HasSubstr(" on host h1 at "));
  auto all = c.list("t");
  ASSERT_TRUE(all);
  EXPECT_THAT(ids(*all), ::testing::ElementsAre("c1"));
  auto blob = c.get_artifact("t", "x");
  ASSERT_TRUE(blob);
  EXPECT_FALSE(blob->has_value());

  // Released: a put with the old token is refused; one without a token is not checked.
  ASSERT_TRUE(c.release_thread("t", a.token));
  Checkpoint late = make_cp("t", "c3", "c1", 1);
  late.claim_token = a.token;
  auto put = c.put(late);
  ASSERT_FALSE(put);
  EXPECT_EQ(put.error().to_string(),
            "thread_busy: thread 't' is no longer held by this runner: its claim was released; "
            "this run stops without writing");
  late.claim_token.clear();
  ASSERT_TRUE(c.put(late));
}

TYPED_TEST_P(CheckpointerClaimsTest, AnInvalidClaimIsRefused) {
  auto& c = this->ckpt();
  ThreadHolder no_token = this_process_holder("", 1000);
  auto e1 = c.claim_thread("t", no_token);
  ASSERT_FALSE(e1);
  EXPECT_EQ(e1.error().to_string(),
            "invalid_argument: claim_thread: the token is empty; use new_claim_token()");
  ThreadHolder no_lease = this_process_holder(new_claim_token(), 0);
  auto e2 = c.claim_thread("t", no_lease);
  ASSERT_FALSE(e2);
  EXPECT_EQ(e2.error().to_string(), "invalid_argument: claim_thread: lease_ms must be positive");
  auto held = c.thread_holder("t");
  ASSERT_TRUE(held);
  EXPECT_FALSE(held->has_value());
}

// delete_thread removes the claim with the thread; a prune that empties the thread removes its
// blobs but not its claim (a runner may hold it).
TYPED_TEST_P(CheckpointerClaimsTest, DeleteThreadDropsTheClaimAndPruneKeepsIt) {
  auto& c = this->ckpt();
  // "pruned" is claimed by a runner whose claim lapses at once; "busy" by a live one.
  for (const char* t : {"deleted", "pruned", "busy"}) {
    Checkpoint cp = make_cp(t, "c1", "", 0);
    cp.artifacts = {artifact("blob", "bytes")};
    ASSERT_TRUE(c.put(cp));
    ASSERT_TRUE(c.claim_thread(t, remote_holder("h1", std::string(t) == "pruned" ? 1 : 60000)));
  }
  ASSERT_TRUE(c.delete_thread("deleted"));
  auto gone = c.thread_holder("deleted");
  ASSERT_TRUE(gone);
  EXPECT_FALSE(gone->has_value());

  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  Retention ttl;
  ttl.max_age = std::chrono::milliseconds(10);
  // Age-based retention never deletes a thread a live claim holds (its run's next checkpoint
  // needs its parent): it names the holder and removes nothing.
  auto busy = c.prune("busy", ttl);
  ASSERT_FALSE(busy);
  EXPECT_THAT(busy.error().to_string(),
              ::testing::MatchesRegex("^thread_busy: thread 'busy' is being run by pid [0-9]+ "
                                      "on host h1 since .*"));
  auto still = c.latest("busy");
  ASSERT_TRUE(still);
  EXPECT_TRUE(still->has_value());
  auto n = c.prune("pruned", ttl);
  ASSERT_TRUE(n) << n.error().to_string();
  EXPECT_EQ(*n, 1u);
  auto blob = c.get_artifact("pruned", "blob");
  ASSERT_TRUE(blob);
  EXPECT_FALSE(blob->has_value());
  auto kept = c.thread_holder("pruned");
  ASSERT_TRUE(kept);
  EXPECT_TRUE(kept->has_value());
  // A partial prune keeps every blob (a later checkpoint may reference any of them).
  Checkpoint first = make_cp("partial", "p1", "", 0);
  first.artifacts = {artifact("old", "o")};
  ASSERT_TRUE(c.put(first));
  ASSERT_TRUE(c.put(make_cp("partial", "p2", "", 1)));
  Retention keep;
  keep.keep_last = 1;
  auto pruned = c.prune("partial", keep);
  ASSERT_TRUE(pruned);
  EXPECT_EQ(*pruned, 1u);
  auto old = c.get_artifact("partial", "old");
  ASSERT_TRUE(old);
  EXPECT_TRUE(old->has_value());
}

// Eight runners race for one thread: exactly one wins.
TYPED_TEST_P(CheckpointerClaimsTest, ConcurrentClaimsHaveOneWinner) {
  auto& c = this->ckpt();
  std::atomic<int> won{0}, busy{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < 8; ++i)
    ts.emplace_back([&, i] {
      auto r = c.claim_thread("t", remote_holder("h" + std::to_string(i), 60000));
      if (r)
        ++won;
      else if (r.error().is(Errc::thread_busy))
        ++busy;
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(won.load(), 1);
  EXPECT_EQ(busy.load(), 7);
}

// Ids follow one rule in every backend (weir/graph/ids.hpp): 1 to 1024 bytes of UTF-8 text
// without control characters. What PostgreSQL text could not hold (a NUL) or would show garbled
// is refused as invalid_argument naming the byte, and nothing is stored; any other text is kept
// exactly.
TYPED_TEST_P(CheckpointerClaimsTest, IdsThatAreNotTextAreRefusedEverywhere) {
  auto& c = this->ckpt();
  const std::string rule = "; an id is 1 to 1024 bytes of UTF-8 text without control characters";
  struct Bad {
    std::string thread, id, message;
  };
  const Bad bad[] = {
      {std::string("a\0b", 3), "c1",
       "checkpoint put: thread_id holds a control character (byte 0x00 at offset 1, after 'a')"},
      {"t", "line\nbreak",
       "checkpoint put: checkpoint_id holds a control character (byte 0x0a at offset 4, after "
       "'line')"},
      {"\x7f", "c1", "checkpoint put: thread_id holds a control character (byte 0x7f at offset 0)"},
      {"caf\xc3", "c1",
       "checkpoint put: thread_id is not valid UTF-8 (byte 0xc3 at offset 3, after 'caf')"},
      {"\xc0\xaf", "c1",
       "checkpoint put: thread_id is not valid UTF-8 (byte 0xc0 at offset 0)"},  // overlong '/'
      {"\xed\xa0\x80", "c1",
       "checkpoint put: thread_id is not valid UTF-8 (byte 0xed at offset 0)"},  // a surrogate
      {std::string(1025, 'x'), "c1",
       "checkpoint put: thread_id is 1025 bytes long ('" + std::string(40, 'x') + "...')"},
  };
  for (const auto& b : bad) {
    auto s = c.put(make_cp(b.thread, b.id, "", 0));
    ASSERT_FALSE(s) << b.message;
    EXPECT_TRUE(s.error().is(Errc::invalid_argument)) << s.error().to_string();
    EXPECT_EQ(s.error().message, b.message + rule);
  }
  auto claim = c.claim_thread(std::string("a\0b", 3), remote_holder("h", 1000));
  ASSERT_FALSE(claim);
  EXPECT_EQ(claim.error().message,
            "claim_thread: thread_id holds a control character (byte 0x00 at offset 1, after "
            "'a')" +
                rule);
  auto threads = c.threads();
  ASSERT_TRUE(threads);
  EXPECT_TRUE(threads->empty()) << "a refused id stored something";
  // Text of any script, up to the limit, is an id.
  const std::string longest(1024, 'y');
  for (const std::string& id :
       {std::string("thread-\xe2\x9c\x93 \xf0\x9f\x98\x80 / 'x'"), longest}) {
    ASSERT_TRUE(c.put(make_cp(id, "c1", "", 0))) << id;
    auto back = c.latest(id);
    ASSERT_TRUE(back && back->has_value());
    EXPECT_EQ((*back)->thread_id, id);
  }
}

REGISTER_TYPED_TEST_SUITE_P(CheckpointerClaimsTest, ArtifactsAreStoredWithTheirCheckpoint,
                            AClaimIsExclusiveUntilReleased, ALapsedOrDeadClaimIsTakenOver,
                            APutWithAClaimTokenChecksTheClaim, AnInvalidClaimIsRefused,
                            DeleteThreadDropsTheClaimAndPruneKeepsIt, ConcurrentClaimsHaveOneWinner,
                            IdsThatAreNotTextAreRefusedEverywhere);

}  // namespace weir::graph::conformance
