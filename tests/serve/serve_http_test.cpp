// HTTP details a client of weir serve relies on (issue 35, item 13), over real HTTP on loopback:
// /health without the key, GET /v1/models/{id}, every status the HTTP layer answers itself
// counted in /metrics, valid JSON bodies never called malformed, and the memory of a request
// body charged to the budget.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "serve_fixture.hpp"

namespace weir::serve {
namespace {

TEST(ServeHttp, HealthAnswersWithoutTheKeyAndNothingElseDoes) {
  auto c = tiny_config("h1");
  c.api_key = "s3cret";
  auto s = start(c);
  auto health = call(s.port, "GET", "/health");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.body, R"({"status":"ok"})");
  for (const char* path : {"/metrics", "/v1/models", "/v1/models/h1"})
    EXPECT_EQ(call(s.port, "GET", path).status, 401) << path;
  EXPECT_EQ(call(s.port, "POST", "/health", "{}").status, 401);  // only the probe is open
}

TEST(ServeHttp, ModelsById) {
  auto s = start(tiny_config("h2"));
  auto m = call(s.port, "GET", "/v1/models/h2");
  ASSERT_EQ(m.status, 200) << m.body;
  EXPECT_EQ(body_json(m), json::parse(R"({"id": "h2", "object": "model", "created": 0,
                                          "owned_by": "weir", "max_model_len": 256})"));
  auto none = call(s.port, "GET", "/v1/models/gpt-9");
  EXPECT_EQ(none.status, 404);
  EXPECT_EQ(error_message(none), "the model 'gpt-9' does not exist; this server has h2");
  EXPECT_EQ(body_json(none).at("error").at("code"), "model_not_found");
  EXPECT_EQ(call(s.port, "POST", "/v1/models/h2", "{}").status, 405);
}

// The answers the server gives before any handler runs were not counted.
TEST(ServeHttp, EveryStatusTheServerAnswersItselfIsCounted) {
  auto c = tiny_config("h3");
  c.max_body_bytes = 1024;
  c.max_connections = 3;
  auto s = start(c);
  EXPECT_EQ(call(s.port, "POST", "/v1/completions", std::string(4000, ' ')).status, 413);
  EXPECT_EQ(
      call(s.port, "GET", "/v1/models", {}, "X-Big: " + std::string(20000, 'x') + "\r\n").status,
      431);
  {
    Conn c1(s.port);
    ASSERT_TRUE(c1.send_all("NOT HTTP AT ALL\r\n\r\n"));
    EXPECT_EQ(c1.read_reply().status, 400);
  }
  int refused = 0;
  {  // three connections held open (keep-alive); a fourth is refused at the cap
    std::vector<std::unique_ptr<Conn>> held;
    for (int i = 0; i < 3; ++i) {
      held.push_back(std::make_unique<Conn>(s.port));
      ASSERT_TRUE(held.back()->request("GET", "/health"));
      ASSERT_EQ(held.back()->read_reply().status, 200);
    }
    EXPECT_EQ(call(s.port, "GET", "/health").status, 503);
    ++refused;
  }
  // The held connections close; until the server has seen it, more answers are 503.
  Reply metrics;
  for (int i = 0; i < 500 && metrics.status != 200; ++i) {
    metrics = call(s.port, "GET", "/metrics");
    if (metrics.status == 503) ++refused;
    if (metrics.status != 200) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(metrics.status, 200);
  auto series = [&](const std::string& status) {
    const std::string name = "weir_serve_http_responses_total{status=\"" + status + "\"} ";
    const auto at = metrics.body.find(name);
    return at == std::string::npos ? NAN : std::stod(metrics.body.substr(at + name.size()));
  };
  EXPECT_EQ(series("503"), refused);
  EXPECT_EQ(series("413"), 1);
  EXPECT_EQ(series("431"), 1);
  EXPECT_EQ(series("4xx"), 1);  // the malformed request
  EXPECT_EQ(series("2xx"), 3);  // the held connections' /health
  // The refusals are a counter (break-doors 8: it was typed a gauge).
  EXPECT_NE(metrics.body.find("# TYPE weir_serve_connections_refused_total counter\n"
                              "weir_serve_connections_refused_total " +
                              std::to_string(refused) + "\n"),
            std::string::npos)
      << metrics.body;
}

// A valid body is never "malformed": 50,000 ids in 150 KB were refused as malformed JSON by the
// parser's memory cap (three times the text plus 1 MiB, while its message said three times).
TEST(ServeHttp, AValidBodyIsNeverCalledMalformed) {
  auto s = start(tiny_config("h4"));
  std::string ids;
  for (int i = 0; i < 50000; ++i) ids += (i ? "," : "") + std::to_string(10 + i % 90);
  const std::string body = R"({"tokens": [)" + ids + "]}";
  ASSERT_GT(body.size(), 140000u);
  auto r = call(s.port, "POST", "/detokenize", body);
  EXPECT_EQ(r.status, 200) << r.body.substr(0, 300);
  EXPECT_FALSE(body_json(r).at("prompt").as_string().empty());
  // The densest valid document: an array of one-digit numbers (a value of 16 bytes each).
  std::string ones(2 * 1000000, ',');
  for (std::size_t i = 0; i < ones.size(); i += 2) ones[i] = '1';
  ones.pop_back();
  auto dense = call(s.port, "POST", "/detokenize", R"({"tokens": [)" + ones + "]}");
  EXPECT_EQ(dense.status, 200) << dense.body.substr(0, 300);
  auto malformed = call(s.port, "POST", "/detokenize", R"({"tokens": [1, 2,]})");
  EXPECT_EQ(malformed.status, 400);
  EXPECT_EQ(error_message(malformed).rfind("malformed JSON: request body:1:", 0), 0u)
      << error_message(malformed);
}

// A request body's transient memory (its JSON value, the tokenizer's work, the answer) is charged
// to the budget: one 3.9 MB /tokenize took a server from 31 to 285 MB of RSS unaccounted.
TEST(ServeHttp, ARequestsMemoryIsChargedToTheBudget) {
  auto c = tiny_config("h5");
  c.request_memory_bytes = std::size_t{64} << 20;
  auto s = start(c);
  const std::string big = R"({"prompt": ")" + std::string(3900000, 'a') + R"("})";
  auto refused = call(s.port, "POST", "/tokenize", big);
  EXPECT_EQ(refused.status, 413) << refused.body.substr(0, 300);
  EXPECT_EQ(error_message(refused),
            "the request needs up to 238.0 MiB of memory to read (64 times its 3900014 bytes), "
            "more than --request-memory-mb=64 allows; send less");
  std::string text;
  while (text.size() < 500000) text += "hello world ";
  auto ok = call(s.port, "POST", "/tokenize", json::serialize(json::object{{"prompt", text}}));
  ASSERT_EQ(ok.status, 200) << ok.body.substr(0, 300);
  EXPECT_EQ(body_json(ok).at("count").as_int64(),
            static_cast<std::int64_t>(body_json(ok).at("tokens").as_array().size()));
  EXPECT_EQ(metric(s.port, "weir_memory_used_bytes{category=\"run_state\"}"), 0);
}

}  // namespace
}  // namespace weir::serve
