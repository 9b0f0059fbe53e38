// The OpenAI wire codec (weir/http/openai.hpp) in both directions, without a network: every
// shape a server parses or builds and a client builds or parses, run through both directions
// and compared field by field, and the errors each direction answers.
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "weir/http/openai.hpp"

namespace weir::http::openai {
namespace {

namespace json = boost::json;

// --- completion prompts ---------------------------------------------------------------------

TEST(OpenAiCodec, TokenPromptsOutsideInt32AreRefusedInEveryForm) {
  // Flat and nested (a batch of one) forms take the same token ids and refuse the same ones:
  // 4294967297 once wrapped to token 1 in the nested form.
  struct Case {
    const char* body;
    const char* error;  // "" = accepted
  };
  const Case cases[] = {
      {R"({"prompt": [1, 2]})", ""},
      {R"({"prompt": [[1, 2]]})", ""},
      {R"({"prompt": [2147483647]})", ""},
      {R"({"prompt": [[2147483647]]})", ""},
      {R"({"prompt": [4294967297]})", "'prompt' token ids must be integers from 0 to 2147483647"},
      {R"({"prompt": [[4294967297]]})", "'prompt' token ids must be integers from 0 to 2147483647"},
      {R"({"prompt": [[-1]]})", "'prompt' token ids must be integers from 0 to 2147483647"},
      {R"({"prompt": [-1]})", "'prompt' token ids must be integers from 0 to 2147483647"},
      {R"({"prompt": [[18446744073709551615]]})",
       "'prompt' token ids must be integers from 0 to 2147483647"},
      {R"({"prompt": [[1.5]]})", "'prompt' token ids must be integers from 0 to 2147483647"},
      {R"({"prompt": [[]]})", "'prompt' is empty"},
      {R"({"prompt": []})", "'prompt' is empty"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.body);
    CompletionRequest r;
    auto e = parse_completion_request(c.body, r);
    if (!*c.error) {
      EXPECT_FALSE(e) << e->message;
      EXPECT_TRUE(r.prompt_is_tokens);
      EXPECT_FALSE(r.prompt_tokens.empty());
      continue;
    }
    if (!e) {
      ADD_FAILURE() << "accepted as " << r.prompt_tokens.size() << " tokens, the first "
                    << (r.prompt_tokens.empty() ? -1 : r.prompt_tokens[0]);
      continue;
    }
    EXPECT_EQ(e->status, 400);
    EXPECT_EQ(e->param, "prompt");
    EXPECT_EQ(e->message, c.error);
  }
}

}  // namespace
}  // namespace weir::http::openai
